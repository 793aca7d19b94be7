"""Is a new result better than the active recommendation? A bootstrap over requests.

A trial's objective is a rate: goodput (requests meeting the SLOs per second) or output
tokens per second, i.e. the sum of per-request contributions divided by the measured time.
Its uncertainty comes from which requests happened to be measured, so the bootstrap resamples
requests. Each request carries its contribution (1 if it met the SLOs, or its output tokens)
and its share of the measured duration (the duration split in proportion to the requests'
end-to-end latencies); a resample's rate is sum(contributions) / sum(time shares) — the
ratio estimator. With the whole sample it equals the measured value exactly (the shares add up
to ``duration_s``). Resampling the time with the requests matters: with a fixed duration a
closed-loop replay where every request meets the SLO would have no variance at all, and a
faster config could never be shown better; with the ratio, the spread of latencies is the
noise the gain must beat, and an open-loop replay whose rate is set by the arrivals shows no
significant gain however the tail of the last completions falls.

The relative improvement of a new trial over the active one is
``rate(new resample) / rate(old resample) - 1``, resampling the two trials independently
(``scipy.stats.bootstrap``, BCa, 95%). A new result replaces the active one only if that
interval lies above zero and the new trial meets the SLOs (:func:`decide`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.errors import SearchError
from autotune.types import Slo

if TYPE_CHECKING:
    from autotune.types import FloatArray

__all__ = [
    "CONFIDENCE",
    "Comparison",
    "Interval",
    "PromotionDecision",
    "RequestRates",
    "compare_rates",
    "decide",
    "rate_interval",
    "request_rates",
]

CONFIDENCE = 0.95
N_RESAMPLES = 4999
#: Resamples evaluated at once (bounds memory: batch × requests indices).
_BATCH = 500
OBJECTIVES = ("goodput", "output_tokens_per_s")


@dataclass(frozen=True)
class RequestRates:
    """One trial's measured requests as the bootstrap sees them."""

    contributions: FloatArray
    time_shares: FloatArray

    def __post_init__(self) -> None:
        if self.contributions.shape != self.time_shares.shape:
            raise ValueError("contributions and time shares must have one entry per request")

    @property
    def requests(self) -> int:
        return int(self.contributions.size)

    @property
    def value(self) -> float:
        total = float(self.time_shares.sum())
        return float(self.contributions.sum()) / total if total > 0 else math.nan


def _column(per_request: Mapping[str, Any], name: str) -> FloatArray:
    values = per_request.get(name)
    if values is None:
        raise SearchError(f"per-request measurements lack {name!r}; they hold "
                          f"{sorted(per_request)}")
    return np.array([math.nan if v is None else float(v) for v in values], dtype=np.float64)


def request_rates(per_request: Mapping[str, Sequence[Any]], duration_s: float | None,
                  objective: str, slo: Slo) -> RequestRates:
    """Contributions and time shares of a trial's requests for ``objective``.

    ``per_request`` is what the store keeps with each trial (``ttft_s``, ``tpot_s``,
    ``e2e_s``, ``output_tokens``, ``ok``; None for a missing value); ``duration_s`` the
    trial's measured window. A request meets the SLOs as
    :meth:`autotune.slo.Slo.met_by_requests` says.
    """
    if objective not in OBJECTIVES:
        raise SearchError(f"unknown objective {objective!r}; known: {', '.join(OBJECTIVES)}")
    if duration_s is None or not math.isfinite(duration_s) or duration_s <= 0:
        raise SearchError(f"the trial's duration_s is {duration_s!r}; a rate needs a positive "
                          "measured duration")
    ok = _column(per_request, "ok") == 1.0
    if objective == "goodput":
        met = slo.met_by_requests(ok, _column(per_request, "ttft_s"),
                                  _column(per_request, "tpot_s"))
        contributions = met.astype(np.float64)
    else:
        tokens = np.nan_to_num(_column(per_request, "output_tokens"))
        contributions = np.where(ok, tokens, 0.0)
    e2e = _column(per_request, "e2e_s")
    if e2e.size != contributions.size:
        raise SearchError(f"per-request columns differ in length ({e2e.size} e2e_s values for "
                          f"{contributions.size} requests)")
    weights = np.where(np.isfinite(e2e) & (e2e > 0), e2e, 0.0)
    if weights.sum() <= 0:
        weights = np.ones_like(weights)
    return RequestRates(contributions, duration_s * weights / weights.sum())


@dataclass(frozen=True)
class Interval:
    point: float
    low: float
    high: float
    confidence: float

    def as_tuple(self) -> tuple[float, float]:
        return (self.low, self.high)


@dataclass(frozen=True)
class Comparison:
    """Relative improvement of a new rate over an old one, with its bootstrap interval."""

    gain: float
    low: float
    high: float
    confidence: float
    requests_new: int
    requests_old: int

    @property
    def better(self) -> bool:
        """The interval lies above zero: the new rate is significantly higher."""
        return self.low > 0

    @property
    def worse(self) -> bool:
        return self.high < 0

    def describe(self, objective: str, other: str) -> str:
        return (f"{self.gain:+.1%} {objective} over {other} ({self.confidence:.0%} CI "
                f"{self.low:+.1%} to {self.high:+.1%}, {self.requests_new} vs "
                f"{self.requests_old} requests)")


def _ratio(rates: RequestRates, ix: Any) -> Any:
    c = rates.contributions[ix].sum(axis=-1)
    t = rates.time_shares[ix].sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return c / t


def _bootstrap(samples: Sequence[RequestRates], statistic: Any, confidence: float,
               n_resamples: int, seed: int) -> tuple[float, float]:
    """Two-sided interval of ``statistic(*index arrays)`` resampling each trial's requests."""
    from scipy import stats

    indices = tuple(np.arange(r.requests) for r in samples)

    def stat(*ix: Any, axis: int = -1) -> Any:
        del axis  # indices arrive with the resample axis first and requests last
        return statistic(*ix)

    low = high = math.nan
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # degenerate data: handled below
            res = stats.bootstrap(indices, stat, n_resamples=n_resamples, batch=_BATCH,
                                  vectorized=True, paired=False, confidence_level=confidence,
                                  method=method, rng=np.random.default_rng(seed))
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(low) and math.isfinite(high):
            return low, high
    point = float(statistic(*indices))
    if np.allclose(res.bootstrap_distribution, point, equal_nan=False):
        return point, point  # every resample gives the same value: no sampling noise
    return low, high


def rate_interval(rates: RequestRates, *, confidence: float = CONFIDENCE,
                  n_resamples: int = N_RESAMPLES, seed: int = 0) -> Interval | None:
    """Bootstrap interval of one trial's rate; None with fewer than two requests."""
    if rates.requests < 2:
        return None
    low, high = _bootstrap([rates], lambda ix: _ratio(rates, ix), confidence, n_resamples,
                           seed)
    return Interval(rates.value, low, high, confidence)


def compare_rates(new: RequestRates, old: RequestRates, *, confidence: float = CONFIDENCE,
                  n_resamples: int = N_RESAMPLES, seed: int = 0) -> Comparison | None:
    """Relative improvement of ``new`` over ``old`` and its interval.

    None when it is undefined: fewer than two requests in either trial, or an old rate of 0.
    """
    if new.requests < 2 or old.requests < 2 or not old.value > 0:
        return None

    def gain(ix_new: Any, ix_old: Any) -> Any:
        with np.errstate(divide="ignore", invalid="ignore"):
            return _ratio(new, ix_new) / _ratio(old, ix_old) - 1.0

    low, high = _bootstrap([new, old], gain, confidence, n_resamples, seed)
    return Comparison(new.value / old.value - 1.0, low, high, confidence, new.requests,
                      old.requests)


@dataclass(frozen=True)
class PromotionDecision:
    """Whether a new result becomes the active recommendation, and why (for people)."""

    promote: bool
    reason: str
    value_ci: tuple[float, float] | None = None
    comparison: Comparison | None = None
    compared_with: int | None = None

    @property
    def gain(self) -> float | None:
        return self.comparison.gain if self.comparison else None

    @property
    def gain_ci(self) -> tuple[float, float] | None:
        return (self.comparison.low, self.comparison.high) if self.comparison else None


def _violations(constraints: Mapping[str, float]) -> str:
    over = [(f"{value:.0f} failed request(s)" if name == "failed_requests" else
             f"{name} {value:+.0f} ms") for name, value in constraints.items() if value > 0]
    return ", ".join(over) if over else "no latency sample"


def decide(*, objective: str, feasible: bool, constraints: Mapping[str, float],
           new: RequestRates | None, active_id: int | None,
           active: RequestRates | None, confidence: float = CONFIDENCE,
           n_resamples: int = N_RESAMPLES, seed: int = 0) -> PromotionDecision:
    """Promote a new result over the active recommendation ``active_id``, or say why not.

    Promoted only when it meets the SLOs (``feasible``) and, if a recommendation is active,
    the bootstrap interval of the relative improvement excludes zero on the positive side.
    ``new``/``active`` are the two trials' requests (None when not stored).
    """
    interval = rate_interval(new, confidence=confidence, n_resamples=n_resamples,
                             seed=seed) if new is not None else None
    value_ci = interval.as_tuple() if interval else None

    def verdict(promote: bool, reason: str, cmp: Comparison | None = None,
                against: int | None = active_id) -> PromotionDecision:
        return PromotionDecision(promote, reason, value_ci, cmp, against)

    if not feasible:
        return verdict(False, f"misses the SLOs ({_violations(constraints)} over the bound); "
                       "kept as a candidate")
    if active_id is None:
        return verdict(True, "first recommendation for this workload that meets the SLOs")
    other = f"active #{active_id}"
    if new is None or active is None:
        which = "this trial" if new is None else f"#{active_id}'s trial"
        return verdict(False, f"cannot test the gain over {other}: {which} has no "
                       f"per-request measurements; #{active_id} stays active")
    cmp = compare_rates(new, active, confidence=confidence, n_resamples=n_resamples, seed=seed)
    if cmp is None:
        if active.value == 0 and new.value > 0 and interval is not None and interval.low > 0:
            return verdict(True, f"{objective} {new.value:.4g} > 0 where {other} had none "
                           f"({confidence:.0%} CI {interval.low:.4g} to {interval.high:.4g})")
        return verdict(False, f"cannot test the gain over {other} (too few requests, or "
                       f"neither has any {objective}); #{active_id} stays active")
    text = cmp.describe(objective, other)
    if cmp.better:
        return verdict(True, f"{text}: significant, promoted", cmp)
    if cmp.worse:
        return verdict(False, f"{text}: worse; #{active_id} stays active", cmp)
    return verdict(False, f"{text}: the interval includes zero, not significant; "
                   f"#{active_id} stays active", cmp)
