"""Search: which config each workload runs next, in as few expensive trials as possible.

:class:`Searcher` (:mod:`~autotune.search.searcher`) drives one workload's search by ask/tell:
the baseline first, the active config re-measured, then its :class:`Strategy`
(:mod:`~autotune.search.strategy`: guided, tpe, random, gp or grid) picks, within the budget
and never twice the same config. Every trial is kept in the workload's Optuna study
(:mod:`~autotune.search.study`).
"""

from __future__ import annotations

from autotune.search.searcher import PastTrial, Searcher, Suggestion, open_search
from autotune.search.strategy import (
    Proposal,
    Strategy,
    StrategySetup,
    available_strategies,
    create_strategy,
)
from autotune.search.study import TrialStudy, study_name

__all__ = [
    "PastTrial",
    "Proposal",
    "Searcher",
    "Strategy",
    "StrategySetup",
    "Suggestion",
    "TrialStudy",
    "available_strategies",
    "create_strategy",
    "open_search",
    "study_name",
]
