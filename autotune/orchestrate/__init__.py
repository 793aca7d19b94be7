"""Orchestration: the tuning pass and the pools of replicas its trials run on.

:func:`tune` (:mod:`~autotune.orchestrate.tuning`) runs a pass in named stages: load the
workloads (:mod:`~autotune.orchestrate.workloads`), open or resume the run
(:mod:`~autotune.orchestrate.runs`), drive the trials (:mod:`~autotune.orchestrate.trials`,
sharing replicas by :mod:`~autotune.orchestrate.fair_share`), recommend
(:mod:`autotune.recommend`). Trials run on a :class:`Pool`: in this process
(:class:`SerialPool`) or on Ray replica actors (:mod:`~autotune.orchestrate.ray_pool`), read at
capacity when the policy asks (:mod:`~autotune.orchestrate.capacity`). Around them: the stop
signals and how they stop a pass cleanly (:mod:`~autotune.orchestrate.signals`), whether a
process runs (:mod:`~autotune.orchestrate.processes`) and the moments a pass announces
(:mod:`~autotune.orchestrate.moments`).
"""

from __future__ import annotations

from autotune.orchestrate.options import Reporter, TuneOptions
from autotune.orchestrate.pool import Pool, SerialPool, TrialResult, TrialTask, run_trial
from autotune.orchestrate.tuning import TuneResult, WorkloadResult, tune

__all__ = ["Pool", "Reporter", "SerialPool", "TrialResult", "TrialTask", "TuneOptions",
           "TuneResult", "WorkloadResult", "run_trial", "tune"]
