"""The capacity reading of a trial: the highest traffic rate a replica serves within the SLOs.

Replaying a production trace at its own rate leaves a well-sized replica idle part of the time:
every config then serves every request and goodput equals the arrival rate, so configs cannot
be told apart. Following DistServe, a trial's goodput is instead measured at the highest rate
the replica sustains: the trace is replayed on the same replica at rising (or falling) speeds
(``time_scale``, doubling or halving), then refined between the fastest rate met and the
slowest missed (Brent's method on the SLO margin, :func:`replay_margin`: interpolation where
the p99s move smoothly with the rate, bisection where they do not), and the fastest replay
that meets the SLO (:meth:`autotune.slo.Slo.check`: every request completed, p99 TTFT and p99
ITL within bounds) is the trial's measurement (``extra["load_scale"]`` says how fast). No
server restart happens between replays, so on real hardware this costs replay time only.

Going down, a replay that was overloaded says how far: it took longer to serve the requests
than they took to arrive, and the ratio (:func:`overload_ratio`) estimates the rate the replica
keeps up with. The next rate is that estimate when it is below half the current one (a rate
11x out of reach costs one replay, not four halvings), so more of the ``max_replays`` go to
refining and the reading's resolution does not depend on how far out of reach the rate is.
Every rate is still measured, never assumed: a wrong estimate only costs resolution.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import replace

from autotune.backends import Replica
from autotune.types import Measurement, Progress, ReplaySchedule, Slo

__all__ = ["MAX_SCALE", "MIN_SCALE", "RESOLUTION", "overload_ratio", "replay_at_capacity",
           "replay_margin"]

MIN_SCALE = 1 / 64
MAX_SCALE = 64.0

#: The capacity search stops refining once the highest rate met and the lowest missed are
#: within this fraction of each other.
RESOLUTION = 0.02

#: :func:`replay_margin` of a replay that missed the SLO by failed requests, not by a p99.
FAILED_MARGIN = math.log(2.0)


def _arrival_span(schedule: ReplaySchedule) -> float:
    """Seconds from the first to the last measured arrival at ``time_scale`` 1 (0: unknown)."""
    times = [r.arrival_s for i, r in enumerate(schedule.requests)
             if i >= schedule.warmup_requests and r.arrival_s is not None]
    return max(times) - min(times) if len(times) > 1 else 0.0


def overload_ratio(m: Measurement, arrival_span_s: float) -> float:
    """How much of the offered rate the replay kept up with: the measured requests' arrival
    span over the time the replica took to serve them (the measured window less the fastest
    request's own latency, so a light-load replay reads about 1). Below 1 the replica fell
    behind; 0.1 says it served about a tenth of the rate. ``nan`` when it cannot be read."""
    done = m.e2e_s[m.ok]
    if arrival_span_s <= 0 or done.size == 0:
        return math.nan
    busy = m.duration_s - float(done.min())
    return min(1.0, arrival_span_s / busy) if busy > 0 else math.nan


def replay_margin(m: Measurement, slo: Slo) -> float:
    """How far a replay is from the SLO's edge, as the log of its binding ratio (measured p99
    over bound, the largest over the bounds): <= 0 when the replay met the SLO, > 0 when it
    missed. A miss by failed requests alone reads :data:`FAILED_MARGIN`."""
    check = m.slo_check(slo)
    ratios = [measured / bound for measured, bound in ((check.ttft_p99_ms, slo.ttft_p99_ms),
                                                       (check.itl_p99_ms, slo.itl_p99_ms))
              if bound is not None and bound > 0]
    worst = max(ratios, default=math.nan)
    margin = math.log(worst) if worst > 0 and math.isfinite(worst) else math.nan
    if check.met:
        return min(margin, 0.0) if math.isfinite(margin) else -1.0
    return max(margin, FAILED_MARGIN) if math.isfinite(margin) else FAILED_MARGIN


class _OutOfReplays(Exception):
    pass


def _refine(run: Callable[[float], bool], tried: dict[float, tuple[bool, Measurement]], slo: Slo,
            lo: float, hi: float, max_replays: int) -> float:
    """The highest rate met between ``lo`` (met) and ``hi`` (missed), within the replays left.

    Brent's method (:func:`scipy.optimize.brentq`) on the SLO margin against the log of the
    rate: interpolation where the margin is smooth, bisection where it is not, the bracket kept
    either way. It stops when the bracket is within :data:`RESOLUTION` or the replays are spent.
    """
    from scipy.optimize import brentq

    margins = {math.log(s): replay_margin(tried[s][1], slo) for s in (lo, hi)}

    def margin(x: float) -> float:
        if x not in margins:
            if len(tried) >= max_replays:
                raise _OutOfReplays
            scale = math.exp(x)
            run(scale)
            margins[x] = replay_margin(tried[scale][1], slo)
        return margins[x]

    with contextlib.suppress(_OutOfReplays):  # the replays are spent: keep what was met
        brentq(margin, math.log(lo), math.log(hi), xtol=math.log1p(RESOLUTION),
               full_output=True, disp=False)
    return max(s for s in tried if lo <= s < hi and tried[s][0])


def _tag(m: Measurement, scale: float, tried: dict[float, tuple[bool, Measurement]],
         feasible: bool, at_target: Measurement, slo: Slo) -> Measurement:
    """The kept replay, tagged with the scale it ran at; with what the replay at the target
    rate (the schedule's own ``time_scale``) measured: ``target_*`` p99s and failures, which
    say by how much a config misses the SLO at the rate it must serve; and with every replay's
    decode aggregates (``replay{i}_*``): the same replica at several loads profiles its step
    time at several batch sizes."""
    check = at_target.slo_check(slo)
    extra = {**m.extra, "load_scale": scale, "capacity_replays": float(len(tried)),
             "capacity_met_slo": 1.0 if feasible else 0.0,
             "target_ttft_p99_ms": check.ttft_p99_ms, "target_itl_p99_ms": check.itl_p99_ms,
             "target_failed_requests": float(check.failed_requests)}
    for i, (s, (_, replayed)) in enumerate(sorted(tried.items())):
        decode, tokens, span = replayed.decode_totals()
        extra.update({f"replay{i}_scale": s, f"replay{i}_decode_time_s": decode,
                      f"replay{i}_decode_tokens": tokens, f"replay{i}_duration_s": span})
    return replace(m, extra=extra)


def replay_at_capacity(replica: Replica, schedule: ReplaySchedule, slo: Slo,
                       progress: Progress | None = None, max_replays: int = 7) -> Measurement:
    """The measurement at the highest ``time_scale`` that meets ``slo`` (see module doc).

    When even the slowest tried rate misses the SLO, the slowest replay is returned (tagged
    ``capacity_met_slo = 0``) so the search sees by how much it misses.
    """
    wall = 0.0
    tried: dict[float, tuple[bool, Measurement]] = {}

    def run(scale: float) -> bool:
        nonlocal wall
        m = replica.replay(replace(schedule, time_scale=scale), progress)
        wall += m.wall_time_s
        tried[scale] = (m.slo_check(slo).met, m)
        return tried[scale][0]

    base_span = _arrival_span(schedule)
    scale = schedule.time_scale
    lo: float | None = None  # fastest known feasible
    hi: float | None = None  # slowest known infeasible
    if run(scale):
        lo = scale
        while len(tried) < max_replays and scale * 2 <= MAX_SCALE:
            scale *= 2
            if run(scale):
                lo = scale
            else:
                hi = scale
                break
    else:
        hi = scale
        while len(tried) < max_replays and scale > MIN_SCALE:
            kept_up = overload_ratio(tried[scale][1], base_span / scale)
            step = kept_up if kept_up < 0.5 else 0.5  # nan (unknown) compares False: halve
            scale = max(scale * step, MIN_SCALE)
            if run(scale):
                lo = scale
                break
            hi = scale
    if lo is not None and hi is not None:
        lo = _refine(run, tried, slo, lo, hi, max_replays)
    at_target = tried[schedule.time_scale][1]
    if lo is None:
        slowest = min(tried)
        kept = _tag(tried[slowest][1], slowest, tried, False, at_target, slo)
    else:
        kept = _tag(tried[lo][1], lo, tried, True, at_target, slo)
    return replace(kept, wall_time_s=wall)
