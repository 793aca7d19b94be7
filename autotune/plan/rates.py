"""The traffic rate a plan serves: the sample's mean, and its peak over a window.

A deployment sized for the mean rate misses the SLO whenever traffic runs above it for longer
than its queues absorb. The plan therefore serves the busiest stretch of the sample of a given
length (``plan.peak_window``): the most arrivals any window of that length holds, per second.
The default window (:data:`~autotune.policy.DEFAULT_PEAK_WINDOW_S`, 5 minutes) is about the
time a Kimi-class replica takes to start, so a busier stretch than that has to be served by the
replicas already running. A sample shorter than the default window is planned at its mean rate
(and the plan says so); a window set explicitly that is longer than the sample is an error.

Rates are those of the requests a pass replays (each workload's first ``replay.max_requests``
in arrival order), which is also the rate the capacity readings are multiples of.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.errors import PlanError
from autotune.policy import DEFAULT_PEAK_WINDOW_S

__all__ = ["Rates", "check_peak_window", "duration_text", "traffic_rates"]


def duration_text(seconds: float) -> str:
    """``2m46s``, ``5m``, ``40s``, ``1h30m``."""
    s = round(seconds)
    if s < 60:
        return f"{seconds:.3g}s" if seconds < 10 else f"{s}s"
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    parts = [f"{h}h" if h else "", f"{m}m" if m else "", f"{sec}s" if sec else ""]
    return "".join(parts)


@dataclass(frozen=True)
class Rates:
    """A traffic's arrival rates (requests per second) and the one a plan serves."""

    requests: int
    span_s: float
    mean_per_s: float
    peak_per_s: float
    window_s: float  # the window the peak is the busiest of (the span when planned at the mean)
    basis: str  # "peak" or "mean"
    note: str  # which rate the plan serves, for people

    @property
    def planned_per_s(self) -> float:
        return self.peak_per_s if self.basis == "peak" else self.mean_per_s

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "span_s": self.span_s,
                "mean_per_s": self.mean_per_s, "peak_per_s": self.peak_per_s,
                "window_s": self.window_s, "basis": self.basis,
                "planned_per_s": self.planned_per_s, "note": self.note}


def _busiest(arrivals: Sequence[float], window_s: float) -> float:
    """The most arrivals any window [t, t + window_s) holds, per second (t at an arrival)."""
    most, j = 0, 0
    for i, start in enumerate(arrivals):
        j = max(j, i)
        while j < len(arrivals) and arrivals[j] < start + window_s:
            j += 1
        most = max(most, j - i)
    return most / window_s


def check_peak_window(window_s: float | None, arrivals: Sequence[float | None], *, what: str,
                      key: str = "plan.peak_window") -> None:
    """PlanError naming ``key`` when ``window_s`` is set and longer than the span of
    ``arrivals`` (seconds; untimed ones ignored; fewer than two timed: nothing to check)."""
    times = [float(a) for a in arrivals if a is not None and math.isfinite(a)]
    if window_s is None or len(times) < 2:
        return
    span = max(times) - min(times)
    if window_s > span:
        raise PlanError(f"{key} {duration_text(window_s)} is longer than the sample of {what} "
                        f"({duration_text(span)}); set a window of at most "
                        f"{duration_text(span)}, or leave it unset (the busiest 5m, or the "
                        "mean of a shorter sample)")


def traffic_rates(arrivals: Sequence[float], window_s: float | None, *, what: str,
                  key: str = "plan.peak_window") -> Rates:
    """Mean and peak rates of ``arrivals`` (seconds, any order); the peak over ``window_s``
    (None: the default window, or the mean when the sample is shorter). ``what`` names the
    traffic in errors and notes; ``key`` the setting an error names.

    PlanError when the arrivals cannot give a rate (fewer than two, or all at one instant) or
    when ``window_s`` is set and longer than the sample."""
    times = sorted(float(a) for a in arrivals if a is not None and math.isfinite(a))
    if len(times) < 2 or times[-1] <= times[0]:
        raise PlanError(f"{what}: {len(times)} timed request(s) over no time: a plan needs "
                        "the sample's arrival times (arrival_s or timestamp) to read its rate")
    span = times[-1] - times[0]
    mean = (len(times) - 1) / span
    check_peak_window(window_s, times, what=what, key=key)
    window = window_s if window_s is not None else DEFAULT_PEAK_WINDOW_S
    if window > span:
        return Rates(len(times), span, mean, mean, span, "mean",
                     f"the mean rate: the sample ({duration_text(span)}) is shorter than the "
                     f"default peak window ({duration_text(window)})")
    peak = max(_busiest(times, window), mean)
    return Rates(len(times), span, mean, peak, window, "peak",
                 f"the busiest {duration_text(window)} of the sample")
