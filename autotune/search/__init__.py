"""Search: one Optuna study per workload, driven by ask/tell (DESIGN §7)."""

from __future__ import annotations

from autotune.search.study import PastTrial, Searcher, Suggestion, study_name

__all__ = ["PastTrial", "Searcher", "Suggestion", "study_name"]
