"""The scheduler's steady state (mean field), shared by the replica model's readings.

:func:`solve_steady_state` solves vLLM's scheduler steady state at an arrival rate (decoding
sequences B = λ·S̄·t by Little's law, verified tokens T = B·(1 + m̄) + λ·P̄·t, step time
t = cost(T, ...), adaptive verification keeping a draft position while its survival is worth
its marginal step cost); :func:`closed_loop_latency` reads a closed-loop replay from it. The
trace replay is :mod:`autotune.predict.trace_replay`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autotune.predict.step_cost import StepCostModel
from autotune.predict.workload import THRESHOLDS, ConfigGrid, ReplicaFactors, WorkloadModel

__all__ = ["PredictedLatency", "SteadyState", "closed_loop_latency", "solve_steady_state"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_ITERATIONS = 60


@dataclass
class SteadyState:
    lam: FloatArray
    t: FloatArray
    b: FloatArray
    g: IntArray
    gain: FloatArray
    s_bar: FloatArray
    m_bar: FloatArray
    ctx: FloatArray
    e_bar: FloatArray
    stable: npt.NDArray[np.bool_]


def solve_steady_state(wl: WorkloadModel, grid: ConfigGrid, cost: StepCostModel,
                       factors: ReplicaFactors, lam: FloatArray | None,
                       t0: FloatArray | None = None) -> SteadyState:
    """Steady state at arrival rate ``lam`` (trace) or at the policy's concurrency (None)."""
    k = len(grid)
    n = grid.n
    win = n.astype(np.float64)
    gain_av = math.exp(factors.av)
    tables = wl.scalars(gain_av)
    plain = wl.scalars(1.0) if gain_av != 1.0 else tables
    g = np.zeros(k, dtype=np.int64)
    gain = np.where(grid.av, gain_av, 1.0)
    zero = np.zeros(k)
    t = cost.step(np.ones(k), zero, zero, zero, win, zero) if t0 is None else t0.copy()
    closed = lam is None
    running = np.minimum(float(wl.concurrency), grid.seqs)
    rate = np.zeros(k) if lam is None else lam
    # a finite sample: at most the requests arriving within one residence are in flight
    window_s = np.inf if closed or lam is None else wl.span_all * wl.base_rate / lam
    av = grid.av
    any_av = bool(av.any())

    def pick(g: IntArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        s_bar, m_bar, ctx, e_bar = (np.where(av, a[n, g], b[n, 0]) for a, b in
                                    zip(tables, plain, strict=True))
        return s_bar, m_bar, ctx, e_bar

    s_bar, m_bar, ctx, e_bar = pick(g)
    for _ in range(_ITERATIONS):
        if closed:
            avail = np.maximum(grid.tok - running * (1 + m_bar), 1.0)
            rate = running / (t * (s_bar + wl.mean_prompt / avail + 1.0))
        b = np.minimum(rate * np.minimum(s_bar * t, window_s), grid.seqs)
        pre = rate * wl.mean_prompt * t
        tokens = b * (1.0 + m_bar) + pre
        t_new = np.minimum(cost.step(tokens, b, b * ctx, rate * wl.mean_pairs * t, win, pre),
                           1e3)
        if any_av:
            theta = b * e_bar * cost.marginal(tokens) / t_new
            g = np.where(av, np.clip(np.searchsorted(THRESHOLDS, theta), 0, THRESHOLDS.size - 1), 0)
            s_bar, m_bar, ctx, e_bar = pick(g)
        done = np.abs(t_new - t) <= 1e-5 * t
        t = t_new
        if done.all():
            break
    b = np.minimum(rate * np.minimum(s_bar * t, window_s), grid.seqs)
    pre = rate * wl.mean_prompt * t
    again = cost.step(b * (1.0 + m_bar) + pre, b, b * ctx, rate * wl.mean_pairs * t, win, pre)
    stable = (np.abs(again - t) <= 1e-3 * t) & (t < 1e2)
    return SteadyState(rate, t, b, g, gain, s_bar, m_bar, ctx, e_bar, stable)


@dataclass
class PredictedLatency:
    feasible: npt.NDArray[np.bool_]   # stable, budget left for prefill, slots, KV cache
    durations: FloatArray             # (K, M) step durations (s), ITL factor applied
    weights: FloatArray               # (K, M) how many steps of each duration
    ttft: FloatArray                  # (K, N) per-request TTFT
    step: FloatArray | None = None    # (K, N) per-request decode step time (trace replay)
    end: FloatArray | None = None     # (K, N) per-request completion time (trace replay)


def closed_loop_latency(wl: WorkloadModel, grid: ConfigGrid, cost: StepCostModel,
                        factors: ReplicaFactors, st: SteadyState) -> PredictedLatency:
    """Step durations for the ITL and per-request TTFTs of a closed-loop replay (mean field).

    ``concurrency`` requests start together; after them, a request enters each time one
    leaves, at the steady state's completion rate. Prompts queue FIFO for the prefill budget
    left after the decode windows; each busy period of that queue packs its prompts into
    full-budget steps plus one partial step, which stall every decoding sequence, the other
    steps are decode-only. (Waiting for a slot when the concurrency exceeds ``max_num_seqs``
    is added by the caller.)
    """
    k, n_req = len(grid), wl.prompt.size
    win = grid.n.astype(np.float64)
    decode = st.b * (1.0 + st.m_bar)
    avail = grid.tok - decode
    a = np.maximum(avail, 1.0)
    p = wl.prompt[None, :]
    ctx = st.b * st.ctx
    zero = np.zeros(k)
    t_dec = cost.step(decode, st.b, ctx, zero, win, zero)
    d_full = cost.step(decode + a, st.b, ctx, a * wl.weighted_prompt / 2.0, win, a)
    one = np.minimum(p, a[:, None])
    d_one = cost.step(decode[:, None] + one, st.b[:, None], ctx[:, None], one * p / 2.0,
                      win[:, None], one)
    # the queue drains prompt tokens at the budget's rate; a prompt's own TTFT is at least
    # the one step that carries its (first and only, when short) chunk
    service = p * (d_full / a)[:, None]
    entered = np.maximum(np.arange(n_req) - wl.concurrency + 1, 0).astype(np.float64)
    arrival = entered[None, :] / np.maximum(st.lam, 1e-9)[:, None]
    done = np.cumsum(service, axis=1)
    finish = np.maximum.accumulate(arrival - (done - service), axis=1) + done
    wait = finish - arrival - service
    service = np.maximum(service, d_one)
    # busy periods of the prefill queue: packed into full steps and one partial step each
    new = np.ones((k, n_req), dtype=bool)
    new[:, 1:] = arrival[:, 1:] >= finish[:, :-1]
    period = np.cumsum(new, axis=1) - 1 + (np.arange(k) * n_req)[:, None]
    tokens = np.bincount(period.ravel(), weights=np.broadcast_to(p, (k, n_req)).ravel(),
                         minlength=k * n_req).reshape(k, n_req)
    full = np.floor(tokens / a[:, None])
    rem = tokens - full * a[:, None]
    d_rem = cost.step(decode[:, None] + rem, st.b[:, None], ctx[:, None], rem * rem / 2.0,
                      win[:, None], rem)
    steps = (arrival[:, -1] + st.s_bar * st.t) / st.t
    n_full = full.sum(axis=1)
    partial = (rem > 0).astype(np.float64)
    durations = np.concatenate([t_dec[:, None], d_full[:, None], d_rem], axis=1)
    weights = np.concatenate([np.maximum(steps - n_full - partial.sum(axis=1), 0.0)[:, None],
                              n_full[:, None], partial], axis=1)
    ttft = service + math.exp(factors.ttft) * wait
    kv_ok = st.b * (st.ctx + wl.output.mean() / 2.0) <= wl.kv_tokens
    feasible = st.stable & (avail >= 1.0) & kv_ok & (grid.tok >= grid.seqs)
    return PredictedLatency(feasible, durations * math.exp(factors.itl), weights, ttft)
