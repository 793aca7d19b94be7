"""Which measured trial a workload's recommendation is: the best one meeting the SLO."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.objective import Outcome
from autotune.types import TrialConfig

__all__ = ["Scored", "select_best"]


@dataclass(frozen=True)
class Scored:
    """A finished trial as the recommendation sees it (``outcome`` None: it failed);
    ``trial_id`` is its row in the store."""

    number: int
    config: TrialConfig
    outcome: Outcome | None
    is_baseline: bool = False
    trial_id: int | None = None


def select_best(trials: Sequence[Scored]) -> Scored | None:
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
