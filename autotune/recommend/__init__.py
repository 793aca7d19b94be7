"""Recommendation: from a workload's finished trials to the config users deploy.

Choosing the best trial meeting the SLO (:mod:`~autotune.recommend.choose`), the significance
test against the active recommendation (:mod:`~autotune.recommend.significance`), provenance
(:mod:`~autotune.recommend.provenance`), the window-by-batch schedule
(:mod:`~autotune.recommend.schedule`), the lead over the runner-up against the replay noise
(:mod:`~autotune.recommend.runner_up`), promotion and export-on-promote
(:mod:`~autotune.recommend.promotion`), put together by :func:`recommend_workload`
(:mod:`~autotune.recommend.workload`). It imports no search strategy: it sees outcomes only.
"""

from __future__ import annotations

from autotune.recommend.choose import Scored, select_best
from autotune.recommend.feasibility import Feasibility, judge_feasibility, slo_probability
from autotune.recommend.promotion import export_file_name, export_promoted, should_promote
from autotune.recommend.provenance import run_provenance, workload_provenance
from autotune.recommend.runner_up import Race, runner_up_race
from autotune.recommend.schedule import WindowPoint, window_schedule
from autotune.recommend.significance import (
    Comparison,
    PromotionDecision,
    RequestRates,
    compare_rates,
    decide,
    rate_interval,
    request_rates,
)
from autotune.recommend.workload import WorkloadResult, WorkloadTrials, recommend_workload

__all__ = [
    "Comparison",
    "Feasibility",
    "PromotionDecision",
    "Race",
    "RequestRates",
    "Scored",
    "WindowPoint",
    "WorkloadResult",
    "WorkloadTrials",
    "compare_rates",
    "decide",
    "export_file_name",
    "export_promoted",
    "judge_feasibility",
    "rate_interval",
    "recommend_workload",
    "request_rates",
    "run_provenance",
    "runner_up_race",
    "select_best",
    "should_promote",
    "slo_probability",
    "window_schedule",
    "workload_provenance",
]
