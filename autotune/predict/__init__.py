"""The model of a vLLM replica the guided search uses to score configs before running them.

Given a workload (its requests' lengths, arrival times and per-request acceptance curves) and
every candidate config of the policy's space, it predicts what a trial would measure: the
objective (at capacity in trace mode) with an interval, and the risk of missing the SLO. The
parts, each in its own module:

- :mod:`~autotune.predict.facts`: published model and hardware facts;
- :mod:`~autotune.predict.step_cost`: the time of one engine step, from those facts, with a
  fitted multiplier per part;
- :mod:`~autotune.predict.workload`: the workload and the configs as arrays, and the fitted
  factors of the replica model;
- :mod:`~autotune.predict.steady_state`: the scheduler's steady state at an arrival rate;
- :mod:`~autotune.predict.closed_loop`: a closed-loop replay, read from the steady state;
- :mod:`~autotune.predict.trace_replay`: a fluid replay of the trace's own arrival times;
- :mod:`~autotune.predict.latency`: what either replay predicts a replay measures;
- :mod:`~autotune.predict.replica`: what a trial reads (goodput or tokens/s, p99s), at
  capacity or at the policy's rate;
- :mod:`~autotune.predict.residual`: the model's remaining error at measured configs, spread
  to their neighbours;
- :mod:`~autotune.predict.tail`: the p99 TTFT and ITL a reading measures at a rate, as a
  predictive distribution calibrated on every reading;
- :mod:`~autotune.predict.observation`: what one measured run tells the predictor;
- :mod:`~autotune.predict.predictor`: the :class:`Predictor` that calibrates, fits and scores.

It sees measurements only: nothing here imports a backend (the simulator's hidden truth stays
inside ``autotune.backends.sim``).
"""

from __future__ import annotations

from autotune.predict.facts import Facts
from autotune.predict.observation import DECODE_STATS, Observation, decode_stats
from autotune.predict.predictor import Prediction, Predictor
from autotune.predict.replica import ReplicaOutcomes, predict_replica
from autotune.predict.residual import Residual, fit_residual
from autotune.predict.step_cost import COST_PARTS, StepCostModel
from autotune.predict.tail import TailForecast, TailModel, TailReading
from autotune.predict.workload import FACTOR_NAMES, ConfigGrid, ReplicaFactors, WorkloadModel

__all__ = [
    "COST_PARTS",
    "DECODE_STATS",
    "FACTOR_NAMES",
    "ConfigGrid",
    "Facts",
    "Observation",
    "Prediction",
    "Predictor",
    "ReplicaFactors",
    "ReplicaOutcomes",
    "Residual",
    "StepCostModel",
    "TailForecast",
    "TailModel",
    "TailReading",
    "WorkloadModel",
    "decode_stats",
    "fit_residual",
    "predict_replica",
]
