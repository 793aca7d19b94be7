"""A fluid replay of a traffic trace on one vLLM replica, for every candidate config at once.

The predictor's model of a trace replay (and so of the capacity reading): requests arrive at the
sample's own times (scaled), and time is a grid of :data:`GRID` cells up to the last
completion. Three passes refine:

- occupancy B(τ): sequences decoding at τ (from every request's decode begin and end);
- step times: a decode-only step t(τ) = cost(B(τ)·(1 + m̄), ...); a step that also carries a
  prefill chunk fills the budget ``A(τ) = max_num_batched_tokens - B(τ)·(1 + m̄)``;
- prefill: prompts queue first-come-first-served for the budget; with the cumulative prefill
  capacity C(τ) = ∫ A / t_full dτ the queue is solved in token space (prompt i finishes when
  C reaches max(C(admission_i), finish level of i-1) + P_i);
- decode: every prompt's chunk steps take longer than a decode-only step; that extra time
  (its stall) is charged to the grid cell where the prompt is prefilled. With the step clock
  S(τ) = ∫ (1 - stall share) / t dτ, a request that begins decoding at b_i ends when S
  reaches S(b_i) + steps_i (its steps from the acceptance model);
- slots: a request holds one of ``max_num_seqs`` slots from admission (before its prefill)
  to its last token; admission is first-come-first-served, solved as the Lindley recursion of
  one server ``max_num_seqs`` times faster (exact for one slot, the fluid limit when they are
  all busy).

ITL gaps: each busy period of the prefill queue packs its prompts into full-budget steps plus
one partial step, which stall every sequence decoding then; every other gap lasts the
decode-only step time at its moment (the grid gives their distribution, Σ steps_i their count).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from autotune.predict.numerics import count_le, interp_rows, inverse_rows
from autotune.predict.steady_state import PredictedLatency, SteadyState
from autotune.predict.step_cost import StepCostModel
from autotune.predict.workload import ConfigGrid, ReplicaFactors, WorkloadModel

__all__ = ["GRID", "PASSES", "trace_replay_latency"]

FloatArray = npt.NDArray[np.float64]

GRID = 96
PASSES = 3


def _clock(tau: FloatArray, rate: FloatArray) -> FloatArray:
    """Cumulative integral of ``rate`` over the grid (trapezoids), starting at 0."""
    dt = tau[:, 1:] - tau[:, :-1]
    out: FloatArray = np.concatenate(
        [np.zeros((tau.shape[0], 1)), np.cumsum(dt * (rate[:, 1:] + rate[:, :-1]) / 2.0, axis=1)],
        axis=1)
    return out


def _erlang_ratio(offered: FloatArray, servers: FloatArray) -> FloatArray:
    """P(wait) of M/M/c (Erlang C) over the utilisation: 1 for one server or saturation."""
    from scipy.special import gammaln, pdtr, xlogy

    rho = offered / servers
    c = np.maximum(np.round(servers), 1.0)
    # Erlang B = Poisson pmf(c) / cdf(c) at the offered load (scipy.stats.poisson's own
    # formulas, called directly: the distribution object's overhead is most of the cost here)
    pmf = np.exp(xlogy(c, offered) - gammaln(c + 1.0) - offered)
    erlang_b = pmf / np.maximum(pdtr(c, offered), 1e-300)
    erlang_c = erlang_b / np.maximum(1.0 - rho * (1.0 - erlang_b), 1e-12)
    out: FloatArray = np.where(rho < 1.0, np.clip(erlang_c / np.maximum(rho, 1e-12), 0.0, 1.0),
                               1.0)
    return out


def trace_replay_latency(wl: WorkloadModel, grid: ConfigGrid, cost: StepCostModel,
                         factors: ReplicaFactors, st: SteadyState,
                         scale: FloatArray) -> PredictedLatency:
    """Step durations (ITL), per-request TTFT, step time and end of a trace replay."""
    k, n_req = len(grid), wl.prompt.size
    win = grid.n.astype(np.float64)[:, None]
    p = wl.prompt[None, :]
    cum_p = np.cumsum(wl.prompt)[None, :]
    arrival = wl.arrival[None, :] / scale[:, None]
    window = (wl.span_all / scale)[:, None]
    _, steps = wl.per_request(grid.n, st.g, st.gain)
    m1 = (1.0 + st.m_bar)[:, None]
    per_ctx = st.ctx[:, None]
    seqs = grid.seqs[:, None]
    tok = grid.tok[:, None]
    half_prompt = wl.weighted_prompt / 2.0
    kappa = math.exp(factors.ttft)
    f_slot = math.exp(factors.slots)
    frac = np.linspace(0.0, 1.0, GRID)[None, :]
    # start from the steady state: B during the arrival window, prefill spread evenly
    end = arrival + steps * st.t[:, None]
    finish = arrival.copy()
    begin = arrival.copy()
    horizon = end.max(axis=1, keepdims=True)
    tau = horizon * frac
    occ = np.where(tau <= window, st.b[:, None], 0.0)
    stall = np.zeros_like(tau)
    slot = np.zeros((k, n_req))
    zeros = np.zeros_like(tau)
    for _ in range(PASSES):
        avail = np.maximum(tok - occ * m1, 1.0)
        t_dec = cost.step(occ * m1, occ, occ * per_ctx, zeros, win, zeros)
        t_full = cost.step(occ * m1 + avail, occ, occ * per_ctx, avail * half_prompt, win, avail)
        # decoding sequences progress one step per decode-only step time, except for the
        # share of the time spent in steps that carry prefill chunks (which run longer)
        stall_share = np.minimum(stall, 1.0 - t_dec / t_full)
        clock = _clock(tau, (1.0 - stall_share) / t_dec)
        capacity = _clock(tau, avail / t_full)
        # admission: a slot is held from admission to the end of decode, FIFO in arrival order
        admit = arrival + slot
        # prefill: FIFO in token space at the full-budget step's rate
        at_admit = interp_rows(tau, capacity, admit, extend=True, uniform=True)
        level = np.maximum.accumulate(at_admit - (cum_p - p), axis=1) + cum_p
        finish = inverse_rows(tau, capacity, level)
        own = p / np.maximum(interp_rows(tau, avail / t_full, admit, uniform=True), 1e-9)
        queued = np.maximum(finish - admit - own, 0.0)
        a_fin = interp_rows(tau, avail, finish, uniform=True)
        b_fin = interp_rows(tau, occ, finish, uniform=True)
        d_dec = cost.step(b_fin * m1, b_fin, b_fin * per_ctx, 0.0 * p, win, 0.0 * p)
        rem = p - np.floor(p / a_fin) * a_fin
        d_full = cost.step(b_fin * m1 + a_fin, b_fin, b_fin * per_ctx, a_fin * p / 2.0, win, a_fin)
        d_rem = cost.step(b_fin * m1 + rem, b_fin, b_fin * per_ctx, rem * (p - rem / 2.0), win,
                          rem)
        first = np.maximum(own, d_rem)
        begin = admit + kappa * queued + first
        # decode on the step clock
        at_begin = interp_rows(tau, clock, begin, extend=True, uniform=True)
        end = inverse_rows(tau, clock, at_begin + steps)
        # slot waits for the next pass: Lindley recursion of a server seqs times faster,
        # scaled to seqs servers by the M/M/c ratio Erlang-C / utilisation
        hold = np.maximum(end - admit, 0.0)
        share = hold / seqs
        done = np.cumsum(share, axis=1)
        freed = np.maximum.accumulate(arrival - (done - share), axis=1) + done
        ratio = _erlang_ratio(st.lam * hold.mean(axis=1), grid.seqs)[:, None]
        slot = np.maximum(freed - share - arrival, 0.0) * ratio * f_slot
        # next grid: occupancy, and the prefill stall time falling into each cell
        horizon = np.maximum(end.max(axis=1, keepdims=True), 1e-6)
        tau = horizon * frac
        occ = np.clip(count_le(np.sort(begin, axis=1), tau) - count_le(np.sort(end, axis=1), tau),
                      0.0, seqs)
        extra = np.floor(p / a_fin) * (d_full - d_dec) + (rem > 0) * (d_rem - d_dec)
        cell = np.clip((finish / horizon * (GRID - 1)).astype(np.int64), 0, GRID - 1)
        stall = np.bincount((cell + (np.arange(k) * GRID)[:, None]).ravel(),
                            weights=np.maximum(extra, 0.0).ravel(),
                            minlength=k * GRID).reshape(k, GRID) / (horizon / (GRID - 1))
    # ITL: decode-only gaps on the grid, chunk steps from the prefill queue's busy periods
    t_dec = cost.step(occ * m1, occ, occ * per_ctx, np.zeros_like(occ), win,
                      np.zeros_like(occ))
    gap_w = occ / t_dec
    new = np.ones((k, n_req), dtype=bool)
    new[:, 1:] = admit[:, 1:] >= finish[:, :-1]
    period = np.cumsum(new, axis=1) - 1
    flat = (period + (np.arange(k) * n_req)[:, None]).ravel()
    tokens = np.bincount(flat, weights=np.broadcast_to(p, (k, n_req)).ravel(),
                         minlength=k * n_req).reshape(k, n_req)
    first_in = np.full(k * n_req, np.inf)
    last_out = np.full(k * n_req, -np.inf)
    np.minimum.at(first_in, flat, admit.ravel())
    np.maximum.at(last_out, flat, finish.ravel())
    used = np.isfinite(first_in).reshape(k, n_req)
    keep = used.ravel()
    middle = np.zeros(k * n_req)
    middle[keep] = (first_in[keep] + last_out[keep]) / 2.0
    # the sequences each busy period's chunk steps stall
    b_at = interp_rows(tau, occ, middle.reshape(k, n_req), uniform=True)
    a_at = np.maximum(grid.tok[:, None] - b_at * m1, 1.0)
    full = np.floor(tokens / a_at)
    rem = tokens - full * a_at
    d_full = cost.step(b_at * m1 + a_at, b_at, b_at * per_ctx, a_at * half_prompt, win, a_at)
    d_rem = cost.step(b_at * m1 + rem, b_at, b_at * per_ctx, rem * rem / 2.0, win, rem)
    stalled_full = b_at * full
    stalled_rem = b_at * (rem > 0)
    total = steps.sum(axis=1)
    decode_gaps = np.maximum(total - stalled_full.sum(axis=1) - stalled_rem.sum(axis=1), 0.0)
    gap_w = gap_w * (decode_gaps / np.maximum(gap_w.sum(axis=1), 1e-12))[:, None]
    durations = np.concatenate([t_dec, d_full, d_rem], axis=1)
    weights = np.concatenate([gap_w, stalled_full, stalled_rem], axis=1)
    ttft = begin - arrival
    t_req = (end - begin) / steps
    peak = occ.max(axis=1)
    kv_ok = peak * (st.ctx + wl.output.mean() / 2.0) <= wl.kv_tokens
    # vLLM refuses max_num_batched_tokens < max_num_seqs at start-up
    feasible = kv_ok & np.isfinite(end).all(axis=1) & (grid.tok >= grid.seqs)
    return PredictedLatency(feasible, durations * math.exp(factors.itl), weights, ttft, t_req, end)
