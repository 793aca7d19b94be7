"""The scheduler's steady state (mean field), shared by the replica model's readings.

:func:`solve_steady_state` solves vLLM's scheduler steady state at an arrival rate (decoding
sequences B = λ·S̄·t by Little's law, verified tokens T = B·(1 + m̄) + λ·P̄·t, step time
t = cost(T, ...), adaptive verification keeping a draft position while its survival is worth
its marginal step cost). The replays read it: :mod:`autotune.predict.closed_loop` and
:mod:`autotune.predict.trace_replay`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autotune.predict.step_cost import StepCostModel
from autotune.predict.workload import THRESHOLDS, ConfigGrid, ReplicaFactors, WorkloadModel

__all__ = ["SteadyState", "solve_steady_state"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_ITERATIONS = 60


@dataclass(frozen=True)
class SteadyState:
    """The scheduler's steady state of every config (arrays of length K, one per config).

    The replays read it: the closed loop directly (:mod:`autotune.predict.closed_loop`), the
    trace replay as its starting point (:mod:`autotune.predict.trace_replay`).
    """

    #: arrival rate (requests/s); in a closed loop, the completion rate the concurrency makes
    lam: FloatArray
    #: time of one engine step (s), the fixed point of the step cost at this load
    t: FloatArray
    #: mean number of sequences decoding in a step (Little's law, capped by max_num_seqs)
    b: FloatArray
    #: adaptive verification's survival threshold, an index into
    #: :data:`~autotune.predict.workload.THRESHOLDS` (0: every position of the window verified)
    g: IntArray
    #: multiplier on accepted tokens: the fitted adaptive-verification factor, 1 without it
    gain: FloatArray
    #: mean decode steps per request
    s_bar: FloatArray
    #: draft positions one decoding sequence verifies per step (step-weighted mean)
    m_bar: FloatArray
    #: KV context of one decoding sequence (tokens, step-weighted mean)
    ctx: FloatArray
    #: tokens one sequence emits per decode step
    e_bar: FloatArray
    #: the step time reproduces itself within 0.1% and stays under 100 s (a queue that does
    #: not grow without bound)
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
