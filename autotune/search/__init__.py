"""Search: one Optuna study per workload, driven by ask/tell (DESIGN §7)."""

from __future__ import annotations

from autotune.search.objective import Outcome, Scored, evaluate, select_best
from autotune.search.study import PastTrial, Searcher, Suggestion, study_name

__all__ = ["Outcome", "PastTrial", "Scored", "Searcher", "Suggestion", "evaluate",
           "select_best", "study_name"]
