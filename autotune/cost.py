"""What tuning costs on real replicas: server starts and replayed traffic, in replica-hours and
GPU-hours (docs/architecture.md, "Cost and budget").

A trial costs the replica time it holds: its server's start (measured on ``vllm`` from process
launch to a healthy server; on ``sim`` the profile's stated start time; 0 when the trial reused
a server that a trial of the same config, for another workload, had started) plus the replica
time of every reading it replayed (:attr:`autotune.types.Measurement.busy_s`, warm-up and drain
included). Replica-hours times the GPUs one replica occupies are its GPU-hours. The figures are
the same on every backend: a simulated second is a second of a real replica.

The trial's cost travels in its metrics under the ``cost_*`` keys (:data:`START`,
:data:`REPLAY`, :data:`REPLICA_H`, :data:`GPU_H`, and the start's source string
:data:`SOURCE`); :func:`trial_cost` reads them back (None for a trial stored before cost was
recorded, or one that failed). This module imports nothing of autotune: every layer reads cost
through it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["GPU_H", "REPLAY", "REPLICA_H", "SOURCE", "START", "CostTotal", "TrialCost",
           "pass_cost", "total", "trial_cost"]

#: Metric keys of a trial's cost (the contract between the issue-37 parts).
START = "cost_start_s"
REPLAY = "cost_replay_s"
REPLICA_H = "cost_replica_h"
GPU_H = "cost_gpu_h"
SOURCE = "cost_start_source"


@dataclass(frozen=True)
class TrialCost:
    """One trial's replica time: ``start_s`` (its server's start charged to it) and
    ``replay_s`` (Σ replica seconds of its readings), on a replica of ``gpus`` GPUs."""

    start_s: float
    replay_s: float
    gpus: int

    @property
    def replica_s(self) -> float:
        return self.start_s + self.replay_s

    @property
    def replica_h(self) -> float:
        return self.replica_s / 3600.0

    @property
    def gpu_h(self) -> float:
        return self.replica_h * self.gpus

    def metrics(self) -> dict[str, float]:
        """The trial-metric keys this cost is stored under."""
        return {START: self.start_s, REPLAY: self.replay_s, REPLICA_H: self.replica_h,
                GPU_H: self.gpu_h}


def _number(metrics: Mapping[str, Any], key: str) -> float | None:
    value = metrics.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def trial_cost(metrics: Mapping[str, Any]) -> TrialCost | None:
    """A stored trial's cost from its metrics; None when they do not hold one."""
    start, replay = _number(metrics, START), _number(metrics, REPLAY)
    replica_h, gpu_h = _number(metrics, REPLICA_H), _number(metrics, GPU_H)
    if start is None or replay is None:
        return None
    gpus = round(gpu_h / replica_h) if gpu_h is not None and replica_h else 0
    return TrialCost(start, replay, int(gpus))


@dataclass(frozen=True)
class CostTotal:
    """The cost of several trials (a workload's, a pass's): how many were counted, how many
    server starts they paid, and their replica and GPU time. ``uncounted``: trials whose cost
    is unknown (failed, or stored before cost was recorded): the total is a lower bound when
    it is not 0."""

    trials: int = 0
    uncounted: int = 0
    starts: int = 0
    start_s: float = 0.0
    replay_s: float = 0.0
    gpu_h: float = 0.0

    @property
    def replica_h(self) -> float:
        return (self.start_s + self.replay_s) / 3600.0

    def add(self, cost: TrialCost | None) -> CostTotal:
        if cost is None:
            return CostTotal(self.trials, self.uncounted + 1, self.starts, self.start_s,
                             self.replay_s, self.gpu_h)
        return CostTotal(self.trials + 1, self.uncounted, self.starts + (cost.start_s > 0),
                         self.start_s + cost.start_s, self.replay_s + cost.replay_s,
                         self.gpu_h + cost.gpu_h)

    def as_json(self) -> dict[str, Any]:
        return {"trials": self.trials, "uncounted_trials": self.uncounted,
                "server_starts": self.starts, "start_s": round(self.start_s, 3),
                "replay_s": round(self.replay_s, 3), "replica_h": round(self.replica_h, 4),
                "gpu_h": round(self.gpu_h, 4)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CostTotal:
        return cls(trials=int(data.get("trials", 0)),
                   uncounted=int(data.get("uncounted_trials", 0)),
                   starts=int(data.get("server_starts", 0)),
                   start_s=float(data.get("start_s", 0.0)),
                   replay_s=float(data.get("replay_s", 0.0)), gpu_h=float(data.get("gpu_h", 0.0)))

    def describe(self) -> str:
        """``3.52 replica-h = 28.2 GPU-h (25 trials, 9 server starts)``."""
        counted = f"{self.trials} trial{'s' if self.trials != 1 else ''}"
        if self.uncounted:
            counted += f" + {self.uncounted} not counted"
        return (f"{self.replica_h:.3g} replica-h = {self.gpu_h:.3g} GPU-h ({counted}, "
                f"{self.starts} server start{'s' if self.starts != 1 else ''})")


def total(costs: Iterable[TrialCost | None]) -> CostTotal:
    out = CostTotal()
    for c in costs:
        out = out.add(c)
    return out


def pass_cost(trials: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """A pass's cost from its trials' ``(workload, metrics)``: ``total`` and per ``workloads``
    (:meth:`CostTotal.as_json`), and ``start_sources`` (where the charged starts' figures come
    from)."""
    whole = CostTotal()
    per: dict[str, CostTotal] = {}
    sources: set[str] = set()
    for workload, metrics in trials:
        cost = trial_cost(metrics)
        whole = whole.add(cost)
        per[workload] = per.get(workload, CostTotal()).add(cost)
        source = metrics.get(SOURCE)
        if cost is not None and cost.start_s > 0 and isinstance(source, str):
            sources.add(source)
    return {"total": whole.as_json(), "workloads": {k: v.as_json() for k, v in per.items()},
            "start_sources": sorted(sources)}
