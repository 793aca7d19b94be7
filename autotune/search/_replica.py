"""A mean-field model of one vLLM replica serving a workload, for every candidate config at once.

Given a step cost (:mod:`._stepcost`), a workload (its requests' prompt and output lengths,
arrival times and per-request acceptance curves) and a config (window n, adaptive verification,
``max_num_seqs``, ``max_num_batched_tokens``), the model finds the steady state of vLLM's
scheduler at an arrival rate λ:

- decoding sequences B = λ · S̄ · t (Little's law; S̄ = mean decode steps per request, which is
  (O_i - 1) / E_i(n) from the acceptance model), prefill tokens per step λ·P̄·t, verified
  tokens per step T = B·(1 + m̄) + λ·P̄·t, and the step time t = cost(T, ...): a fixed point;
- adaptive verification keeps a draft position while its survival is worth its marginal step
  cost (survival ≥ B·Ē·∂t/∂T / t), which gives m̄ and E per request;
- p99 ITL: a step that carries a prefill chunk stalls every decoding sequence; the share of
  such steps longer than the SLO must stay under 1% (chunks of size
  ``max_num_batched_tokens - B·(1 + m̄)``);
- p99 TTFT: prompts queue first-come-first-served for the prefill budget (a fluid queue over
  the sample's real arrival times, scaled), plus the prefill time itself;
- ``max_num_seqs`` caps the sequences in flight, the KV cache caps their context.

The capacity reading (DESIGN §2 trace mode) is the highest arrival scale meeting both p99
SLOs, found by bisection on the model; closed-loop replays solve for the throughput at the
policy's concurrency instead. A few knobs of the model (``Knobs``) are fitted to what the
measured runs show (see :mod:`autotune.search.predictor`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from autotune.search._fluid import trace_latency
from autotune.search._meanfield import (
    KNOB_NAMES,
    Grid,
    Knobs,
    Latency,
    State,
    Workload,
    closed_latency,
    operate,
    weighted_quantile,
)
from autotune.search._stepcost import CostModel

__all__ = ["KNOB_NAMES", "Grid", "Knobs", "Outcomes", "Workload", "evaluate"]

FloatArray = npt.NDArray[np.float64]

#: Bounds of the capacity reading's arrival scale (as autotune.orchestrate.capacity).
MIN_SCALE, MAX_SCALE = 1 / 64, 64.0
_BISECTIONS = 14
#: Share of ITL gaps / requests allowed above the SLO for the p99 to meet it.
_TAIL = 0.01


@dataclass(frozen=True)
class Outcomes:
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


def latency(wl: Workload, grid: Grid, cost: CostModel, knobs: Knobs, st: State,
            scale: FloatArray) -> Latency:
    """Latencies of a replay: the fluid trace replay, or the closed-loop steady state."""
    if wl.mode == "closed":
        return closed_latency(wl, grid, cost, knobs, st, scale)
    return trace_latency(wl, grid, cost, knobs, st, scale)


def _meets(wl: Workload, lat: Latency) -> npt.NDArray[np.bool_]:
    """p99 ITL and p99 TTFT within the SLO, by counting what exceeds it (no sorting)."""
    ok = lat.feasible.copy()
    slo = wl.slo
    if slo.itl_p99_ms is not None:
        over = (lat.weights * (lat.durations * 1000.0 > slo.itl_p99_ms)).sum(axis=1)
        ok &= over <= _TAIL * lat.weights.sum(axis=1)
    if slo.ttft_p99_ms is not None and wl.measured.any():
        bound = slo.ttft_p99_ms / 1000.0 - lat.slot_extra
        late = (lat.ttft[:, wl.measured] > bound[:, None]).mean(axis=1)
        ok &= late <= _TAIL
    return ok


def _feasible_at(wl: Workload, grid: Grid, cost: CostModel, knobs: Knobs, scale: FloatArray,
                 t0: FloatArray | None) -> tuple[npt.NDArray[np.bool_], FloatArray]:
    st = operate(wl, grid, cost, knobs, scale * wl.base_rate, t0)
    return _meets(wl, latency(wl, grid, cost, knobs, st, scale)), st.t


def _read(wl: Workload, grid: Grid, cost: CostModel, knobs: Knobs, scale: FloatArray,
          objective: str) -> Outcomes:
    """Everything at the given arrival scales (trace) or at the concurrency (closed)."""
    closed = wl.mode == "closed"
    st = operate(wl, grid, cost, knobs, None if closed else scale * wl.base_rate)
    lat = latency(wl, grid, cost, knobs, st, scale)
    meas = wl.measured
    slo = wl.slo
    ttft_m = lat.ttft[:, meas]
    if closed:
        over = np.maximum(wl.concurrency - grid.seqs, 0.0)
        ttft_m = ttft_m + (over / np.maximum(st.lam, 1e-9))[:, None]
    ttft_p99 = (np.quantile(ttft_m, 0.99, axis=1) if meas.any() else np.zeros(len(grid))) \
        + lat.slot_extra
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
        tpot = step[:, meas] * math.exp(knobs.itl) / e[:, meas]
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
    return Outcomes(value=value * math.exp(knobs.bias), scale=scale,
                    feasible=feasible & (margin >= 0), margin=margin, step_s=mean_step,
                    batch=st.b,
                    itl_p99_ms=itl * 1000.0, ttft_p99_ms=ttft_p99 * 1000.0,
                    tokens_per_step=tps)


def evaluate(wl: Workload, grid: Grid, cost: CostModel, knobs: Knobs, objective: str,
             scale: FloatArray | None = None) -> Outcomes:
    """The model's reading of every config: at capacity (trace with find_capacity), at the
    given ``scale`` when passed, else at the policy's time scale or concurrency."""
    k = len(grid)
    if scale is not None:
        return _read(wl, grid, cost, knobs, scale, objective)
    if not wl.find_capacity:
        return _read(wl, grid, cost, knobs, np.full(k, wl.time_scale), objective)
    lo = np.full(k, math.log(MIN_SCALE))
    hi = np.full(k, math.log(MAX_SCALE))
    base_ok, t_lo = _feasible_at(wl, grid, cost, knobs, np.exp(lo), None)
    top_ok, _ = _feasible_at(wl, grid, cost, knobs, np.exp(hi), None)
    lo = np.where(top_ok, hi, lo)
    for _ in range(_BISECTIONS):
        mid = (lo + hi) / 2.0
        ok, _ = _feasible_at(wl, grid, cost, knobs, np.exp(mid), t_lo)
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    out = _read(wl, grid, cost, knobs, np.exp(lo), objective)
    return replace(out, feasible=base_ok & out.feasible)
