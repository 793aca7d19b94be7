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

This module is a leaf: it imports nothing from autotune (``autotune.types`` re-exports
:class:`Slo`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is imported where arrays are judged: read-only commands start faster
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]
    BoolArray = npt.NDArray[np.bool_]

__all__ = ["KEPT_UP", "MAX_SCALE", "MIN_SCALE", "RESOLUTION", "Slo", "SloCheck",
           "margin_from_summary", "quantile_ms"]

#: The percentile the SLO bounds (as a fraction).
SLO_QUANTILE = 0.99

#: A capacity replay that kept up with less than this share of its arrival rate fell behind:
#: it misses the SLO whatever its p99s read (:func:`autotune.orchestrate.capacity.kept_up`).
KEPT_UP = 0.95

#: Bounds of a capacity reading's arrival scale (the multiple of the sample's rate replayed),
#: shared by the capacity search and the predictor that forecasts its reading.
MIN_SCALE, MAX_SCALE = 1 / 64, 64.0

#: The capacity search stops refining once the highest rate met and the lowest missed are
#: within this fraction of each other (so a capacity lies within this fraction above the rate
#: it kept, when the rate above was not read).
RESOLUTION = 0.02


def quantile_ms(values: FloatArray, q: float) -> float:
    """The q-quantile of ``values`` (seconds) in milliseconds; NaN when empty."""
    import numpy as np

    if values.size == 0:
        return math.nan
    return float(np.quantile(values, q)) * 1000.0


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
