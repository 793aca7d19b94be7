"""The physics layer of the tail model (:mod:`autotune.predict.tail`): the replica model's ITL
gaps, TTFTs and request lifetimes at K (config, rate) rows, as the sampling law and the
calibration read them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autotune.predict.numerics import weighted_quantile
from autotune.predict.replica import latency, lifetimes, measured_ttft
from autotune.predict.steady_state import solve_steady_state
from autotune.predict.step_cost import StepCostModel
from autotune.predict.workload import ConfigGrid, ReplicaFactors, WorkloadModel
from autotune.types import TrialConfig

__all__ = ["NEAR_P99", "Physics", "finite", "physics", "slow_runs"]

FloatArray = npt.NDArray[np.float64]

#: The slowest share of gaps (requests) whose make-up says which part of the tail the p99 is.
NEAR_P99 = 0.02
#: What an unbounded step or wait (an unstable queue) counts as (s).
_UNBOUNDED_S = 1e6


@dataclass(frozen=True)
class Physics:
    """The replica model's tail of K (config, rate) rows."""

    durations: FloatArray   # (K, M) step durations (s)
    weights: FloatArray     # (K, M) gaps lasting each
    stall_from: int         # columns from here on stall the decoding batch together
    cluster: FloatArray     # (K,) gaps one chunk step stalls: the decoding batch, >= 1
    ttft: FloatArray        # (K, N) measured requests' TTFT (s)
    wait: FloatArray        # (K, N) the part of it spent waiting (slot, prefill queue)
    feasible: npt.NDArray[np.bool_]
    #: (K,) requests one queue episode makes slow together (:func:`slow_runs`); None: 1
    ttft_cluster: FloatArray | None = None
    #: (K,) the request lifetime a capacity reading measures (s; NaN: none, a closed loop),
    #: and the replica seconds its arrivals span
    lifetime: FloatArray | None = None
    span: FloatArray | None = None

    def share(self, tail: str) -> FloatArray:
        """Per row, the share of the p99's neighbourhood (the slowest :data:`NEAR_P99` of the
        gaps or requests) owed to the second part of the tail: stalled gaps among the ITL
        gaps, waiting in the TTFT."""
        if tail == "itl_p99_ms":
            d, w = self.durations, np.maximum(self.weights, 0.0)
            edge = weighted_quantile(d, w, 1.0 - NEAR_P99)[:, None]
            near = w * (d >= edge)
            stalled = near[:, self.stall_from:].sum(axis=1)
            return stalled / np.maximum(near.sum(axis=1), 1e-12)
        edge = np.quantile(self.ttft, 1.0 - NEAR_P99, axis=1)[:, None]
        near = self.ttft >= edge
        share = np.clip(self.wait / np.maximum(self.ttft, 1e-12), 0.0, 1.0)
        out: FloatArray = (share * near).sum(axis=1) / np.maximum(near.sum(axis=1), 1)
        return out


def physics(wl: WorkloadModel, configs: Sequence[TrialConfig], scales: FloatArray,
             cost: StepCostModel, factors: ReplicaFactors) -> Physics:
    grid = ConfigGrid.of(configs)
    closed = wl.mode == "closed"
    st = solve_steady_state(wl, grid, cost, factors, None if closed else scales * wl.base_rate)
    lat = latency(wl, grid, cost, factors, st, scales)
    # an unstable queue's steps and waits are unbounded: a large finite time keeps the counts
    # well defined (such a row misses every bound)
    ttft = finite(measured_ttft(wl, grid, lat, st))
    return Physics(finite(lat.durations), finite(lat.weights), lat.stall_from,
                    np.maximum(finite(st.b), 1.0), ttft,
                    finite(measured_ttft(wl, grid, lat, st, wait=True)), lat.feasible,
                    slow_runs(ttft), *lifetimes(wl, lat, scales))


def slow_runs(ttft: FloatArray) -> FloatArray:
    """Per row, the mean length of the runs (in arrival order) of requests among the slowest
    :data:`NEAR_P99`: a queue that builds up delays the requests arriving into it together,
    so the TTFTs above a level come in runs, and how many exceed it varies by whole runs."""
    edge = np.quantile(ttft, 1.0 - NEAR_P99, axis=1)[:, None]
    slow = ttft >= edge
    starts = slow[:, :1].astype(np.float64).sum(axis=1) + (slow[:, 1:] & ~slow[:, :-1]).sum(axis=1)
    out: FloatArray = np.maximum(slow.sum(axis=1) / np.maximum(starts, 1.0), 1.0)
    return out


def finite(values: FloatArray) -> FloatArray:
    out: FloatArray = np.nan_to_num(values, nan=0.0, posinf=_UNBOUNDED_S, neginf=0.0)
    return out
