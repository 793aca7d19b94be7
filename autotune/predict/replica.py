"""What a trial would read on one vLLM replica serving a workload, for every candidate at once.

Given a step cost (:mod:`autotune.predict.step_cost`: published facts, fitted multipliers), a
workload (its requests' prompt and output lengths, arrival times and per-request acceptance
curves) and the candidate configs (window n, adaptive verification, ``max_num_seqs``,
``max_num_batched_tokens``), :func:`predict_replica` reads what a replay would measure:

- trace replays: a fluid replay over the sample's own arrival times
  (:mod:`autotune.predict.trace_replay`), on top of the scheduler's steady state at that rate
  (:mod:`autotune.predict.steady_state`), giving per-request TTFT and decode step times, the
  distribution of ITL gaps, and goodput over the replay's span;
- the capacity reading (as :mod:`autotune.orchestrate.capacity` measures it): the highest
  arrival scale whose p99 TTFT and p99 ITL meet the SLO, bisected on the model; the objective
  is read there;
- closed-loop replays: the steady state at the policy's concurrency
  (:mod:`autotune.predict.closed_loop`).

A few factors of the model (:class:`~autotune.predict.workload.ReplicaFactors`) are fitted to
what the measured runs show (:mod:`autotune.predict.predictor`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from autotune.predict.closed_loop import closed_loop_latency
from autotune.predict.latency import PredictedLatency
from autotune.predict.numerics import weighted_quantile
from autotune.predict.steady_state import SteadyState, solve_steady_state
from autotune.predict.step_cost import StepCostModel
from autotune.predict.trace_replay import trace_replay_latency
from autotune.predict.workload import ConfigGrid, ReplicaFactors, WorkloadModel
from autotune.slo import MAX_SCALE, MIN_SCALE, SETTLE_LIFETIMES, busiest_slices, lifetime_s

__all__ = ["ReplicaOutcomes", "latency", "lifetimes", "measured_ttft", "predict_replica",
           "settle_margins"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: the rates a capacity is first looked for at (MIN_SCALE to MAX_SCALE in steps of 4x), the
#: halvings of the step found, and after how many of them configs far below the best stop
_COARSE = 7
_BISECTIONS = 10
_PRUNE_AFTER = 2
#: Share of ITL gaps / requests allowed above the SLO for the p99 to meet it.
_TAIL = 0.01


@dataclass(frozen=True)
class ReplicaOutcomes:
    """Model outputs per config (arrays of length K)."""

    value: FloatArray        # predicted objective (goodput or output tokens/s)
    scale: FloatArray        # arrival scale the value is read at (capacity, or the policy's)
    feasible: npt.NDArray[np.bool_]
    margin: FloatArray       # log(SLO bound / predicted p99), the tightest of the two
    step_s: FloatArray       # mean step time at that load
    batch: FloatArray        # mean decoding sequences
    itl_p99_ms: FloatArray
    ttft_p99_ms: FloatArray
    tokens_per_step: FloatArray


def latency(wl: WorkloadModel, grid: ConfigGrid, cost: StepCostModel, factors: ReplicaFactors,
            st: SteadyState, scale: FloatArray) -> PredictedLatency:
    """Latencies of a replay: the fluid trace replay, or the closed-loop steady state."""
    if wl.mode == "closed":
        return closed_loop_latency(wl, grid, cost, factors, st)
    return trace_replay_latency(wl, grid, cost, factors, st, scale)


def measured_ttft(wl: WorkloadModel, grid: ConfigGrid, lat: PredictedLatency,
                  st: SteadyState, *, wait: bool = False) -> FloatArray:
    """(K, measured requests) TTFT (s) of the requests a replay measures (with ``wait``: the
    part of it spent waiting, not prefilling); in a closed loop, a concurrency above
    ``max_num_seqs`` waits for a slot at the completion rate first."""
    part = lat.wait if wait else lat.ttft
    ttft = (np.zeros_like(lat.ttft) if part is None else part)[:, wl.measured]
    if wl.mode == "closed":
        over = np.maximum(wl.concurrency - grid.seqs, 0.0)
        ttft = ttft + (over / np.maximum(st.lam, 1e-9))[:, None]
    return ttft


def _windows(wl: WorkloadModel, scale: FloatArray) -> npt.NDArray[np.bool_]:
    """(K, N): the requests a capacity reading at each ``scale`` measures: the busiest slice of
    the sample whose arrivals fit in ``replay.window_s`` at that rate (the measured requests
    when there is no window or the whole sample fits), as the reading picks it
    (:func:`autotune.slo.busiest_slices`)."""
    n = wl.arrival.size
    if wl.window_s is None or n == 0:
        return np.broadcast_to(wl.measured, (scale.size, n))
    i, j = busiest_slices(wl.arrival, wl.window_s * scale)
    idx = np.arange(n)
    inside = (idx >= i[:, None]) & (idx < j[:, None])
    whole = (i == 0) & (j == n)
    out: npt.NDArray[np.bool_] = np.where(whole[:, None], wl.measured[None, :], inside)
    return out


def lifetimes(wl: WorkloadModel, lat: PredictedLatency, scale: FloatArray
              ) -> tuple[FloatArray, FloatArray]:
    """Per config, the request lifetime (s) a capacity reading at ``scale`` measures
    (:func:`autotune.slo.lifetime_s`: its requests' median E2E or, when longer, the drain
    after their last arrival), and the replica seconds its arrivals span; over the requests
    the reading replays (:func:`_windows`). NaN without completion times (a closed loop)."""
    k = lat.ttft.shape[0]
    if lat.end is None or not wl.measured.any():
        return np.full(k, np.nan), np.full(k, np.nan)
    win = _windows(wl, scale)
    arrive = wl.arrival[None, :] / scale[:, None]
    e2e = np.nanmedian(np.where(win, lat.end - arrive, np.nan), axis=1)
    first = np.min(np.where(win, arrive, np.inf), axis=1)
    last = np.max(np.where(win, arrive, -np.inf), axis=1)
    done = np.max(np.where(win, lat.end, -np.inf), axis=1)
    life = np.asarray([lifetime_s(float(e), float(d - f), float(w - f))
                       for e, d, f, w in zip(e2e, done, first, last, strict=True)])
    return life, last - first


def settle_margins(life: FloatArray, span: FloatArray) -> FloatArray:
    """Per row, log(:data:`~autotune.slo.SETTLE_LIFETIMES` × ``life`` / ``span``): <= 0 when a
    capacity reading whose requests live ``life`` s and arrive over ``span`` s
    (:func:`lifetimes`) is a sustained rate (its window spans the lifetimes the queue and
    batch need to settle), > 0 when it would only drain a burst, which the reading does not
    credit (:func:`autotune.orchestrate.capacity_window.settle_margin`); -inf where no
    lifetime is known (a closed loop, which reads no capacity)."""
    life = np.asarray(life, dtype=np.float64)
    known = ~np.isnan(life)
    out: FloatArray = np.full(life.shape, -np.inf)
    with np.errstate(divide="ignore"):
        out[known] = np.log(SETTLE_LIFETIMES * np.maximum(life[known], 1e-12)
                            / np.maximum(np.asarray(span, dtype=np.float64)[known], 1e-12))
    return out


def _meets(wl: WorkloadModel, lat: PredictedLatency, scale: FloatArray
           ) -> npt.NDArray[np.bool_]:
    """p99 ITL and p99 TTFT within the SLO, by counting what exceeds it (no sorting), and the
    reading a sustained rate (:func:`settle_margins`)."""
    ok = lat.feasible.copy()
    if wl.find_capacity:
        ok &= settle_margins(*lifetimes(wl, lat, scale)) <= 0
    slo = wl.slo
    if slo.itl_p99_ms is not None:
        over = (lat.weights * (lat.durations * 1000.0 > slo.itl_p99_ms)).sum(axis=1)
        ok &= over <= _TAIL * lat.weights.sum(axis=1)
    if slo.ttft_p99_ms is not None and wl.measured.any():
        late = (lat.ttft[:, wl.measured] > slo.ttft_p99_ms / 1000.0).mean(axis=1)
        ok &= late <= _TAIL
    return ok


def _feasible_at(wl: WorkloadModel, grid: ConfigGrid, cost: StepCostModel,
                 factors: ReplicaFactors, scale: FloatArray, t0: FloatArray | None
                 ) -> tuple[npt.NDArray[np.bool_], FloatArray]:
    st = solve_steady_state(wl, grid, cost, factors, scale * wl.base_rate, t0)
    return _meets(wl, latency(wl, grid, cost, factors, st, scale), scale), st.t


def _read(wl: WorkloadModel, grid: ConfigGrid, cost: StepCostModel, factors: ReplicaFactors,
          scale: FloatArray, objective: str) -> ReplicaOutcomes:
    """Everything at the given arrival scales (trace) or at the concurrency (closed)."""
    closed = wl.mode == "closed"
    st = solve_steady_state(wl, grid, cost, factors, None if closed else scale * wl.base_rate)
    lat = latency(wl, grid, cost, factors, st, scale)
    meas = wl.measured
    slo = wl.slo
    ttft_m = measured_ttft(wl, grid, lat, st)
    ttft_p99 = np.quantile(ttft_m, 0.99, axis=1) if meas.any() else np.zeros(len(grid))
    itl = weighted_quantile(lat.durations, lat.weights, 1.0 - _TAIL)
    margins = [np.full(len(grid), np.inf)]
    if slo.itl_p99_ms is not None:
        margins.append(np.log(slo.itl_p99_ms / 1000.0 / np.maximum(itl, 1e-9)))
    if slo.ttft_p99_ms is not None:
        margins.append(np.log(slo.ttft_p99_ms / 1000.0 / np.maximum(ttft_p99, 1e-9)))
    margin = np.min(np.vstack(margins), axis=0)
    e, steps = wl.per_request(grid.n, st.g, st.gain)
    met = np.ones_like(ttft_m, dtype=bool)
    if slo.ttft_p99_ms is not None:
        met &= ttft_m * 1000.0 <= slo.ttft_p99_ms
    step = lat.step if lat.step is not None else np.broadcast_to(st.t[:, None], e.shape)
    if slo.itl_p99_ms is not None:
        tpot = step[:, meas] * math.exp(factors.itl) / e[:, meas]
        met &= tpot * 1000.0 <= slo.itl_p99_ms
    attain = met.mean(axis=1) if meas.any() else np.ones(len(grid))
    count = float(meas.sum())
    tokens = float(wl.output[meas].sum())
    feasible = lat.feasible
    if closed:
        rate = st.lam * np.where(feasible, 1.0, 0.5)
        value = attain * rate if objective == "goodput" else rate * tokens / max(count, 1.0)
    else:
        arrive = wl.arrival[meas][None, :] / scale[:, None]
        end = lat.end[:, meas] if lat.end is not None else \
            arrive + ttft_m + steps[:, meas] * st.t[:, None]
        duration = end.max(axis=1) - arrive[:, 0]
        value = (count * attain if objective == "goodput" else tokens) / duration
        value = value * np.where(feasible, 1.0, 0.5)
    tps = np.maximum(wl.output - 1.0, 1.0).sum() / steps.sum(axis=1)
    mean_step = (step * steps).sum(axis=1) / steps.sum(axis=1)
    return ReplicaOutcomes(value=value * math.exp(factors.bias), scale=scale,
                           feasible=feasible & (margin >= 0), margin=margin, step_s=mean_step,
                           batch=st.b,
                           itl_p99_ms=itl * 1000.0, ttft_p99_ms=ttft_p99 * 1000.0,
                           tokens_per_step=tps)


def _subgrid(grid: ConfigGrid, idx: IntArray) -> ConfigGrid:
    return ConfigGrid(tuple(grid.configs[i] for i in idx), grid.n[idx], grid.av[idx],
                      grid.seqs[idx], grid.tok[idx])


def predict_replica(wl: WorkloadModel, grid: ConfigGrid, cost: StepCostModel,
                    factors: ReplicaFactors, objective: str, scale: FloatArray | None = None,
                    bisections: int = _BISECTIONS) -> ReplicaOutcomes:
    """The model's reading of every config: at capacity (trace with find_capacity), at the
    given ``scale`` when passed, else at the policy's time scale or concurrency.

    The capacity is the fastest rate met, as a capacity reading credits it: the fastest of
    :data:`_COARSE` rates from :data:`~autotune.slo.MIN_SCALE` up that meets the SLO, then
    bisected on the log scale up to the next (which missed). Met need not fall with the rate
    (at the slowest rates a window holds few requests, and one long request's drain can leave
    a reading unsustained where faster ones settle: :func:`settle_margins`), so a config has a
    capacity when any of those rates is met, not only the slowest. After a few halvings,
    configs whose capacity is below half of the best one's are no longer refined (they cannot
    be near the top).
    """
    k = len(grid)
    if scale is not None:
        return _read(wl, grid, cost, factors, scale, objective)
    if not wl.find_capacity:
        return _read(wl, grid, cost, factors, np.full(k, wl.time_scale), objective)
    coarse = np.linspace(math.log(MIN_SCALE), math.log(MAX_SCALE), _COARSE)
    met = np.vstack([_feasible_at(wl, grid, cost, factors, np.full(k, math.exp(c)), None)[0]
                     for c in coarse])
    any_met = met.any(axis=0)
    top = np.where(any_met, (_COARSE - 1) - np.argmax(met[::-1], axis=0), 0)
    lo = coarse[top]
    hi = np.where(top < _COARSE - 1, coarse[np.minimum(top + 1, _COARSE - 1)], coarse[top])
    active = np.arange(k)[any_met & (hi > lo)]
    for i in range(bisections):
        if i == _PRUNE_AFTER:
            active = active[hi[active] >= lo.max() - math.log(2.0)]
        if not active.size:
            break
        sub = grid if active.size == k else _subgrid(grid, active)
        mid = (lo[active] + hi[active]) / 2.0
        ok, _ = _feasible_at(wl, sub, cost, factors, np.exp(mid), None)
        lo[active] = np.where(ok, mid, lo[active])
        hi[active] = np.where(ok, hi[active], mid)
    out = _read(wl, grid, cost, factors, np.exp(lo), objective)
    return replace(out, feasible=any_met & out.feasible)
