"""The steady-state (mean-field) part of the replica model, shared by its readings.

:class:`Workload` holds a workload's per-request arrays in arrival order and per-window
acceptance tables; :func:`operate` solves vLLM's scheduler steady state at an arrival rate
(decoding sequences B = λ·S̄·t by Little's law, verified tokens T = B·(1 + m̄) + λ·P̄·t, step
time t = cost(T, ...), adaptive verification keeping a draft position while its survival is
worth its marginal step cost); :func:`closed_latency` reads a closed-loop replay from it.
The trace replay itself is :mod:`._fluid`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autotune.acceptance import AcceptanceModel
from autotune.search._stepcost import CostModel
from autotune.types import Request, Slo, TrialConfig

__all__ = ["KNOB_NAMES", "Grid", "Knobs", "Latency", "State", "Workload", "closed_latency",
           "count_le", "interp_rows", "inverse_rows", "operate", "weighted_quantile"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_ITERATIONS = 60
_THETA = np.concatenate([[0.0], np.logspace(-3, 0, 40)])
_KNOB_DEFAULTS = {"itl": 0.0, "ttft": 0.0, "slots": 0.0, "av": 0.0, "bias": 0.0}
KNOB_NAMES = tuple(_KNOB_DEFAULTS)


@dataclass(frozen=True)
class Knobs:
    """Fitted parts of the replica model (log multipliers unless noted).

    ``itl`` scales step durations against the ITL SLO, ``ttft`` the wait for the prefill
    budget, ``slots`` the wait for a free sequence slot, ``av`` the accepted tokens of adaptive
    verification beyond the static rule, ``bias`` the predicted objective.
    """

    itl: float = _KNOB_DEFAULTS["itl"]
    ttft: float = _KNOB_DEFAULTS["ttft"]
    slots: float = _KNOB_DEFAULTS["slots"]
    av: float = _KNOB_DEFAULTS["av"]
    bias: float = _KNOB_DEFAULTS["bias"]

    @classmethod
    def from_vector(cls, v: Sequence[float]) -> Knobs:
        return cls(*(float(x) for x in v))

    def vector(self) -> list[float]:
        return [self.itl, self.ttft, self.slots, self.av, self.bias]


@dataclass(frozen=True)
class Grid:
    """Candidate configs as arrays."""

    configs: tuple[TrialConfig, ...]
    n: IntArray
    av: npt.NDArray[np.bool_]
    seqs: FloatArray
    tok: FloatArray

    @classmethod
    def of(cls, configs: Sequence[TrialConfig]) -> Grid:
        return cls(tuple(configs),
                   np.asarray([c.num_speculative_tokens for c in configs], dtype=np.int64),
                   np.asarray([c.enable_adaptive_verification and c.num_speculative_tokens > 0
                               for c in configs], dtype=bool),
                   np.asarray([c.max_num_seqs for c in configs], dtype=np.float64),
                   np.asarray([c.max_num_batched_tokens for c in configs], dtype=np.float64))

    def __len__(self) -> int:
        return len(self.configs)


class Workload:
    """Per-request arrays of a workload and per-window acceptance tables (built once)."""

    def __init__(self, requests: Sequence[Request], acceptance: AcceptanceModel, *,
                 warmup: int, slo: Slo, kv_tokens: float, mode: str = "trace",
                 time_scale: float = 1.0, concurrency: int = 1,
                 find_capacity: bool = True) -> None:
        order = sorted(range(len(requests)),
                       key=lambda i: (requests[i].arrival_s or 0.0, requests[i].line, i))
        self.prompt = np.asarray([max(requests[i].prompt_tokens, 1) for i in order], float)
        self.output = np.asarray([max(requests[i].output_tokens, 1) for i in order], float)
        arrivals = [requests[i].arrival_s for i in order]
        self.mode = "closed" if mode == "closed" or any(a is None for a in arrivals) else "trace"
        self.arrival = np.asarray([a or 0.0 for a in arrivals], float)
        self.arrival -= self.arrival[0] if self.arrival.size else 0.0
        n = self.prompt.size
        self.measured = np.arange(n) >= min(warmup, max(n - 1, 0))
        span_all = float(self.arrival[-1] - self.arrival[0]) if n > 1 else 0.0
        self.base_rate = (n - 1) / span_all if span_all > 0 else 1.0
        m = self.measured
        self.span = float(self.arrival[m][-1] - self.arrival[m][0]) if m.sum() > 1 else 0.0
        self.slo = slo
        self.kv_tokens = kv_tokens
        self.time_scale = time_scale
        self.concurrency = max(concurrency, 1)
        self.find_capacity = find_capacity and self.mode == "trace"
        self.mean_prompt = float(self.prompt.mean()) if n else 0.0
        self.mean_pairs = float((self.prompt**2).mean() / 2.0) if n else 0.0
        self.order = np.asarray(order, dtype=np.int64)
        self.span_all = span_all
        self.weighted_prompt = float((self.prompt**2).sum() / self.prompt.sum()) if n else 0.0
        self.set_acceptance(self.align(acceptance))

    def align(self, acceptance: AcceptanceModel) -> AcceptanceModel:
        """A model whose rows follow the sample's order, reordered to arrival order."""
        return acceptance.with_conditional(acceptance.conditional[self.order])

    def set_acceptance(self, acceptance: AcceptanceModel) -> None:
        """(Re)build the window tables from per-request conditionals in arrival order."""
        surv = acceptance.survival()
        block = surv.shape[1]
        g = _THETA.size
        n = self.prompt.size
        self.block = block
        # m_req[w, g, i]: positions verified at window w and threshold g; e_acc: E - 1
        keep = surv[None, :, :] >= _THETA[:, None, None]          # (g, i, k)
        self.m_req = np.zeros((block + 1, g, n))
        self.e_acc = np.zeros((block + 1, g, n))
        for w in range(1, block + 1):
            kept = keep[:, :, :w].cumprod(axis=2)
            self.m_req[w] = kept.sum(axis=2)
            self.e_acc[w] = (kept * surv[None, :, :w]).sum(axis=2)
        self._scalars: dict[float, tuple[FloatArray, ...]] = {}

    def scalars(self, gain: float) -> tuple[FloatArray, ...]:
        """(window+1, thresholds) tables: mean decode steps per request, step-weighted
        verified positions, step-weighted context, tokens per step; accepted tokens × gain."""
        hit = self._scalars.get(gain)
        if hit is None:
            need = np.maximum(self.output - 1.0, 1.0)
            steps = need / (1.0 + self.e_acc * gain)
            tot = steps.sum(axis=2)
            s_bar = steps.mean(axis=2)
            m_bar = (steps * self.m_req).sum(axis=2) / tot
            ctx = (steps * (self.prompt + self.output / 2.0)).sum(axis=2) / tot
            e_bar = need.sum() / tot
            hit = (s_bar, m_bar, ctx, e_bar)
            if len(self._scalars) > 4:
                self._scalars.clear()
            self._scalars[gain] = hit
        return hit

    def per_request(self, n: IntArray, g: IntArray, gain: FloatArray
                    ) -> tuple[FloatArray, FloatArray]:
        """Per config: expected tokens per step and decode steps of every request (K, N)."""
        e = 1.0 + self.e_acc[n, g] * gain[:, None]
        steps = np.maximum(self.output - 1.0, 1.0)[None, :] / e
        return e, steps


@dataclass
class State:
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


def operate(wl: Workload, grid: Grid, cost: CostModel, knobs: Knobs,
             lam: FloatArray | None, t0: FloatArray | None = None) -> State:
    """Steady state at arrival rate ``lam`` (trace) or at the policy's concurrency (None)."""
    k = len(grid)
    n = grid.n
    win = n.astype(np.float64)
    gain_av = math.exp(knobs.av)
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
            g = np.where(av, np.clip(np.searchsorted(_THETA, theta), 0, _THETA.size - 1), 0)
            s_bar, m_bar, ctx, e_bar = pick(g)
        done = np.abs(t_new - t) <= 1e-5 * t
        t = t_new
        if done.all():
            break
    b = np.minimum(rate * np.minimum(s_bar * t, window_s), grid.seqs)
    pre = rate * wl.mean_prompt * t
    again = cost.step(b * (1.0 + m_bar) + pre, b, b * ctx, rate * wl.mean_pairs * t, win, pre)
    stable = (np.abs(again - t) <= 1e-3 * t) & (t < 1e2)
    return State(rate, t, b, g, gain, s_bar, m_bar, ctx, e_bar, stable)


@dataclass
class Latency:
    feasible: npt.NDArray[np.bool_]   # stable, budget left for prefill, slots, KV cache
    durations: FloatArray             # (K, M) step durations (s), ITL factor applied
    weights: FloatArray               # (K, M) how many steps of each duration
    ttft: FloatArray                  # (K, N) per-request TTFT
    step: FloatArray | None = None    # (K, N) per-request decode step time (trace replay)
    end: FloatArray | None = None     # (K, N) per-request completion time (trace replay)


def closed_latency(wl: Workload, grid: Grid, cost: CostModel, knobs: Knobs,
                   st: State) -> Latency:
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
    ttft = service + math.exp(knobs.ttft) * wait
    kv_ok = st.b * (st.ctx + wl.output.mean() / 2.0) <= wl.kv_tokens
    feasible = st.stable & (avail >= 1.0) & kv_ok & (grid.tok >= grid.seqs)
    return Latency(feasible, durations * math.exp(knobs.itl), weights, ttft)


def weighted_quantile(values: FloatArray, weights: FloatArray, q: float) -> FloatArray:
    order = np.argsort(values, axis=1)
    v = np.take_along_axis(values, order, axis=1)
    w = np.take_along_axis(weights, order, axis=1)
    cum = np.cumsum(w, axis=1)
    total = cum[:, -1:]
    idx = (cum < q * np.maximum(total, 1e-30)).sum(axis=1)
    idx = np.minimum(idx, v.shape[1] - 1)
    out: FloatArray = v[np.arange(v.shape[0]), idx]
    return out


def count_le(sorted_rows: FloatArray, queries: FloatArray) -> IntArray:
    """Per row, how many values of ``sorted_rows`` are <= each query (row-wise searchsorted)."""
    k, n = sorted_rows.shape
    span = float(max(np.abs(sorted_rows).max(initial=0.0), np.abs(queries).max(initial=0.0)))
    span = 2.0 * span + 1.0
    off = (np.arange(k, dtype=np.float64) * span)[:, None]
    idx = np.searchsorted((sorted_rows + off).ravel(), (queries + off).ravel(), side="right")
    out: IntArray = idx.reshape(queries.shape) - (np.arange(k) * n)[:, None]
    return out


def _segments(xp: FloatArray, fp: FloatArray, i: IntArray) -> tuple[FloatArray, ...]:
    """x0, x1, f0, f1 of the segments ``i`` (per row) of (xp, fp): flat indexing, which is
    several times cheaper than take_along_axis on the small arrays the predictor uses."""
    flat = i + (np.arange(xp.shape[0]) * xp.shape[1])[:, None]
    xs, fs = xp.ravel(), fp.ravel()
    return xs[flat], xs[flat + 1], fs[flat], fs[flat + 1]


def interp_rows(xp: FloatArray, fp: FloatArray, x: FloatArray, *,
                extend: bool = False, uniform: bool = False) -> FloatArray:
    """Row-wise linear interpolation of (xp, fp) at x (xp sorted per row). Outside xp the
    value is clamped, or with ``extend`` continued along the last segment past the end.
    ``uniform``: every row of xp is evenly spaced from 0 (the segment is found by division
    instead of a search)."""
    m = xp.shape[1]
    if uniform:
        cell = np.floor(x * ((m - 1) / np.maximum(xp[:, -1:], 1e-300)))
        # fmax/fmin: a NaN query takes segment 0 (its value stays NaN) instead of an index
        # the cast to int would make up
        i = np.fmin(np.fmax(cell, 0), m - 2).astype(np.int64)
    else:
        i = np.minimum(np.maximum(count_le(xp, x) - 1, 0), m - 2)
    x0, x1, f0, f1 = _segments(xp, fp, i)
    w = np.maximum((x - x0) / np.maximum(x1 - x0, 1e-12), 0.0)
    if not extend:
        w = np.minimum(w, 1.0)
    out: FloatArray = f0 + w * (f1 - f0)
    return out


def inverse_rows(xp: FloatArray, fp: FloatArray, y: FloatArray) -> FloatArray:
    """x where the non-decreasing row function (xp, fp) reaches y; past the end, continued
    along its last segment (the inverse of ``interp_rows(..., extend=True)``)."""
    m = xp.shape[1]
    i = np.minimum(np.maximum(count_le(fp, y) - 1, 0), m - 2)
    x0, x1, f0, f1 = _segments(xp, fp, i)
    inside = x0 + np.maximum(y - f0, 0.0) / np.maximum(f1 - f0, 1e-12) * (x1 - x0)
    slope = (xp[:, -1:] - xp[:, -2:-1]) / np.maximum(fp[:, -1:] - fp[:, -2:-1], 1e-12)
    beyond = xp[:, -1:] + (y - fp[:, -1:]) * slope
    out: FloatArray = np.where(y > fp[:, -1:], beyond, inside)
    return out


