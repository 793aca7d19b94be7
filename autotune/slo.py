"""The one rule for "meets the SLO", per request and per replay.

A latency SLO bounds the 99th percentile of time to first token (TTFT) and of inter-token
latency (ITL), in milliseconds. Two readings follow from it, and every part of autotune uses
these two functions rather than its own comparison:

- **per request** (:meth:`Slo.met_by_requests`, what goodput counts, as DistServe does): the
  request completed, its TTFT is within the TTFT bound and its mean time per output token
  (TPOT, the per-request reading of ITL) within the ITL bound;
- **per replay** (:meth:`Slo.check`, what makes a trial feasible and what the capacity reading
  bisects on): every measured request completed, the p99 TTFT over them is within the TTFT
  bound and the p99 of the pooled inter-token gaps within the ITL bound. A replay with no
  latency sample at all misses every bound it has.

A p99 read from a few hundred values is uncertain, and :meth:`Slo.verdict` says how much: an
order-statistic interval for each p99 (:func:`p99_interval_ms`) and a verdict of *met*, *missed*
or *undecided* (the interval straddles the bound), so that a reading too thin to decide the SLO
is never taken as certain.

This module imports only :mod:`autotune.knee_search` (a leaf), whose scale bounds, resolution
and predicted readings it re-exports beside :data:`KEPT_UP` for the capacity reading and the
predictor (``autotune.types`` re-exports :class:`Slo`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.knee_search import (
    MAX_READINGS,
    MAX_SCALE,
    MIN_SCALE,
    RESOLUTION,
    first_step,
    predicted_readings,
)

if TYPE_CHECKING:  # numpy is imported where arrays are judged: read-only commands start faster
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]
    BoolArray = npt.NDArray[np.bool_]

__all__ = ["KEPT_UP", "MAX_READINGS", "MAX_SCALE", "MIN_SCALE", "P99_CONFIDENCE", "RESOLUTION",
           "SETTLE_LIFETIMES", "Slo", "SloCheck", "SloVerdict", "busiest_slices", "first_step",
           "itl_independent_gaps", "lifetime_s", "margin_from_summary", "p99_interval_ms",
           "predicted_readings", "quantile_ms", "values_to_bound"]

#: The percentile the SLO bounds (as a fraction).
SLO_QUANTILE = 0.99

#: A capacity replay that kept up with less than this share of its arrival rate fell behind:
#: it misses the SLO whatever its p99s read (:func:`autotune.orchestrate.capacity.kept_up`,
#: the most of the rate its queue allows at :data:`P99_CONFIDENCE`).
KEPT_UP = 0.95

#: A reading is a sustained rate when its window spans at least this many request lifetimes
#: (:mod:`autotune.orchestrate.capacity_window`: half the window's requests then see a settled
#: batch).
SETTLE_LIFETIMES = 4.0


def lifetime_s(median_e2e_s: float, duration_s: float, window_s: float) -> float:
    """A reading's request lifetime: its median E2E or, when longer, the drain measured (the
    measured span's time after its window of arrivals, ``duration_s`` - ``window_s``). A window
    of :data:`SETTLE_LIFETIMES` of them is a sustained reading."""
    return max(median_e2e_s, duration_s - window_s)

def busiest_slices(arrivals: FloatArray, lengths: FloatArray) -> tuple[Any, Any]:
    """Per length, ``(i, j)``: the contiguous run ``arrivals[i:j]`` (sorted, seconds) spanning at
    most that length that holds the most arrivals, the earliest such run on a tie; as two
    integer arrays of the lengths' shape. The slice a capacity reading replays
    (:mod:`autotune.orchestrate.capacity_window`) and the replica model predicts."""
    import numpy as np

    a = np.asarray(arrivals, dtype=np.float64)
    lengths = np.asarray(lengths, dtype=np.float64)
    if a.size == 0:
        zero = np.zeros(lengths.shape, dtype=np.int64)
        return zero, zero
    ends = np.searchsorted(a, a + lengths[..., None], side="right")  # (..., N)
    start = np.argmax(ends - np.arange(a.size), axis=-1)
    return start, np.take_along_axis(ends, start[..., None], axis=-1)[..., 0]

#: One-sided confidence of a verdict: *met* says the p99 is within its bound, *missed* that it is
#: over it, each with this confidence (the two ends of a central interval of 2 × this - 1).
P99_CONFIDENCE = 0.95


def values_to_bound(q: float = SLO_QUANTILE, confidence: float = P99_CONFIDENCE) -> int:
    """The fewest independent values whose q-quantile has an upper bound at ``confidence``
    (:func:`p99_interval_ms`): the chance that none exceeds it, q^n, is at most 1 - confidence.
    299 for the p99 at 95%."""
    return math.ceil(math.log(1.0 - confidence) / math.log(q))


def quantile_ms(values: FloatArray, q: float) -> float:
    """The q-quantile of ``values`` (seconds) in milliseconds; NaN when empty."""
    import numpy as np

    if values.size == 0:
        return math.nan
    return float(np.quantile(values, q)) * 1000.0


def p99_interval_ms(values: FloatArray, independent: float | None = None,
                    q: float = SLO_QUANTILE, confidence: float = P99_CONFIDENCE
                    ) -> tuple[float, float]:
    """A distribution-free interval for the q-quantile of ``values`` (seconds), in ms.

    Of n independent values, the number below the true quantile is Binomial(n, q), so the
    order statistics of ranks l = F⁻¹(1 - c) and u = F⁻¹(c) + 1 (F the binomial's CDF, c the
    ``confidence``) bound it from below and above, each with confidence c. The high end is
    ``inf`` when u > n (too few values lie above the quantile to bound it: fewer than
    :func:`values_to_bound`); the low end is ``-inf`` when l < 1; both NaN when there is no value.

    ``independent``: how many independent observations the values hold when fewer than their
    number (the token gaps of one decode step are one observation: the step's time, shared by
    its batch; :func:`itl_independent_gaps`). The ranks are then drawn from that many and read
    at the same fractions of the sorted values.
    """
    import numpy as np
    from scipy.stats import binom

    n = int(values.size)
    if n == 0:
        return math.nan, math.nan
    k = max(1.0, min(float(independent), n)) if independent is not None else float(n)
    trials = max(1, round(k))
    low_rank = float(binom.ppf(1.0 - confidence, trials, q)) / trials   # fraction of values
    high_rank = (float(binom.ppf(confidence, trials, q)) + 1.0) / trials
    ordered = np.sort(values)

    def at(fraction: float) -> float:  # the value of rank ceil(fraction × n), 1-based
        rank = math.ceil(fraction * n - 1e-9)
        return float(ordered[rank - 1]) * 1000.0

    low = at(low_rank) if low_rank * n >= 1 else -math.inf
    high = at(high_rank) if high_rank <= 1.0 else math.inf
    return low, high


def itl_independent_gaps(itl_s: FloatArray, duration_s: float) -> float:
    """How many independent observations pooled token gaps hold: one per decode step. Every
    request of a step's batch waits the same step, so a replay of ``duration_s`` holds at most
    duration / mean gap steps (the replica busy throughout), and never more steps than gaps."""
    n = float(itl_s.size)
    if n == 0:
        return 0.0
    mean = float(itl_s.mean())
    if not (mean > 0 and duration_s > 0 and math.isfinite(duration_s)):
        return n
    return min(n, duration_s / mean)


@dataclass(frozen=True, slots=True)
class SloVerdict:
    """A replay's p99s with their intervals (:func:`p99_interval_ms`) against an SLO.

    ``code`` is 1.0 when met (every bounded p99's interval lies within its bound and every
    request completed), 0.0 when missed (a request failed, a bounded p99 has no sample, or an
    interval lies over its bound), 0.5 when undecided (an interval straddles its bound).
    ``requests`` and ``itl_gaps`` are what the p99 TTFT and p99 ITL rest on;
    ``itl_independent`` how many independent observations those gaps hold.
    """

    code: float
    requests: int
    itl_gaps: int
    itl_independent: float
    ttft_p99_low_ms: float
    ttft_p99_high_ms: float
    itl_p99_low_ms: float
    itl_p99_high_ms: float

    @property
    def label(self) -> str:
        return {1.0: "met", 0.0: "missed"}.get(self.code, "undecided")

    def as_metrics(self) -> dict[str, float]:
        """The contract's trial-metric keys (floats)."""
        return {"slo_verdict_code": self.code, "p99_requests": float(self.requests),
                "p99_itl_gaps": float(self.itl_gaps),
                "p99_itl_independent": self.itl_independent,
                "ttft_p99_low_ms": self.ttft_p99_low_ms,
                "ttft_p99_high_ms": self.ttft_p99_high_ms,
                "itl_p99_low_ms": self.itl_p99_low_ms, "itl_p99_high_ms": self.itl_p99_high_ms}


@dataclass(frozen=True, slots=True)
class SloCheck:
    """One replay judged against an SLO: the measured p99s, failures, and the verdict.

    ``constraints`` follow Optuna's convention (feasible when every value is <= 0): the
    measured p99 minus its bound in milliseconds for each bound the SLO has (the bound itself
    when there was no sample), and the number of failed requests.
    """

    ttft_p99_ms: float
    itl_p99_ms: float
    failed_requests: int
    constraints: dict[str, float]

    @property
    def met(self) -> bool:
        return all(v <= 0 for v in self.constraints.values())

    def missed(self) -> list[str]:
        """The bounds missed, for people: ``["itl_p99_ms 72 > 60"]``."""
        out = []
        for name, over in self.constraints.items():
            if over <= 0:
                continue
            if name == "failed_requests":
                out.append(f"{self.failed_requests} request(s) failed" if self.failed_requests
                           else "no request was measured")
                continue
            measured = getattr(self, name)
            out.append(f"{name} no sample" if not math.isfinite(measured) else
                       f"{name} {measured:.0f} > {measured - over:.0f}")
        return out


@dataclass(frozen=True, slots=True)
class Slo:
    """Latency service-level objectives, in milliseconds (None: no bound)."""

    ttft_p99_ms: float | None = None
    itl_p99_ms: float | None = None

    def met_by_requests(self, ok: BoolArray, ttft_s: FloatArray, tpot_s: FloatArray) -> BoolArray:
        """Per request: completed, TTFT within the TTFT bound and TPOT within the ITL bound.

        NaN latencies (a missing value) never meet a bound.
        """
        import numpy as np

        met = np.asarray(ok, dtype=bool).copy()
        if self.ttft_p99_ms is not None:
            met &= ttft_s * 1000.0 <= self.ttft_p99_ms
        if self.itl_p99_ms is not None:
            met &= tpot_s * 1000.0 <= self.itl_p99_ms
        return met

    def check(self, ok: BoolArray, ttft_s: FloatArray, itl_s: FloatArray) -> SloCheck:
        """Judge a replay: p99 TTFT over completed requests, p99 of the pooled ITL gaps, and
        every request completed (see the module docstring)."""
        import numpy as np

        ok = np.asarray(ok, dtype=bool)
        ttft = quantile_ms(ttft_s[ok], SLO_QUANTILE)
        itl = quantile_ms(itl_s, SLO_QUANTILE)
        failed = int((~ok).sum()) if ok.size else 0
        constraints: dict[str, float] = {}
        for name, measured, bound in (("ttft_p99_ms", ttft, self.ttft_p99_ms),
                                      ("itl_p99_ms", itl, self.itl_p99_ms)):
            if bound is not None:
                constraints[name] = measured - bound if math.isfinite(measured) else bound
        constraints["failed_requests"] = float(failed) if ok.size else 1.0
        return SloCheck(ttft, itl, failed, constraints)

    def verdict(self, ok: BoolArray, ttft_s: FloatArray, itl_s: FloatArray,
                duration_s: float) -> SloVerdict:
        """Judge a replay with the uncertainty of its p99s: met, missed or undecided (see
        :class:`SloVerdict`); ``duration_s``, the measured window, bounds how many independent
        decode steps the gaps hold (:func:`itl_independent_gaps`)."""
        import numpy as np

        ok = np.asarray(ok, dtype=bool)
        ttft = ttft_s[ok]
        independent = itl_independent_gaps(itl_s, duration_s)
        ttft_low, ttft_high = p99_interval_ms(ttft)
        itl_low, itl_high = p99_interval_ms(itl_s, independent)
        codes = [0.0 if not ok.size or not ok.all() else 1.0]
        for low, high, bound in ((ttft_low, ttft_high, self.ttft_p99_ms),
                                 (itl_low, itl_high, self.itl_p99_ms)):
            if bound is None:
                continue
            if math.isnan(low) or low > bound:
                codes.append(0.0)
            elif high > bound:
                codes.append(0.5)
        return SloVerdict(min(codes), int(ttft.size), int(itl_s.size), independent,
                          ttft_low, ttft_high, itl_low, itl_high)


def margin_from_summary(summary: Mapping[str, Any], slo: Slo, target: float) -> float:
    """How far a trial's reading is from failing the SLO, in log units (negative: it fails).

    With the capacity reading (``load_scale`` and ``capacity_met_slo`` in the summary):
    log(capacity / target), 1 lower when no rate tried met the SLO (the capacity lies below the
    slowest one tried). Otherwise the tightest of log(bound / p99) over the SLO's bounds;
    failed requests make it -1 at most. ``target`` is the rate to serve, × the sample's.
    """
    scale, met = summary.get("load_scale"), summary.get("capacity_met_slo")
    if isinstance(scale, int | float) and met is not None and scale > 0:
        return math.log(scale / target) - (0.0 if met else 1.0)
    margins = [1.0]
    for name, bound in (("ttft_p99_ms", slo.ttft_p99_ms), ("itl_p99_ms", slo.itl_p99_ms)):
        measured = summary.get(name)
        if bound is not None:
            margins.append(math.log(bound / measured) if isinstance(measured, int | float)
                           and measured > 0 else -1.0)
    if summary.get("failed_requests"):
        margins.append(-1.0)
    return min(margins)
