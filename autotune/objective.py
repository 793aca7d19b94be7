"""A trial's reading: the objective it scored and the SLO constraints it must meet.

:func:`score_measurement` turns a backend's :class:`~autotune.types.Measurement` into an
:class:`Outcome`: the objective value (goodput, requests per second meeting the SLO, or output
tokens per second) and the replay's SLO constraints from :meth:`autotune.slo.Slo.check`. The
search strategies learn from outcomes; the recommendation step (:mod:`autotune.recommend`)
picks among them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from autotune.slo import margin_from_summary
from autotune.types import Measurement, Slo

__all__ = ["CLOSE_CALL", "Outcome", "close_call", "meets_target", "score_measurement",
           "slo_margin"]

#: A reading this close to failing (log margin, about 10%) is read again before it is trusted.
CLOSE_CALL = 0.1


@dataclass(frozen=True)
class Outcome:
    """The search's reading of one measured trial.

    ``constraints`` follow Optuna's convention: a trial is feasible when every value is <= 0
    (:class:`autotune.slo.SloCheck`: each measured p99 minus its bound in milliseconds, and the
    number of failed requests).
    """

    value: float
    constraints: dict[str, float]
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.constraints.values())

    @property
    def violation(self) -> float:
        return sum(max(0.0, v) for v in self.constraints.values())


def score_measurement(measurement: Measurement, objective: str, slo: Slo) -> Outcome:
    """Objective value (goodput or output tokens/s) and SLO constraints of a measurement."""
    summary = measurement.summary(slo)
    raw = summary.get(objective)
    value = float(raw) if isinstance(raw, int | float) and math.isfinite(raw) else 0.0
    return Outcome(value=value, constraints=measurement.slo_check(slo).constraints,
                   summary=summary)


def meets_target(outcome: Outcome, target: float) -> bool:
    """The trial meets the SLO at ``target`` × the sample's rate: its capacity reaches it, or
    (no capacity reading) it met the SLO as replayed."""
    scale, met = outcome.summary.get("load_scale"), outcome.summary.get("capacity_met_slo")
    if not isinstance(scale, int | float) or met is None:
        return outcome.feasible
    return bool(met) and outcome.feasible and scale >= target * (1 - 1e-9)


def slo_margin(outcome: Outcome, slo: Slo, target: float) -> float:
    """How far a reading is from failing, in log units (negative: it fails):
    :func:`autotune.slo.margin_from_summary` of its summary."""
    return margin_from_summary(outcome.summary, slo, target)


def close_call(outcome: Outcome, slo: Slo, target: float) -> bool:
    """Meets the SLO, but within :data:`CLOSE_CALL` of failing (one reading is not enough)."""
    return 0.0 <= slo_margin(outcome, slo, target) < CLOSE_CALL and meets_target(outcome,
                                                                                 target)
