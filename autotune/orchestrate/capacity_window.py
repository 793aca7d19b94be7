"""The window of traffic one capacity reading replays, and whether what it read was sustained.

**A bounded window.** A reading at arrival scale s (× the sample's rate) replays the requests
whose scaled arrivals fit in ``replay.window_s`` replica seconds: a contiguous slice of the
sample spanning at most ``window_s × s`` of its own seconds, so a reading at 1/64 of the rate
costs a window, not the whole sample stretched 64×. The slice is the *busiest* one of that
length (the most arrivals; the earliest on a tie): it is chosen from the sample alone, so every
config of a pass reads the same requests at the same scale and their readings compare, and a
replica credited with a rate has served the sample's densest stretch at that rate, not a lull.
At high scales the whole sample fits and the window is the sample's own span / s.

**Sustained.** A replica whose batch starts empty needs about one request lifetime (the median
end-to-end latency, E2E) for its batch to fill, since a request in flight at t arrived within
the last E2E (Little's law), and another E2E to drain once arrivals stop. A request arriving
at t sees a settled batch only when t ≥ E2E and t + E2E ≤ window: of a window W, W - 2 E2E.
With W ≥ :data:`SETTLE_LIFETIMES` × E2E (k = 4) at least half of the window's requests saw the
settled batch, and the reading's completion rate, N / (W + drain), is at least k / (k + 1) =
80% of the offered rate when the drain (from the last arrival to the last completion) is one
lifetime; the lifetime is therefore the median E2E or the drain measured, whichever is longer,
so a reading completing under 80% of the rate it would be credited with is not sustained
either. A shorter window measures how fast a burst drains: its rate is not credited
(:func:`settle_margin` > 0 reads as a miss to the capacity search, and a trial whose kept
reading was not sustained says ``capacity_sustained`` 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from autotune.errors import ConfigError
from autotune.slo import SETTLE_LIFETIMES, busiest_slices, lifetime_s
from autotune.types import Measurement, Request

__all__ = ["SETTLE_LIFETIMES", "busiest_slice", "check_window", "lifetime_s", "reading_lifetime",
           "settle_margin", "warmed_window", "window_requests"]


def busiest_slice(arrivals: Sequence[float], length: float) -> tuple[int, int]:
    """``(i, j)``: the contiguous run ``arrivals[i:j]`` (sorted) spanning at most ``length``
    seconds that holds the most arrivals; the earliest such run on a tie
    (:func:`autotune.slo.busiest_slices`)."""
    import numpy as np

    i, j = busiest_slices(np.asarray(arrivals, dtype=np.float64), np.asarray(length))
    return int(i), int(j)


def _slice(requests: Sequence[Request], scale: float, window_s: float | None
           ) -> tuple[int, int] | None:
    """Indices of the busiest slice a reading at ``scale`` replays; None: all the requests
    (no window, or requests without arrival times)."""
    if window_s is None or any(r.arrival_s is None for r in requests):
        return None
    return busiest_slice([float(r.arrival_s or 0.0) for r in requests], window_s * scale)


def window_requests(requests: Sequence[Request], scale: float,
                    window_s: float | None) -> list[Request]:
    """The requests a reading at ``scale`` replays within ``window_s`` replica seconds (the
    busiest slice, module doc), their arrivals shifted to start at 0; all of them when
    ``window_s`` is None or the requests have no arrival times."""
    bounds = _slice(requests, scale, window_s)
    if bounds is None:
        return list(requests)
    i, j = bounds
    t0 = float(requests[i].arrival_s or 0.0) if j > i else 0.0
    return [replace(r, arrival_s=float(r.arrival_s or 0.0) - t0) for r in requests[i:j]]


def warmed_window(requests: Sequence[Request], scale: float, window_s: float | None,
                  warmup: int) -> tuple[list[Request], int]:
    """The window of a replica's first reading with ``warmup`` requests ahead of it, and how
    many lead it (the schedule's ``warmup_requests``).

    The warm-up requests come from outside the window (those just before the busiest slice,
    then those just after it), so the window is judged on all of its requests however few
    it holds. They arrive ahead of it at the slice's mean pace, squeezed when needed into a
    quarter of the window (:data:`SETTLE_LIFETIMES`: a reading at 1/64 of the rate does not
    spend 64 gaps per warm-up request): the server is warm and its batch already filling when
    the window opens. Only when the window holds the whole sample are they its own first
    requests, as many as leave one to measure."""
    part = window_requests(requests, scale, window_s)
    bounds = _slice(requests, scale, window_s)
    if warmup <= 0:
        return part, 0
    if bounds is None or (bounds[0] == 0 and bounds[1] == len(requests)):
        return part, min(warmup, max(0, len(part) - 1))
    i, j = bounds
    outside = [*requests[max(0, i - warmup):i], *requests[j:j + warmup - min(i, warmup)]]
    span = float(part[-1].arrival_s or 0.0) if len(part) > 1 else 0.0
    gap = span / (len(part) - 1) if len(part) > 1 else 0.0
    if window_s is not None and gap * len(outside) > window_s * scale / SETTLE_LIFETIMES:
        gap = window_s * scale / SETTLE_LIFETIMES / len(outside)
    lead = [replace(r, arrival_s=-gap * (len(outside) - k)) for k, r in enumerate(outside)]
    t0 = float(lead[0].arrival_s or 0.0) if lead else 0.0
    return [replace(r, arrival_s=float(r.arrival_s or 0.0) - t0) for r in [*lead, *part]], \
        len(lead)


def reading_lifetime(m: Measurement, window_s: float) -> float:
    """The request lifetime (s) of a reading whose measured requests arrived over ``window_s``
    replica seconds: the median E2E or, when longer, the drain measured (the measured span's
    time after the last arrival, ``duration_s`` - ``window_s``); NaN when no request
    completed or the window is unknown."""
    import numpy as np

    e2e = m.e2e_s[m.ok]
    if e2e.size == 0 or not window_s > 0:
        return math.nan
    return lifetime_s(float(np.median(e2e)), m.duration_s, window_s)


def settle_margin(m: Measurement, window_s: float) -> float:
    """log(:data:`SETTLE_LIFETIMES` × lifetime / window): ≤ 0 when a reading whose measured
    requests arrived over ``window_s`` replica seconds was a sustained rate, > 0 when it only
    drained a burst; NaN when no request completed or the window is unknown. The lifetime
    (:func:`reading_lifetime`) is the median E2E or, when longer, the drain: a window of k
    drains completes at least k / (k + 1) of the offered rate."""
    lifetime = reading_lifetime(m, window_s)
    if not math.isfinite(lifetime):
        return math.nan
    return math.log(SETTLE_LIFETIMES * lifetime / window_s) if lifetime > 0 else -math.inf


def check_window(window_s: float | None, time_scale: float, workload: str,
                 requests: Sequence[Request]) -> None:
    """ConfigError (naming ``replay.window_s``) when a window at the rate to serve holds less
    than one request on average: ``window_s`` × the workload's mean arrival rate × the
    ``time_scale`` under 1. A reading needs at least one arrival to measure anything."""
    times = [r.arrival_s for r in requests if r.arrival_s is not None]
    if window_s is None or len(times) < 2:
        return
    span = max(times) - min(times)
    rate = (len(times) - 1) / span * time_scale if span > 0 else math.inf
    if window_s * rate < 1.0:
        raise ConfigError(
            f"replay.window_s: {window_s:g} s holds {window_s * rate:.2f} requests of workload "
            f"{workload!r} at the rate to serve ({rate:.3g} req/s); a reading needs at least "
            f"one: set replay.window_s to {math.ceil(1.0 / rate):g} s or more")
