"""A fluid replay of a traffic trace on one vLLM replica, for every candidate config at once.

The predictor's model of a trace replay (and so of the capacity reading): requests arrive at the
sample's own times (scaled), and time is a grid of :data:`GRID` cells up to the last
completion. It starts from the scheduler's steady state (:mod:`autotune.predict.steady_state`)
and refines the schedule in :data:`PASSES` passes, each of them these steps:

1. **step times on the grid** (:func:`_step_times`): with B(τ) sequences decoding at τ, a
   decode-only step verifies B·(1 + m̄) tokens; a step that also carries a prefill chunk fills
   the budget ``A(τ) = max_num_batched_tokens - B(τ)·(1 + m̄)`` and lasts longer;
2. **clocks** (:func:`_clocks`): the cumulative prefill capacity C(τ) = ∫ A / t_full dτ, and
   the decode step clock S(τ) = ∫ (1 - stall share) / t_dec dτ (decoding sequences make one
   step per decode-only step, except for the share of the time spent in the longer steps that
   carry prefill chunks);
3. **admission**: a request is admitted when it arrives and a slot is free (the slot wait of
   the previous pass);
4. **prefill** (:func:`_prefill`): prompts queue first-come-first-served for the budget, solved
   in token space (prompt i is prefilled when C reaches max(C(admission_i), level of i-1) +
   P_i); its first token follows its queue wait (times the fitted TTFT factor) and its own
   prefill, at least the step that carries its last chunk;
5. **decode** (:func:`_decode_end`): a request that begins decoding at b_i ends when S reaches
   S(b_i) + its decode steps (from the acceptance model);
6. **slot waits** (:func:`_slot_wait`): a request holds one of ``max_num_seqs`` slots from
   admission (before its prefill) to its last token; admission is first-come-first-served,
   solved as the Lindley recursion of one server ``max_num_seqs`` times faster (exact for one
   slot, the fluid limit when they are all busy), scaled by the M/M/c ratio of Erlang C to the
   utilisation;
7. **the next grid** (:func:`_next_grid`): occupancy from every request's decode begin and end,
   and each prompt's chunk stall (how much longer its chunk steps take than decode-only steps)
   charged to the cell where it is prefilled.

ITL gaps (:func:`_itl_gaps`): each busy period of the prefill queue packs its prompts into
full-budget steps plus one partial step, which stall every sequence decoding then; every other
gap lasts the decode-only step time at its moment (the grid gives their distribution, Σ steps_i
their count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autotune.predict.latency import PredictedLatency
from autotune.predict.numerics import count_le, interp_rows, inverse_rows
from autotune.predict.steady_state import SteadyState
from autotune.predict.step_cost import StepCostModel
from autotune.predict.workload import ConfigGrid, ReplicaFactors, WorkloadModel

__all__ = ["GRID", "PASSES", "trace_replay_latency"]

FloatArray = npt.NDArray[np.float64]

GRID = 96
PASSES = 3


@dataclass(frozen=True)
class _Trace:
    """The trace replayed at each config's arrival scale, and the per-config quantities that
    stay fixed over the passes. Shapes: K configs, N requests in arrival order; (K, 1) and
    (1, N) broadcast."""

    arrival: FloatArray         # (K, N) arrival times (s) at the config's scale
    arrival_span: FloatArray    # (K, 1) first to last arrival (s) at that scale
    prompt: FloatArray          # (1, N) prompt tokens
    prompt_through: FloatArray  # (1, N) prompt tokens of this request and every earlier one
    decode_steps: FloatArray    # (K, N) decode steps each request takes (acceptance model)
    seq_tokens: FloatArray      # (K, 1) tokens one decoding sequence verifies per step, 1 + m̄
    seq_context: FloatArray     # (K, 1) KV context of one decoding sequence (tokens)
    window: FloatArray          # (K, 1) draft window n
    slots: FloatArray           # (K, 1) max_num_seqs
    budget: FloatArray          # (K, 1) max_num_batched_tokens
    #: attention pairs per token of a full prefill chunk: half the token-weighted mean prompt
    chunk_pairs: float


@dataclass(frozen=True)
class _TimeGrid:
    """One pass's time grid: :data:`GRID` evenly spaced cells from 0 to the horizon."""

    tau: FloatArray        # (K, GRID) cell times (s)
    horizon: FloatArray    # (K, 1) the last completion (s)
    occupancy: FloatArray  # (K, GRID) sequences decoding at each cell
    stall: FloatArray      # (K, GRID) extra time of prefill chunk steps per second of the cell


@dataclass(frozen=True)
class _StepTimes:
    """Step times on a pass's grid."""

    budget: FloatArray       # (K, GRID) prefill tokens a step has room for (at least 1)
    decode_only: FloatArray  # (K, GRID) a step verifying the decoding windows alone (s)
    with_chunk: FloatArray   # (K, GRID) a step carrying a full-budget prefill chunk too (s)


@dataclass(frozen=True)
class _Prefill:
    """Each request's prefill in one pass."""

    prefilled: FloatArray    # (K, N) when its last prompt token is prefilled (s)
    first_token: FloatArray  # (K, N) when it begins decoding (s)
    chunk_stall: FloatArray  # (K, N) how much longer its chunk steps take than decode-only
    waited: FloatArray       # (K, N) its wait in the prefill queue (s), the TTFT factor applied


@dataclass(frozen=True)
class _Schedule:
    """What one pass solved for every request (s)."""

    admitted: FloatArray
    prefill: _Prefill
    end: FloatArray        # its last token
    slot_wait: FloatArray  # the wait for a slot the next pass admits it after


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


def _trace(wl: WorkloadModel, grid: ConfigGrid, st: SteadyState, scale: FloatArray) -> _Trace:
    _, steps = wl.per_request(grid.n, st.g, st.gain)
    return _Trace(arrival=wl.arrival[None, :] / scale[:, None],
                  arrival_span=(wl.span_all / scale)[:, None],
                  prompt=wl.prompt[None, :], prompt_through=np.cumsum(wl.prompt)[None, :],
                  decode_steps=steps, seq_tokens=(1.0 + st.m_bar)[:, None],
                  seq_context=st.ctx[:, None], window=grid.n.astype(np.float64)[:, None],
                  slots=grid.seqs[:, None], budget=grid.tok[:, None],
                  chunk_pairs=wl.weighted_prompt / 2.0)


def _steady_start(tr: _Trace, st: SteadyState) -> _TimeGrid:
    """The first grid, from the steady state: every request decodes from its arrival at the
    steady step time; the steady decoding batch while requests arrive, none after; no stall."""
    end = tr.arrival + tr.decode_steps * st.t[:, None]
    horizon = end.max(axis=1, keepdims=True)
    tau = horizon * np.linspace(0.0, 1.0, GRID)[None, :]
    occupancy = np.where(tau <= tr.arrival_span, st.b[:, None], 0.0)
    return _TimeGrid(tau, horizon, occupancy, np.zeros_like(tau))


def _step_times(tr: _Trace, tg: _TimeGrid, cost: StepCostModel) -> _StepTimes:
    occ = tg.occupancy
    none = np.zeros_like(tg.tau)
    budget = np.maximum(tr.budget - occ * tr.seq_tokens, 1.0)
    decode_only = cost.step(occ * tr.seq_tokens, occ, occ * tr.seq_context, none, tr.window,
                            none)
    with_chunk = cost.step(occ * tr.seq_tokens + budget, occ, occ * tr.seq_context,
                           budget * tr.chunk_pairs, tr.window, budget)
    return _StepTimes(budget, decode_only, with_chunk)


def _clocks(tg: _TimeGrid, times: _StepTimes) -> tuple[FloatArray, FloatArray]:
    """(decode step clock S, cumulative prefill capacity C) on the grid."""
    stall_share = np.minimum(tg.stall, 1.0 - times.decode_only / times.with_chunk)
    steps = _clock(tg.tau, (1.0 - stall_share) / times.decode_only)
    prefill = _clock(tg.tau, times.budget / times.with_chunk)
    return steps, prefill


def _prefill(tr: _Trace, tg: _TimeGrid, times: _StepTimes, cost: StepCostModel,
             capacity: FloatArray, admitted: FloatArray, ttft_factor: float) -> _Prefill:
    """FIFO prefill in token space at the full-budget step's rate, and the first token."""
    tau, p = tg.tau, tr.prompt
    at_admit = interp_rows(tau, capacity, admitted, extend=True, uniform=True)
    level = np.maximum.accumulate(at_admit - (tr.prompt_through - p), axis=1) + tr.prompt_through
    prefilled = inverse_rows(tau, capacity, level)
    own = p / np.maximum(interp_rows(tau, times.budget / times.with_chunk, admitted,
                                     uniform=True), 1e-9)
    queued = np.maximum(prefilled - admitted - own, 0.0)
    # the steps that carry its chunks, at the moment it is prefilled
    budget = interp_rows(tau, times.budget, prefilled, uniform=True)
    decoding = interp_rows(tau, tg.occupancy, prefilled, uniform=True)
    verified, context = decoding * tr.seq_tokens, decoding * tr.seq_context
    decode_only = cost.step(verified, decoding, context, 0.0 * p, tr.window, 0.0 * p)
    last_chunk = p - np.floor(p / budget) * budget
    full_step = cost.step(verified + budget, decoding, context, budget * p / 2.0, tr.window,
                          budget)
    last_step = cost.step(verified + last_chunk, decoding, context,
                          last_chunk * (p - last_chunk / 2.0), tr.window, last_chunk)
    first_token = admitted + ttft_factor * queued + np.maximum(own, last_step)
    chunk_stall = (np.floor(p / budget) * (full_step - decode_only)
                   + (last_chunk > 0) * (last_step - decode_only))
    return _Prefill(prefilled, first_token, chunk_stall, ttft_factor * queued)


def _decode_end(tg: _TimeGrid, step_clock: FloatArray, tr: _Trace,
                first_token: FloatArray) -> FloatArray:
    """When each request's last token comes: its decode steps on the step clock."""
    at_begin = interp_rows(tg.tau, step_clock, first_token, extend=True, uniform=True)
    return inverse_rows(tg.tau, step_clock, at_begin + tr.decode_steps)


def _slot_wait(tr: _Trace, grid: ConfigGrid, st: SteadyState, admitted: FloatArray,
               end: FloatArray, slot_factor: float) -> FloatArray:
    """Each request's wait for a free slot: the Lindley recursion of one server
    ``max_num_seqs`` times faster, scaled to that many servers by Erlang C / utilisation."""
    hold = np.maximum(end - admitted, 0.0)
    share = hold / tr.slots
    done = np.cumsum(share, axis=1)
    freed = np.maximum.accumulate(tr.arrival - (done - share), axis=1) + done
    ratio = _erlang_ratio(st.lam * hold.mean(axis=1), grid.seqs)[:, None]
    out: FloatArray = np.maximum(freed - share - tr.arrival, 0.0) * ratio * slot_factor
    return out


def _next_grid(tr: _Trace, pre: _Prefill, end: FloatArray) -> _TimeGrid:
    """The grid up to the last completion: occupancy from every request's decode begin and
    end, and each prompt's chunk stall spread over the cell where it is prefilled."""
    k = end.shape[0]
    horizon = np.maximum(end.max(axis=1, keepdims=True), 1e-6)
    tau = horizon * np.linspace(0.0, 1.0, GRID)[None, :]
    occupancy = np.clip(count_le(np.sort(pre.first_token, axis=1), tau)
                        - count_le(np.sort(end, axis=1), tau), 0.0, tr.slots)
    cell = np.clip((pre.prefilled / horizon * (GRID - 1)).astype(np.int64), 0, GRID - 1)
    stall = np.bincount((cell + (np.arange(k) * GRID)[:, None]).ravel(),
                        weights=np.maximum(pre.chunk_stall, 0.0).ravel(),
                        minlength=k * GRID).reshape(k, GRID) / (horizon / (GRID - 1))
    return _TimeGrid(tau, horizon, occupancy, stall)


def _replay_pass(tr: _Trace, grid: ConfigGrid, cost: StepCostModel, st: SteadyState,
                 factors: ReplicaFactors, tg: _TimeGrid,
                 slot_wait: FloatArray) -> tuple[_Schedule, _TimeGrid]:
    """One pass (steps 1-7 of the module doc): the schedule on ``tg``, and the next grid."""
    times = _step_times(tr, tg, cost)
    step_clock, capacity = _clocks(tg, times)
    admitted = tr.arrival + slot_wait
    pre = _prefill(tr, tg, times, cost, capacity, admitted, math.exp(factors.ttft))
    end = _decode_end(tg, step_clock, tr, pre.first_token)
    wait = _slot_wait(tr, grid, st, admitted, end, math.exp(factors.slots))
    return _Schedule(admitted, pre, end, wait), _next_grid(tr, pre, end)


def _itl_gaps(tr: _Trace, grid: ConfigGrid, cost: StepCostModel, tg: _TimeGrid,
              sched: _Schedule) -> tuple[FloatArray, FloatArray]:
    """(durations, weights) of the ITL gaps: decode-only steps on the grid, and the full and
    partial chunk steps of each busy period of the prefill queue."""
    k, n_req = tr.arrival.shape
    occ, seq_tokens, seq_context = tg.occupancy, tr.seq_tokens, tr.seq_context
    decode_only = cost.step(occ * seq_tokens, occ, occ * seq_context, np.zeros_like(occ),
                            tr.window, np.zeros_like(occ))
    decode_weight = occ / decode_only
    # busy periods of the prefill queue: a request admitted after the previous one was
    # prefilled opens a new one
    admitted, prefilled = sched.admitted, sched.prefill.prefilled
    opens = np.ones((k, n_req), dtype=bool)
    opens[:, 1:] = admitted[:, 1:] >= prefilled[:, :-1]
    period = np.cumsum(opens, axis=1) - 1
    flat = (period + (np.arange(k) * n_req)[:, None]).ravel()
    tokens = np.bincount(flat, weights=np.broadcast_to(tr.prompt, (k, n_req)).ravel(),
                         minlength=k * n_req).reshape(k, n_req)
    first_in = np.full(k * n_req, np.inf)
    last_out = np.full(k * n_req, -np.inf)
    np.minimum.at(first_in, flat, admitted.ravel())
    np.maximum.at(last_out, flat, prefilled.ravel())
    busy = np.isfinite(first_in)
    middle = np.zeros(k * n_req)
    middle[busy] = (first_in[busy] + last_out[busy]) / 2.0
    # the sequences each busy period's chunk steps stall: those decoding at its middle
    decoding = interp_rows(tg.tau, occ, middle.reshape(k, n_req), uniform=True)
    budget = np.maximum(grid.tok[:, None] - decoding * seq_tokens, 1.0)
    full = np.floor(tokens / budget)
    last_chunk = tokens - full * budget
    full_step = cost.step(decoding * seq_tokens + budget, decoding, decoding * seq_context,
                          budget * tr.chunk_pairs, tr.window, budget)
    last_step = cost.step(decoding * seq_tokens + last_chunk, decoding, decoding * seq_context,
                          last_chunk * last_chunk / 2.0, tr.window, last_chunk)
    stalled_full = decoding * full
    stalled_last = decoding * (last_chunk > 0)
    total = tr.decode_steps.sum(axis=1)
    decode_gaps = np.maximum(total - stalled_full.sum(axis=1) - stalled_last.sum(axis=1), 0.0)
    decode_weight = decode_weight * (decode_gaps
                                     / np.maximum(decode_weight.sum(axis=1), 1e-12))[:, None]
    durations = np.concatenate([decode_only, full_step, last_step], axis=1)
    weights = np.concatenate([decode_weight, stalled_full, stalled_last], axis=1)
    return durations, weights


def trace_replay_latency(wl: WorkloadModel, grid: ConfigGrid, cost: StepCostModel,
                         factors: ReplicaFactors, st: SteadyState,
                         scale: FloatArray) -> PredictedLatency:
    """Step durations (ITL), per-request TTFT, step time and end of a trace replay at
    ``scale`` × the sample's rate (see the module doc), from the steady state ``st``."""
    tr = _trace(wl, grid, st, scale)
    tg = _steady_start(tr, st)
    sched, tg = _replay_pass(tr, grid, cost, st, factors, tg, np.zeros_like(tr.arrival))
    for _ in range(PASSES - 1):
        sched, tg = _replay_pass(tr, grid, cost, st, factors, tg, sched.slot_wait)
    durations, weights = _itl_gaps(tr, grid, cost, tg, sched)
    first_token, end = sched.prefill.first_token, sched.end
    peak = tg.occupancy.max(axis=1)
    kv_ok = peak * (st.ctx + wl.output.mean() / 2.0) <= wl.kv_tokens
    # vLLM refuses max_num_batched_tokens < max_num_seqs at start-up
    feasible = kv_ok & np.isfinite(end).all(axis=1) & (grid.tok >= grid.seqs)
    return PredictedLatency(feasible, durations * math.exp(factors.itl), weights,
                            first_token - tr.arrival, (end - first_token) / tr.decode_steps,
                            end, stall_from=GRID,
                            wait=sched.admitted - tr.arrival + sched.prefill.waited)
