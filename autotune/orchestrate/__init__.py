"""Orchestration: the tuning pass and the pools of replicas its trials run on (DESIGN §8)."""

from __future__ import annotations

from autotune.orchestrate.pool import Pool, SerialPool, TrialResult, TrialTask, run_trial
from autotune.orchestrate.tuning import Reporter, TuneOptions, TuneResult, WorkloadResult, tune

__all__ = ["Pool", "Reporter", "SerialPool", "TrialResult", "TrialTask", "TuneOptions",
           "TuneResult", "WorkloadResult", "run_trial", "tune"]
