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
the sample when requests wait longer and longer. A reading falls behind only when its queue
shows it with :data:`~autotune.slo.P99_CONFIDENCE`: a window of a dozen requests whose long
prompts happen to come late fits a rising line by chance, and its verdict is then undecided
(``kept_up_estimate`` below :data:`KEPT_UP`, ``kept_up`` the most the queue allows, above).

Going down, a replay that fell behind says how far: the fraction of the offered rate it kept
up with estimates the rate it sustains. The next rate is that estimate when it is below half
the current one (a rate 11x out of reach costs one replay, not four halvings), so more of the
``max_replays`` (:data:`~autotune.slo.MAX_READINGS` unless told) go to refining and the
reading's resolution does not depend on how far out of reach the rate is. Every rate is still
measured, never assumed: a wrong estimate only costs resolution.

Each reading replays a bounded window of the traffic (``ReplaySchedule.capacity_window_s``,
the policy's ``replay.window_s``): the busiest slice of the sample whose arrivals fit in it at
the rate read (:mod:`~autotune.orchestrate.capacity_window`), so a reading's cost is about the
window at any rate. A rate is credited only when its reading was sustained (the window spans
:data:`~autotune.orchestrate.capacity_window.SETTLE_LIFETIMES` median request lifetimes): a
reading that only drained a burst reads as a miss (its margin is the settle margin).

When the strategy that chose the config says where it expects the capacity
(``ReplaySchedule.capacity_hint``), the search starts there instead of at the rate to serve and
steps by the hint's standard deviation (squared at each further step, up to 4×), so the bracket
costs about two readings near the knee; the replica seconds it expects to spend are recorded
before it starts (``capacity_predicted_busy_s``).

The kept reading's p99s carry order-statistic intervals (:meth:`autotune.slo.Slo.verdict`):
when one straddles its bound, the rate is read once more with twice the window (when the sample
holds more requests there, enough to bound a p99 TTFT); a re-read that misses gives the
capacity to the next slower rate met, and one still undecided is reported as such
(``slo_verdict_code`` 0.5).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

from autotune.backends import Replica
from autotune.knee_search import Probe, first_step, predict, search
from autotune.orchestrate.capacity_window import (
    SETTLE_LIFETIMES,
    reading_lifetime,
    settle_margin,
    warmed_window,
    window_requests,
)
from autotune.slo import (
    KEPT_UP,
    MAX_READINGS,
    MAX_SCALE,
    MIN_SCALE,
    P99_CONFIDENCE,
    RESOLUTION,
    SloVerdict,
    predicted_readings,
    values_to_bound,
)
from autotune.types import CAP_BOUNDS, Measurement, Progress, ReplaySchedule, Request, Slo

__all__ = ["KEPT_UP", "MAX_SCALE", "MIN_SCALE", "RESOLUTION", "kept_up", "predicted_readings",
           "reading_cost_s", "replay_at_capacity", "replay_margin"]

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


def kept_up(m: Measurement, arrival_span_s: float, confidence: float | None = None) -> float:
    """The fraction of the offered rate the replay kept up with, read from its queue.

    A replica serving a fraction f of the rate takes span / f to serve what arrived in
    ``arrival_span_s`` (the measured requests' arrival span), so the wait grows by
    G = span (1/f - 1) from the first request to the last, and f = span / (span + G). G is read
    from the completed requests' first-token times in completion order (a Theil-Sen line, which
    the odd long prefill does not tilt): about 0 at any rate the replica sustains, however long
    each request takes. 1 when the queue did not grow; ``nan`` when it cannot be read.

    With ``confidence``, the most of the rate the queue lets one say the replay kept up with:
    the high end of a one-sided interval at that confidence (from the interval of the line's
    slope). A handful of first-token times, some of them long prefills of their own, fit a
    line of any slope between flat and steep; a verdict of falling behind must rest on more.
    """
    estimate, most = _kept_up_line(m, arrival_span_s, confidence or P99_CONFIDENCE)
    return estimate if confidence is None else most


def _kept_up_line(m: Measurement, arrival_span_s: float, confidence: float
                  ) -> tuple[float, float]:
    """:func:`kept_up` as its line reads it and at ``confidence``, from one Theil-Sen fit."""
    import numpy as np
    from scipy.stats import theilslopes

    ttft = m.ttft_s[m.ok]
    if arrival_span_s <= 0 or ttft.size < 3:
        return math.nan, math.nan
    at = np.unique(np.linspace(0, ttft.size - 1, min(ttft.size, _TREND_POINTS)).round())
    line = theilslopes(ttft[at.astype(int)], at, alpha=2.0 * confidence - 1.0)

    def kept(slope: float) -> float:
        growth = slope * (ttft.size - 1)
        return arrival_span_s / (arrival_span_s + growth) if growth > 0 else 1.0

    return kept(float(line.slope)), kept(float(line.low_slope))


def replay_margin(m: Measurement, slo: Slo, kept: float = math.nan) -> float:
    """How far a replay is from the SLO's edge, as the log of its binding ratio (the largest
    of: measured p99 over bound, and the share of the rate it fell behind by, 1 - ``kept``
    (:func:`kept_up`), over the share allowed, 1 - :data:`KEPT_UP`): <= 0 when the replay met
    the SLO, > 0 when it missed (:data:`FAILED_MARGIN` when failed requests alone missed it).
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
    # a miss whose ratios read inside (failed requests alone) or not at all reads
    # FAILED_MARGIN; one just over a bound reads just over 0, where the search's
    # interpolation puts the knee near it (its projection bounds what a flat p99 costs)
    return margin if math.isfinite(margin) and margin > 0 else FAILED_MARGIN


class _Replay(NamedTuple):
    """One reading of the capacity search: its verdict (``met``: the SLO met, the arrivals kept
    up with and the rate sustained), measurement, :func:`replay_margin` (raised to the
    :func:`~autotune.orchestrate.capacity_window.settle_margin` when that is higher),
    :func:`kept_up` (at :data:`~autotune.slo.P99_CONFIDENCE`: the most of the rate the queue
    allows), whether the SLO alone was met (``slo_met``), whether its window was a
    sustained rate, and its window: replica seconds over which its measured requests arrived."""

    met: bool
    measurement: Measurement
    margin: float
    kept_up: float
    slo_met: bool = True
    sustained: bool = True
    window_s: float = math.nan
    parts: tuple[float, ...] = ()
    #: :func:`kept_up` as the queue's line reads it (``kept_up`` is its high end)
    kept_estimate: float = math.nan

    def probe(self) -> Probe:
        """What the search reads of it: met, margin, each constraint's margin and, when it
        fell behind, the share of its rate the replica sustains (the share it kept up with
        over the share required)."""
        behind = self.kept_up < KEPT_UP
        return Probe(self.met, self.margin, self.kept_up / KEPT_UP if behind else math.nan,
                     self.parts)


def constraint_margins(m: Measurement, slo: Slo, kept: float, settle: float
                       ) -> tuple[float, ...]:
    """Each constraint's margin, log(measured / allowed), in a fixed order: p99 TTFT, p99
    ITL, the share of the rate fallen behind (:func:`kept_up`), the settle margin
    (:func:`~autotune.orchestrate.capacity_window.settle_margin`); NaN when unbounded or
    unread, -inf when nothing was lost."""
    check = m.slo_check(slo)

    def log_ratio(x: float, bound: float | None) -> float:
        if bound is None or not bound > 0 or not math.isfinite(x):
            return math.nan
        return math.log(x / bound) if x > 0 else -math.inf

    lost = max(1.0 - kept, 0.0) if math.isfinite(kept) else math.nan
    return (log_ratio(check.ttft_p99_ms, slo.ttft_p99_ms),
            log_ratio(check.itl_p99_ms, slo.itl_p99_ms),
            log_ratio(lost, 1.0 - KEPT_UP), settle)


def reading_cost_s(scale: float, window_s: float | None, sample_span_s: float,
                   warmup_s: float = 0.0) -> float:
    """Replica seconds one reading at ``scale`` is expected to take: its window (the sample's
    span at that rate when the whole sample fits) plus one drain (a quarter of a sustained
    window, :mod:`~autotune.orchestrate.capacity_window`), plus ``warmup_s`` of warm-up
    arrivals ahead of it."""
    span = sample_span_s / scale if sample_span_s > 0 else math.nan
    per = min(window_s, span) if window_s is not None else span
    return per * (1.0 + 1.0 / SETTLE_LIFETIMES) + warmup_s


def _tag(scale: float, readings: list[tuple[float, _Replay]], feasible: bool,
         at_target: _Replay | None, slo: Slo, kept: _Replay) -> Measurement:
    """The kept reading ``kept`` (at ``scale``), tagged with the scale it ran at, how much of
    the rate it kept up with (``kept_up``, what it was judged on, and ``kept_up_estimate``),
    whether it was sustained, the slowest rate that missed the SLO, and its verdict with the p99
    intervals (:func:`_verdict`); with what the
    reading at the target rate (the schedule's own ``time_scale``; absent when the search did
    not read it) measured: ``target_*`` p99s, failures and keeping up, which say by how much a
    config misses the SLO at the rate it must serve; and with every reading's decode
    aggregates, cost and size, p99s, window and request lifetime (``replay{i}_*``, numbered as
    in ``readings``): the same replica at several loads profiles its step time at several
    batch sizes, and its tail and lifetimes at several rates (:mod:`autotune.predict.tail`)."""
    m = kept.measurement
    verdict = _verdict(kept, slo)
    extra: dict[str, float] = {
        **m.extra, "load_scale": scale, "capacity_replays": float(len(readings)),
        "capacity_met_slo": 1.0 if feasible else 0.0, "kept_up": kept.kept_up,
        "kept_up_estimate": kept.kept_estimate,
        "capacity_sustained": 1.0 if kept.sustained else 0.0,
        "capacity_window_s": kept.window_s, **verdict.as_metrics()}
    for key in CAP_BOUNDS:  # a cap bound holds for the config when it held in every replay
        if any(key in r.measurement.extra for _, r in readings):
            peaks = [r.measurement.extra.get(key, math.nan) for _, r in readings]
            extra[key] = max(peaks) if all(math.isfinite(p) for p in peaks) else math.nan
    missed = [s for s, r in readings if not r.slo_met]
    if missed:
        extra["capacity_high_scale"] = min(missed)
    if at_target is not None:
        check = at_target.measurement.slo_check(slo)
        extra.update({"target_ttft_p99_ms": check.ttft_p99_ms,
                      "target_itl_p99_ms": check.itl_p99_ms,
                      "target_failed_requests": float(check.failed_requests),
                      "target_kept_up": at_target.kept_up})
    for i, (s, replayed) in enumerate(readings):
        r = replayed.measurement
        decode, tokens, span = r.decode_totals()
        p99 = r.slo_check(slo)
        extra.update({f"replay{i}_scale": s, f"replay{i}_decode_time_s": decode,
                      f"replay{i}_decode_tokens": tokens, f"replay{i}_duration_s": span,
                      f"replay{i}_busy_s": r.busy_s, f"replay{i}_requests": float(r.requests),
                      f"replay{i}_itl_p99_ms": p99.itl_p99_ms,
                      f"replay{i}_ttft_p99_ms": p99.ttft_p99_ms,
                      f"replay{i}_window_s": replayed.window_s,
                      f"replay{i}_lifetime_s": reading_lifetime(r, replayed.window_s)})
    return replace(m, extra=extra)


def replay_at_capacity(replica: Replica, schedule: ReplaySchedule, slo: Slo,
                       progress: Progress | None = None, max_replays: int = MAX_READINGS,
                       resolution: float = RESOLUTION) -> Measurement:
    """The measurement at the highest ``time_scale`` that meets ``slo``, keeps up with the
    arrivals and is sustained over its window (see module doc).

    When even the slowest tried rate misses, the slowest replay is returned (tagged
    ``capacity_met_slo = 0``) so the search sees by how much it misses.
    """
    requests = list(schedule.requests)
    window = schedule.capacity_window_s
    hint = schedule.capacity_hint
    wall = 0.0
    tried: dict[float, _Replay] = {}

    def read(scale: float, window_s: float | None) -> _Replay:
        nonlocal wall
        # the server warms up once: only its first reading leads with warm-up requests, taken
        # from outside the window it is judged on
        part, warmup = warmed_window(requests, scale, window_s,
                                     schedule.warmup_requests if not tried else 0)
        sliced = replace(schedule, requests=part, time_scale=scale, warmup_requests=warmup)
        m = replica.replay(sliced, progress)
        wall += m.wall_time_s
        span = _arrival_span(sliced) / scale
        estimate, kept = _kept_up_line(m, span, P99_CONFIDENCE)
        slo_met = m.slo_check(slo).met and not kept < KEPT_UP
        settle = settle_margin(m, span)
        margin = replay_margin(m, slo, kept)
        if slo_met and math.isfinite(settle):
            margin = max(margin, settle)
        sustained = bool(settle <= 0)
        return _Replay(slo_met and sustained, m, margin, kept, slo_met, sustained, span,
                       constraint_margins(m, slo, kept, settle), estimate)

    def probe(scale: float) -> Probe:
        tried[scale] = read(scale, window)
        return tried[scale].probe()

    log_sd = hint.log_sd if hint is not None else None
    start = hint.scale if hint is not None and first_step(log_sd) is not None \
        else schedule.time_scale
    span = _arrival_span(schedule)
    lead = _warmup_span_s(requests, start, window, schedule.warmup_requests)
    predicted = predict(start, log_sd, max_replays, lambda s: reading_cost_s(s, window, span))
    if _rereadable(requests, start, window, slo):
        # the kept reading lies at the bound by construction: its p99 interval straddles it
        predicted = replace(predicted, readings=predicted.readings + 1,
                            cost=predicted.cost + reading_cost_s(start, 2 * window, span)
                            if window is not None else predicted.cost)
    found = search(probe, start, log_sd, max_replays, resolution)
    lo = found.low
    again: list[tuple[float, _Replay]] = []
    if lo is not None:
        lo, again = _decide(read, tried, lo, window, requests, slo)
    readings = [*sorted(tried.items()), *again]
    at_target = tried.get(schedule.time_scale)
    if lo is None:
        kept_reading = _tag(min(tried), readings, False, at_target, slo, tried[min(tried)])
    else:
        keep = again[-1][1] if again and again[-1][1].met else tried[lo]
        kept_reading = _tag(lo, readings, True, at_target, slo, keep)
    missed = [s for s, r in tried.items() if lo is not None and s > lo and not r.met]
    extra = {**kept_reading.extra,
             "capacity_predicted_readings": predicted.readings,
             "capacity_predicted_busy_s": predicted.cost + lead,
             "capacity_busy_s": sum(r.measurement.busy_s for _, r in readings),
             "capacity_resolution": min(missed) / lo - 1.0 if missed and lo else math.nan,
             "capacity_resolution_target": resolution,
             "capacity_slice_rate_ratio": _slice_rate_ratio(kept_reading, schedule, requests)}
    return replace(kept_reading, wall_time_s=wall, extra=extra)


def _warmup_span_s(requests: list[Request], scale: float, window_s: float | None,
                   warmup: int) -> float:
    """Replica seconds the first reading's warm-up requests arrive over ahead of its window."""
    part, lead = warmed_window(requests, scale, window_s, warmup)
    if not lead or len(part) <= lead:
        return 0.0
    return float(part[lead].arrival_s or 0.0) / scale


def _verdict(r: _Replay, slo: Slo) -> SloVerdict:
    """A reading's verdict (:meth:`autotune.slo.Slo.verdict`), undecided too when whether it
    kept up is: its queue's best estimate says it fell behind, the most the queue allows
    (:func:`kept_up` at :data:`~autotune.slo.P99_CONFIDENCE`, what the reading was judged on)
    says it kept up."""
    m = r.measurement
    verdict = slo.verdict(m.ok, m.ttft_s, m.itl_s, m.duration_s)
    if verdict.code == 1.0 and r.kept_estimate < KEPT_UP <= r.kept_up:
        return replace(verdict, code=0.5)
    return verdict


def _slice_rate_ratio(kept: Measurement, schedule: ReplaySchedule,
                      requests: list[Request]) -> float:
    """The kept reading's offered rate over ``load_scale`` × the sample's mean rate: 1 when its
    window held the whole sample, above 1 by how much denser the busiest slice it replayed is
    (a capacity read there is conservative by that factor, in the sample's mean units)."""
    span = _arrival_span(schedule)
    measured = len(requests) - schedule.warmup_requests
    window, scale = kept.extra.get("capacity_window_s", math.nan), kept.extra["load_scale"]
    if span <= 0 or measured < 2 or not window > 0 or kept.requests < 2:
        return math.nan
    return ((kept.requests - 1) / window) / (scale * (measured - 1) / span)


def _rereadable(requests: list[Request], scale: float, window: float | None,
                slo: Slo) -> bool:
    """Whether a reading at ``scale`` read again with twice the window could decide an
    undecided verdict: the longer window holds more requests and, with a TTFT bound, enough to
    bound a p99 TTFT (:func:`~autotune.slo.values_to_bound`; fewer could never meet it)."""
    if window is None:
        return False
    longer = len(window_requests(requests, scale, 2 * window))
    return longer > len(window_requests(requests, scale, window)) and (
        slo.ttft_p99_ms is None or longer >= values_to_bound())


def _decide(read: Callable[[float, float | None], _Replay], tried: dict[float, _Replay],
            lo: float, window: float | None, requests: list[Request], slo: Slo
            ) -> tuple[float | None, list[tuple[float, _Replay]]]:
    """The capacity, decided, and the re-read it took (if any): a kept reading whose p99
    interval straddles a bound (verdict undecided) is read once more at its rate with twice the
    window, when that holds more requests and, with a TTFT bound, enough to bound a p99 TTFT
    (:func:`~autotune.slo.values_to_bound`; fewer could never meet it). The re-read is kept
    when it met the SLO; when it missed, the next slower rate met is the capacity (None: no
    other). A re-read still undecided is reported as such."""
    if _verdict(tried[lo], slo).code != 0.5 or not _rereadable(requests, lo, window, slo):
        return lo, []
    assert window is not None
    again = read(lo, 2 * window)
    if again.met:
        return lo, [(lo, again)]
    slower = [s for s, r in tried.items() if s < lo and r.met]
    return (max(slower) if slower else None), [(lo, again)]
