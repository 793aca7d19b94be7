"""A closed-loop replay on one vLLM replica, read from the scheduler's steady state.

A closed-loop replay (no arrival times in the sample) keeps the policy's concurrency in flight:
requests enter as others leave. :func:`closed_loop_latency` reads its ITL gaps and TTFTs from
the steady state at that concurrency (:mod:`autotune.predict.steady_state`).
"""

from __future__ import annotations

import math

import numpy as np

from autotune.predict.latency import PredictedLatency
from autotune.predict.steady_state import SteadyState
from autotune.predict.step_cost import StepCostModel
from autotune.predict.workload import ConfigGrid, ReplicaFactors, WorkloadModel

__all__ = ["closed_loop_latency"]


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
    return PredictedLatency(feasible, durations * math.exp(factors.itl), weights, ttft,
                            stall_from=1, wait=math.exp(factors.ttft) * wait)
