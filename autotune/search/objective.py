"""Turning a Measurement into what the search maximises and the SLO constraints it must meet."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from autotune.types import Measurement, Slo

__all__ = ["Outcome", "Scored", "evaluate", "select_best"]


@dataclass(frozen=True)
class Outcome:
    """The search's reading of one measured trial.

    ``constraints`` follow Optuna's convention: a trial is feasible when every value is <= 0
    (here: measured p99 minus the SLO bound, in milliseconds).
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


def evaluate(measurement: Measurement, objective: str, slo: Slo) -> Outcome:
    """Objective value (goodput or output tokens/s) and SLO constraints of a measurement."""
    summary = measurement.summary(slo)
    raw = summary.get(objective)
    value = float(raw) if isinstance(raw, int | float) and math.isfinite(raw) else 0.0
    constraints: dict[str, float] = {}
    for name, bound in (("ttft_p99_ms", slo.ttft_p99_ms), ("itl_p99_ms", slo.itl_p99_ms)):
        if bound is None:
            continue
        measured = summary.get(name)
        # No samples (e.g. every request failed) counts as a violation, never as feasible.
        constraints[name] = (float(measured) - bound) if measured is not None else bound
    return Outcome(value=value, constraints=constraints, summary=summary)


@dataclass(frozen=True)
class Scored:
    """A finished trial as the selection sees it."""

    number: int
    config: Any
    outcome: Outcome | None
    is_baseline: bool = False


def select_best(trials: list[Scored]) -> Scored | None:
    """The best trial: highest value among feasible ones, else the least SLO violation.

    Ties break towards the earlier trial (deterministic).
    """
    done = [t for t in trials if t.outcome is not None]
    if not done:
        return None
    feasible = [t for t in done if t.outcome is not None and t.outcome.feasible]
    if feasible:
        return max(feasible, key=lambda t: (t.outcome.value if t.outcome else 0.0, -t.number))
    return min(done, key=lambda t: (t.outcome.violation if t.outcome else 0.0, t.number))
