"""Whether a capacity reading at a rate will be credited: the chance it is a sustained rate.

A capacity reading credits a rate only when its window of arrivals spans
:data:`~autotune.slo.SETTLE_LIFETIMES` request lifetimes (the median E2E, or the drain when
longer: :mod:`autotune.orchestrate.capacity_window`); a shorter window measured how fast a
burst drains. The window is ``replay.window_s`` or, when the whole sample fits in it at the
rate read, the sample's own span at that rate, which shrinks as the rate rises while the
lifetime grows with the load. So where requests live long (long outputs, a slow device) or the
sample is short, the capacity a reading can credit is set by the lifetimes, not by the p99s,
and a forecast of the p99s alone overstates it.

The replica model predicts each reading's lifetime (:func:`autotune.predict.replica.lifetimes`)
and with it the settle margin, log(k × lifetime / span). What the model gets wrong is learned
from every reading that recorded its lifetime (``replay{i}_lifetime_s``): the log ratio of the
measured lifetime to the model's is a workload-wide offset under a normal prior
(:data:`_PRIOR_SD`), with a reading-to-reading scatter estimated from the readings around a
prior guess (:data:`_SCATTER`, worth :data:`_SCATTER_WEIGHT` readings). The chance a reading is
sustained is the chance its margin, shifted by the offset, is at most 0, under the offset's
posterior and the scatter (:meth:`SettleCalibration.chance`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["SettleCalibration"]

FloatArray = npt.NDArray[np.float64]

#: Prior sd (log) of the model's error in a workload's request lifetimes.
_PRIOR_SD = 0.5
#: Prior guess of the scatter (log sd) of one reading's lifetime around the calibrated model,
#: and how many readings that guess is worth against the scatter the readings show.
_SCATTER, _SCATTER_WEIGHT = 0.15, 2.0


@dataclass(frozen=True)
class SettleCalibration:
    """The calibrated error of the model's lifetimes: the offset's posterior mean and variance
    (log) and a reading's scatter around it (log sd)."""

    offset: float = 0.0
    offset_var: float = _PRIOR_SD**2
    scatter: float = _SCATTER

    @classmethod
    def fit(cls, errors: Sequence[float]) -> SettleCalibration:
        """The calibration from ``errors``: per reading, log(measured lifetime / the model's
        at that reading's config and rate)."""
        e = np.asarray([x for x in errors if math.isfinite(x)], dtype=np.float64)
        if e.size == 0:
            return cls()
        spread = float(((e - e.mean()) ** 2).sum())
        scatter = math.sqrt((_SCATTER_WEIGHT * _SCATTER**2 + spread)
                            / (_SCATTER_WEIGHT + e.size - 1.0))
        precision = e.size / scatter**2 + 1.0 / _PRIOR_SD**2
        return cls(float(e.sum() / scatter**2 / precision), 1.0 / precision, scatter)

    def chance(self, margin: FloatArray) -> FloatArray:
        """Per row, the chance a reading whose model settle margin is ``margin`` (log; -inf:
        no lifetime to settle) is sustained."""
        from scipy.stats import norm

        sd = math.sqrt(self.offset_var + self.scatter**2)
        out: FloatArray = norm.cdf(-(np.asarray(margin, dtype=np.float64) + self.offset) / sd)
        return out
