"""Which measured trial a workload's recommendation is: the best one meeting the SLO.

With the capacity reading a trial meets the SLO at *some* rate; the recommendation must serve
the workload's own (the policy's ``replay.time_scale``, 1 = the sample's rate). So trials whose
capacity reaches that rate come first, then the others meeting the SLO at a lower rate, then
the least violation; within each group the highest objective wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.objective import Outcome
from autotune.types import TrialConfig

__all__ = ["Scored", "reaches_target", "select_best"]


@dataclass(frozen=True)
class Scored:
    """A finished trial as the recommendation sees it (``outcome`` None: it failed);
    ``trial_id`` is its row in the store."""

    number: int
    config: TrialConfig
    outcome: Outcome | None
    is_baseline: bool = False
    trial_id: int | None = None


def reaches_target(outcome: Outcome, target: float) -> bool:
    """The trial meets the SLO at ``target`` × the sample's rate: its capacity reaches it, or
    (no capacity reading) it met the SLO as replayed."""
    scale, met = outcome.summary.get("load_scale"), outcome.summary.get("capacity_met_slo")
    if not isinstance(scale, int | float) or met is None:
        return outcome.feasible
    return bool(met) and outcome.feasible and scale >= target * (1 - 1e-9)


def select_best(trials: Sequence[Scored], target: float | None = None) -> Scored | None:
    """The best trial: highest value among those meeting the SLO at ``target`` (when given),
    else among feasible ones, else the least SLO violation (see the module doc).

    Ties break towards the earlier trial (deterministic).
    """
    done = [t for t in trials if t.outcome is not None]
    if not done:
        return None
    feasible = [t for t in done if t.outcome is not None and t.outcome.feasible]
    if target is not None:
        at_target = [t for t in feasible if t.outcome and reaches_target(t.outcome, target)]
        feasible = at_target or feasible
    if feasible:
        return max(feasible, key=lambda t: (t.outcome.value if t.outcome else 0.0, -t.number))
    return min(done, key=lambda t: (t.outcome.violation if t.outcome else 0.0, t.number))
