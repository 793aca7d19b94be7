"""The capacity reading of a trial: the highest traffic rate a replica serves within the SLOs.

Replaying a production trace at its own rate leaves a well-sized replica idle part of the time:
every config then serves every request and goodput equals the arrival rate, so configs cannot
be told apart. Following DistServe, a trial's goodput is instead measured at the highest rate
the replica sustains: the trace is replayed on the same replica at rising (or falling) speeds
(``time_scale``, doubling or halving; quadrupling while every p99 is under a quarter of
its bound), then refined between the fastest rate met and the
slowest missed (Brent's method on the SLO margin, :func:`replay_margin`: interpolation where
the p99s move smoothly with the rate, bisection where they do not), and the fastest replay
that meets the SLO is the trial's measurement (``extra["load_scale"]`` says how fast). No
server restart happens between replays, so on real hardware this costs replay time only.

A replay meets the SLO when every request completed, p99 TTFT and p99 ITL are within bounds
(:meth:`autotune.slo.Slo.check`) **and the replica kept up with the arrivals**
(:func:`kept_up` at least :data:`KEPT_UP`). A sample is short: a replica serving half the
offered rate queues the whole sample within a TTFT bound of several seconds, and would pass on
p99s alone at a rate it cannot sustain (a longer sample at that rate misses any bound). How far
it fell behind is read from its queue: the first-token times, in completion order, grow over
the sample when requests wait longer and longer.

Going down, a replay that fell behind says how far: the fraction of the offered rate it kept
up with estimates the rate it sustains. The next rate is that estimate when it is below half
the current one (a rate 11x out of reach costs one replay, not four halvings), so more of the
``max_replays`` go to refining and the reading's resolution does not depend on how far out of
reach the rate is. Every rate is still measured, never assumed: a wrong estimate only costs
resolution.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

from autotune.backends import Replica
from autotune.slo import KEPT_UP, MAX_SCALE, MIN_SCALE
from autotune.types import Measurement, Progress, ReplaySchedule, Slo

__all__ = ["KEPT_UP", "MAX_SCALE", "MIN_SCALE", "RESOLUTION", "kept_up", "replay_at_capacity",
           "replay_margin"]

#: The capacity search stops refining once the highest rate met and the lowest missed are
#: within this fraction of each other.
RESOLUTION = 0.02

#: :func:`replay_margin` of a replay that missed the SLO by failed requests, not by a p99.
FAILED_MARGIN = math.log(2.0)

#: :func:`kept_up` fits its line through at most this many requests (evenly spaced): the
#: Theil-Sen estimator is quadratic in the points.
_TREND_POINTS = 1000


def _arrival_span(schedule: ReplaySchedule) -> float:
    """Seconds from the first to the last measured arrival at ``time_scale`` 1 (0: unknown)."""
    times = [r.arrival_s for i, r in enumerate(schedule.requests)
             if i >= schedule.warmup_requests and r.arrival_s is not None]
    return max(times) - min(times) if len(times) > 1 else 0.0


def kept_up(m: Measurement, arrival_span_s: float) -> float:
    """The fraction of the offered rate the replay kept up with, read from its queue.

    A replica serving a fraction f of the rate takes span / f to serve what arrived in
    ``arrival_span_s`` (the measured requests' arrival span), so the wait grows by
    G = span (1/f - 1) from the first request to the last, and f = span / (span + G). G is read
    from the completed requests' first-token times in completion order (a Theil-Sen line, which
    the odd long prefill does not tilt): about 0 at any rate the replica sustains, however long
    each request takes. 1 when the queue did not grow; ``nan`` when it cannot be read.
    """
    import numpy as np
    from scipy.stats import theilslopes

    ttft = m.ttft_s[m.ok]
    if arrival_span_s <= 0 or ttft.size < 3:
        return math.nan
    at = np.unique(np.linspace(0, ttft.size - 1, min(ttft.size, _TREND_POINTS)).round())
    growth = float(theilslopes(ttft[at.astype(int)], at).slope) * (ttft.size - 1)
    return arrival_span_s / (arrival_span_s + growth) if growth > 0 else 1.0


def replay_margin(m: Measurement, slo: Slo, kept: float = math.nan) -> float:
    """How far a replay is from the SLO's edge, as the log of its binding ratio (the largest
    of: measured p99 over bound, and the share of the rate it fell behind by, 1 - ``kept``
    (:func:`kept_up`), over the share allowed, 1 - :data:`KEPT_UP`): <= 0 when the replay met
    the SLO, > 0 when it missed, and at least :data:`FAILED_MARGIN` (failed requests alone
    read just that).
    A replica that kept up with the whole rate adds nothing (a ratio of 0), so the margin of a
    replay far inside its bounds stays far below 0, where Brent's method reads it."""
    check = m.slo_check(slo)
    ratios = [measured / bound for measured, bound in ((check.ttft_p99_ms, slo.ttft_p99_ms),
                                                       (check.itl_p99_ms, slo.itl_p99_ms))
              if bound is not None and bound > 0]
    if math.isfinite(kept):
        ratios.append(max(1.0 - kept, 0.0) / (1.0 - KEPT_UP))
    worst = max(ratios, default=math.nan)
    margin = math.log(worst) if worst > 0 and math.isfinite(worst) else math.nan
    if check.met and not kept < KEPT_UP:
        return min(margin, 0.0) if math.isfinite(margin) else -1.0
    # every miss reads at least FAILED_MARGIN: p99s often flatten out just over a bound (Kimi
    # DSpark chat-low: p99 ITL 61-63 ms from 1/8 to 1/4 of the rate against 60, 26 ms at 1/16),
    # and their true ratio, a hair above 1, draws Brent's interpolation next to the missed rate
    # over and over; read as a clear miss, the next rate lands inside the bracket
    return max(margin, FAILED_MARGIN) if math.isfinite(margin) else FAILED_MARGIN


class _OutOfReplays(Exception):
    pass


class _Replay(NamedTuple):
    """One replay of the capacity search: its verdict, measurement, :func:`replay_margin` and
    :func:`kept_up`."""

    met: bool
    measurement: Measurement
    margin: float
    kept_up: float


def _refine(run: Callable[[float], bool], tried: dict[float, _Replay], lo: float, hi: float,
            max_replays: int) -> float:
    """The highest rate met between ``lo`` (met) and ``hi`` (missed), within the replays left.

    Brent's method (:func:`scipy.optimize.brentq`) on the SLO margin against the log of the
    rate: interpolation where the margin is smooth, bisection where it is not, the bracket kept
    either way. It stops when the bracket is within :data:`RESOLUTION` or the replays are spent.
    When ``hi`` fell behind, the first rate tried is a little below the one it kept up with
    (over :data:`KEPT_UP`): a replica that falls behind keeps up with the rate it sustains,
    which puts that rate within one replay.
    """
    from scipy.optimize import brentq

    sustained = hi * tried[hi].kept_up / KEPT_UP * (1 - RESOLUTION / 2)
    if lo * (1 + RESOLUTION) < sustained < hi and len(tried) < max_replays:
        if run(sustained):
            lo = sustained
        else:
            hi = sustained
    scales = {math.log(s): s for s in (lo, hi)}  # exp(log(s)) may not give s back

    def margin(x: float) -> float:
        scale = scales.setdefault(x, math.exp(x))
        if scale not in tried:
            if len(tried) >= max_replays:
                raise _OutOfReplays
            run(scale)
        return tried[scale].margin

    with contextlib.suppress(_OutOfReplays):  # the replays are spent: keep what was met
        brentq(margin, math.log(lo), math.log(hi), xtol=math.log1p(RESOLUTION),
               full_output=True, disp=False)
    return max(s for s in tried if lo <= s < hi and tried[s].met)


def _tag(scale: float, tried: dict[float, _Replay], feasible: bool, at_target: _Replay,
         slo: Slo) -> Measurement:
    """The replay at ``scale``, tagged with the scale it ran at and how much of the rate it
    kept up with; with what the replay at the target rate (the schedule's own ``time_scale``)
    measured: ``target_*`` p99s, failures and keeping up, which say by how much a config
    misses the SLO at the rate it must serve; and with every replay's decode aggregates and
    p99s (``replay{i}_*``): the same replica at several loads profiles its step time at
    several batch sizes, and its tail at several rates (:mod:`autotune.predict.tail`)."""
    m = tried[scale].measurement
    check = at_target.measurement.slo_check(slo)
    extra = {**m.extra, "load_scale": scale, "capacity_replays": float(len(tried)),
             "capacity_met_slo": 1.0 if feasible else 0.0, "kept_up": tried[scale].kept_up,
             "target_ttft_p99_ms": check.ttft_p99_ms, "target_itl_p99_ms": check.itl_p99_ms,
             "target_failed_requests": float(check.failed_requests),
             "target_kept_up": at_target.kept_up}
    for i, (s, replayed) in enumerate(sorted(tried.items())):
        decode, tokens, span = replayed.measurement.decode_totals()
        p99 = replayed.measurement.slo_check(slo)
        extra.update({f"replay{i}_scale": s, f"replay{i}_decode_time_s": decode,
                      f"replay{i}_decode_tokens": tokens, f"replay{i}_duration_s": span,
                      f"replay{i}_itl_p99_ms": p99.itl_p99_ms,
                      f"replay{i}_ttft_p99_ms": p99.ttft_p99_ms})
    return replace(m, extra=extra)


def replay_at_capacity(replica: Replica, schedule: ReplaySchedule, slo: Slo,
                       progress: Progress | None = None, max_replays: int = 7) -> Measurement:
    """The measurement at the highest ``time_scale`` that meets ``slo`` and keeps up with the
    arrivals (see module doc).

    When even the slowest tried rate misses, the slowest replay is returned (tagged
    ``capacity_met_slo = 0``) so the search sees by how much it misses.
    """
    wall = 0.0
    tried: dict[float, _Replay] = {}
    base_span = _arrival_span(schedule)

    def run(scale: float) -> bool:
        nonlocal wall
        m = replica.replay(replace(schedule, time_scale=scale), progress)
        wall += m.wall_time_s
        kept = kept_up(m, base_span / scale)
        tried[scale] = _Replay(m.slo_check(slo).met and not kept < KEPT_UP, m,
                               replay_margin(m, slo, kept), kept)
        return tried[scale].met

    scale = schedule.time_scale
    lo: float | None = None  # fastest known feasible
    hi: float | None = None  # slowest known infeasible
    if run(scale):
        lo = scale
        while len(tried) < max_replays and scale < MAX_SCALE:
            # far inside every bound (each p99 under a quarter of it): quadruple, else double
            far = tried[scale].margin < -math.log(4.0)
            scale = min(scale * (4.0 if far else 2.0), MAX_SCALE)
            if run(scale):
                lo = scale
            else:
                hi = scale
                break
    else:
        hi = scale
        while len(tried) < max_replays and scale > MIN_SCALE:
            kept = tried[scale].kept_up
            step = kept if kept < 0.5 else 0.5  # nan (unknown) compares False: halve
            scale = max(scale * step, MIN_SCALE)
            if run(scale):
                lo = scale
                break
            hi = scale
    if lo is not None and hi is not None:
        lo = _refine(run, tried, lo, hi, max_replays)
    at_target = tried[schedule.time_scale]
    if lo is None:
        kept_reading = _tag(min(tried), tried, False, at_target, slo)
    else:
        kept_reading = _tag(lo, tried, True, at_target, slo)
    return replace(kept_reading, wall_time_s=wall)
