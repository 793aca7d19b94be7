"""Which rates a capacity reading reads, and what it is expected to cost before it starts.

A capacity reading looks for the knee: the fastest arrival scale (× the sample's rate) whose
replay meets the SLO. Each reading at a scale says whether it met the SLO and by how much
(:class:`Probe`: the log of its binding ratio, ≤ 0 met, > 0 missed), so the search is a root
search on a margin that costs a replay per evaluation. It runs in two phases:

**Bracket.** From the start (the strategy's predicted capacity, :class:`CapacityHint`-like
``start`` and ``log_sd``, or the rate to serve) it steps away until one reading meets and one
misses. The first step is the hint's standard deviation (:func:`first_step`), each further step
twice the last, never more than ×2 (×4 while the last reading is far inside its bounds, every
p99 under a quarter of its bound): the steps a search without a hint takes. A hint off by any
factor therefore ends with a bracket no wider than a search without a hint would, after as many
steps as it takes to double the first step up to ×2 (two or three) beyond the ones that cover
the error. Going down, a reading that fell behind says how much of its rate it sustains
(:attr:`Probe.sustains`), and the next rate is that when it is below the step.

**Pin.** Inside the bracket, the ITP method (Oliveira & Takahashi, ACM TOMS 2020: interpolate,
truncate, project) in log rate until the fastest rate met and the slowest missed are within
:data:`RESOLUTION` of each other. The interpolation is the rate the replica sustains when the
missed end fell behind, else regula falsi on the two margins; it is *truncated* by half the
resolution towards the middle of the bracket, so that when the interpolation is right the
reading lands just across the knee from the far end and the next one just across from the
near end (two readings close a bracket of any width); and *projected* into a shrinking ball
around the middle, so that the search never takes more than one reading beyond what
bisection would, however the margin bends (a p99 flat just over its bound, a noisy one).

**Predicted cost.** :func:`predict` runs the same search against a model of the knee: the
knee normal in log around the start with the hint's standard deviation (without a hint:
log-uniform over [:data:`MIN_SCALE`, :data:`MAX_SCALE`]), at eight equal-probability points,
and a margin flat near it: log(rate / knee) shrunk towards 0 by :data:`FLAT_BAND` (10%), only
its sign left inside. A measured p99 near its bound moves less than its replay noise over
several per cent of rate (on the simulator's chat workload, within ±0.02 over 0.9–1.04 of the
knee, ``bench/results/knee-search/``), so interpolation there is no better than bisection; a
model margin linear to the knee made interpolation exact and predicted a reading or more too
few. The expected readings and their cost (the caller prices each rate)
are known before the first replay; a capacity reading records them beside what it spent.

This module is a leaf: it imports nothing from autotune (:mod:`autotune.slo` re-exports its
constants).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

__all__ = [
    "FLAT_BAND",
    "MAX_READINGS",
    "MAX_SCALE",
    "MIN_SCALE",
    "RESOLUTION",
    "KneeSearch",
    "Probe",
    "ReadingCost",
    "first_step",
    "predict",
    "predicted_readings",
    "search",
]

#: Bounds of a capacity reading's arrival scale (the multiple of the sample's rate replayed),
#: shared by the capacity search and the predictor that forecasts its reading.
MIN_SCALE, MAX_SCALE = 1 / 64, 64.0

#: The search stops once the fastest rate met and the slowest missed are within this fraction
#: of each other (so a capacity lies within this fraction above the rate it kept).
RESOLUTION = 0.03

#: The most readings one search takes. The search ends when it reaches :data:`RESOLUTION`;
#: this cap only bounds a knee it cannot pin (a p99 that flips with its noise across several
#: per cent of rate). Without a hint, from the rate to serve, a knee 10x away costs four or
#: five readings to bracket and four or five more to pin: on the simulator's Kimi-K2.6 with
#: DSpark, a cap of 7 left half the unhinted searches above 3% and a cap of 12 an eighth, for
#: 4% more replica time (``bench/results/knee-search/replays-7`` and ``replays-12``).
MAX_READINGS = 12

#: A reading this far inside its bounds (every p99 under a quarter of its bound) may step ×4.
_FAR = math.log(4.0)
#: The widest step otherwise: the ×2 of a search without a hint.
_STEP = math.log(2.0)
#: ITP's slack: readings beyond bisection's count the pin may take.
_SLACK = 1
#: Points of the knee's distribution :func:`predict` runs the search at.
_POINTS = 8
#: The model margin's flat band: within this (in log rate) of the knee a p99 sits within its
#: noise of the bound, so the model's margin there says only which side (module doc).
FLAT_BAND = math.log(1.1)


@dataclass(frozen=True, slots=True)
class Probe:
    """What one reading says to the search: whether it met the SLO, its margin (the log of its
    binding ratio; ≤ 0 when met, > 0 when missed, NaN when unknown) and, for a reading that
    fell behind its arrivals, the fraction of its rate the replica sustains (NaN: unknown)."""

    met: bool
    margin: float
    sustains: float = math.nan
    #: The margin of each constraint the reading is judged by (the same order in every probe
    #: of one search; empty: only ``margin`` is known). The pin interpolates on the one that
    #: missed: a p99 flat near its bound does not hide a constraint that crosses it steeply.
    parts: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class KneeSearch:
    """The readings of one search in the order read, the fastest scale met below the slowest
    missed (``low``; None: none met) and that slowest missed (``high``; None: none missed)."""

    probes: tuple[tuple[float, Probe], ...]
    low: float | None
    high: float | None

    @property
    def resolution(self) -> float:
        """high / low - 1: how far above ``low`` the knee may lie (NaN: not bracketed)."""
        return self.high / self.low - 1.0 if self.low and self.high else math.nan


def first_step(log_sd: float | None) -> float | None:
    """The factor of the first step away from a hinted start, given the standard deviation of
    the hint's log: one standard deviation, at least 2 × :data:`RESOLUTION` and at most ×2
    (None: no hint, the search steps ×2, or ×4 far inside the bounds)."""
    if log_sd is None or not math.isfinite(log_sd):
        return None
    return min(max(math.exp(abs(log_sd)), 1 + 2 * RESOLUTION), 2.0)


def _clamp(scale: float) -> float:
    return min(max(scale, MIN_SCALE), MAX_SCALE)


def search(read: Callable[[float], Probe], start: float, log_sd: float | None,
           max_readings: int, resolution: float = RESOLUTION) -> KneeSearch:
    """Bracket the knee from ``start`` then pin it to ``resolution`` (module doc), at most
    ``max_readings`` readings; ``read(scale)`` replays at ``scale`` and is never called twice
    at one scale."""
    probes: dict[float, Probe] = {}

    def at(scale: float) -> Probe:
        probes[scale] = read(scale)
        return probes[scale]

    first = first_step(log_sd)
    step = math.log(first) if first is not None else None
    scale = _clamp(start)
    low: float | None = None
    high: float | None = None
    if at(scale).met:
        low = scale
        while len(probes) < max_readings and scale < MAX_SCALE:
            # far inside (every p99 under a quarter of its bound): ×4 whatever the hint said
            far = probes[scale].margin < -_FAR
            up = _FAR if far else min(step, _STEP) if step is not None else _STEP
            step = min(2 * step, _STEP) if step is not None else None
            scale = _clamp(scale * math.exp(up))
            if not at(scale).met:
                high = scale
                break
            low = scale
    else:
        high = scale
        while len(probes) < max_readings and scale > MIN_SCALE:
            # a p99 over twice its bound: halve whatever the hint said
            far = probes[scale].margin > _STEP
            down = math.exp(-(_STEP if far or step is None else min(step, _STEP)))
            step = min(2 * step, _STEP) if step is not None else None
            sustains = probes[scale].sustains
            scale = _clamp(scale * (sustains if sustains < down else down))  # NaN: the step
            if at(scale).met:
                low = scale
                break
            high = scale
    if low is not None and high is not None:
        low, high = _pin(at, probes, low, high, max_readings, resolution)
    return KneeSearch(tuple(probes.items()), low, high)


def _pin(at: Callable[[float], Probe], probes: dict[float, Probe], low: float, high: float,
         max_readings: int, resolution: float) -> tuple[float, float]:
    """ITP between ``low`` (met) and ``high`` (missed) in log rate (module doc), its regula
    falsi weighted as Illinois does: an end kept twice running counts half its margin, so a
    margin flat on one side and steep on the other (a queue's p99) does not hold the readings
    on one side of the knee."""
    a, b = math.log(low), math.log(high)
    weight_a = weight_b = 1.0
    kept: str | None = None
    eps = math.log1p(resolution) / 2
    # two scales a rounding apart (a start a hair above MIN_SCALE) may share their log
    n_max = max(0, math.ceil(math.log2(max(b - a, 2 * eps) / (2 * eps)))) + _SLACK
    j = 0
    while b - a > 2 * eps and len(probes) < max_readings:
        mid = (a + b) / 2
        guess = _interpolate(a, b, probes[low], probes[high], weight_a, weight_b)
        sign = math.copysign(1.0, mid - guess)
        truncated = guess + sign * eps if eps <= abs(mid - guess) else mid
        radius = eps * 2 ** (n_max - j) - (b - a) / 2
        x = truncated if abs(truncated - mid) <= radius else mid - sign * radius
        scale = math.exp(x)
        if at(scale).met:
            a, low, weight_a = x, scale, 1.0
            weight_b, kept = (weight_b / 2 if kept == "b" else 1.0), "b"
        else:
            b, high, weight_b = x, scale, 1.0
            weight_a, kept = (weight_a / 2 if kept == "a" else 1.0), "a"
        j += 1
    return low, high


def _interpolate(a: float, b: float, low: Probe, high: Probe, weight_a: float = 1.0,
                 weight_b: float = 1.0) -> float:
    """Where the knee is likely, in log rate, between ``a`` (met) and ``b`` (missed): the rate
    the missed reading sustains when it fell behind and that lies inside, else regula falsi on
    the margins (each × its weight) of the constraint that missed at ``b`` when both ends
    read it, else on the two margins, else the middle."""
    if high.sustains > 0:
        sustained = b + math.log(high.sustains)
        if a < sustained < b:
            return sustained
    pairs = [(low.margin, high.margin)]
    if low.parts and len(low.parts) == len(high.parts):
        # the constraint that missed at the far end, if it is finite and met at the near end
        missed = max(range(len(high.parts)), key=lambda i: _finite(high.parts[i]))
        pairs.insert(0, (low.parts[missed], high.parts[missed]))
    for ma, mb in pairs:
        fa, fb = ma * weight_a, mb * weight_b
        if math.isfinite(fa) and math.isfinite(fb) and fa <= 0 < fb:
            return (a * fb - b * fa) / (fb - fa)
    return (a + b) / 2


def _finite(x: float) -> float:
    return x if math.isfinite(x) else -math.inf


@dataclass(frozen=True, slots=True)
class ReadingCost:
    """What a capacity reading is expected to take before it starts: readings and their cost
    (in the unit of the ``cost`` given to :func:`predict`), each the mean over the knee's
    distribution."""

    readings: float
    cost: float


def _knees(start: float, log_sd: float | None) -> list[float]:
    """The knee at :data:`_POINTS` equal-probability points: normal in log around ``start``
    with ``log_sd``, or without a hint log-uniform over the scale bounds."""
    quantiles = [(i + 0.5) / _POINTS for i in range(_POINTS)]
    if log_sd is None or not math.isfinite(log_sd):
        lo, hi = math.log(MIN_SCALE), math.log(MAX_SCALE)
        return [math.exp(lo + q * (hi - lo)) for q in quantiles]
    normal = NormalDist(math.log(_clamp(start)), max(abs(log_sd), 1e-6))
    return [_clamp(math.exp(normal.inv_cdf(q))) for q in quantiles]


def predict(start: float, log_sd: float | None, max_readings: int,
            cost: Callable[[float], float]) -> ReadingCost:
    """The readings a capacity reading starting at ``start`` with a hint of ``log_sd`` (None:
    no hint) is expected to take, and their cost, ``cost(scale)`` per reading: :func:`search`
    run against the model of the knee (module doc)."""
    readings = spent = 0.0
    knees = _knees(start, log_sd)
    for knee in knees:
        def model(scale: float, knee: float = knee) -> Probe:
            x = math.log(scale / knee)
            return Probe(x <= 0, math.copysign(max(abs(x) - FLAT_BAND, 1e-4), x or -1.0))

        probes = search(model, start, log_sd, max_readings).probes
        readings += len(probes)
        spent += sum(cost(s) for s, _ in probes)
    return ReadingCost(readings / len(knees), spent / len(knees))


@functools.lru_cache(maxsize=1024)
def _readings(log_sd: float | None, max_readings: int) -> float:
    return predict(1.0, log_sd, max_readings, lambda _: 0.0).readings


def predicted_readings(log_sd: float | None, max_replays: int) -> float:
    """How many readings a capacity reading is expected to take, before it starts, given the
    standard deviation of its hint's log (None: no hint): :func:`predict`'s count (it does not
    depend on where the hint is, only on how sure)."""
    sd = round(log_sd, 4) if log_sd is not None and math.isfinite(log_sd) else None
    return _readings(sd, max_replays)
