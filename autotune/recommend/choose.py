"""Which measured trial a workload's recommendation is: the best one meeting the SLO.

With the capacity reading a trial meets the SLO at *some* rate; the recommendation must serve
the workload's own (the policy's ``replay.time_scale``, 1 = the sample's rate). So configs
whose capacity reaches that rate come first, then the others meeting the SLO at a lower rate,
then the least violation; within each group the highest objective wins.

A config read more than once (a close call read again, or the active config re-measured) is
judged by all its readings: it meets the SLO only if every reading does (the worst reading's
constraints and capacity stand for it), and its value is their mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from autotune.objective import Outcome, meets_target, slo_margin
from autotune.slo import Slo
from autotune.types import TrialConfig

__all__ = ["Scored", "combine_readings", "select_best"]


@dataclass(frozen=True)
class Scored:
    """A finished trial as the recommendation sees it (``outcome`` None: it failed);
    ``trial_id`` is its row in the store."""

    number: int
    config: TrialConfig
    outcome: Outcome | None
    is_baseline: bool = False
    trial_id: int | None = None


def combine_readings(readings: Sequence[Scored], slo: Slo | None,
                     target: float) -> Scored | None:
    """One trial standing for every reading of a config (see the module doc); the latest
    reading's trial and number, None when every reading failed."""
    done = [t for t in readings if t.outcome is not None]
    if not done:
        return None
    if len(readings) == 1:
        return done[0]
    outcomes = [t.outcome for t in done if t.outcome is not None]
    if slo is not None:
        worst = min(outcomes, key=lambda o: slo_margin(o, slo, target))
    else:
        worst = min(outcomes, key=lambda o: (o.feasible, -o.violation))
    constraints = dict(worst.constraints)
    if len(done) < len(readings):  # a reading that failed outright misses the SLO
        constraints["failed_requests"] = max(constraints.get("failed_requests", 0.0), 1.0)
    value = sum(o.value for o in outcomes) / len(outcomes)
    summary = {**worst.summary, "readings": len(readings)}
    return replace(done[-1], outcome=Outcome(value, constraints, summary))


def select_best(trials: Sequence[Scored], target: float | None = None,
                slo: Slo | None = None) -> Scored | None:
    """The best config: highest value among those meeting the SLO at ``target`` (when given),
    else among feasible ones, else the least SLO violation (see the module doc).

    Ties break towards the earlier trial (deterministic).
    """
    groups: dict[TrialConfig, list[Scored]] = {}
    for t in trials:
        groups.setdefault(t.config, []).append(t)
    done = [c for g in groups.values()
            if (c := combine_readings(g, slo, target or 1.0)) is not None]
    if not done:
        return None
    feasible = [t for t in done if t.outcome is not None and t.outcome.feasible]
    if target is not None:
        at_target = [t for t in feasible if t.outcome and meets_target(t.outcome, target)]
        feasible = at_target or feasible
    if feasible:
        return max(feasible, key=lambda t: (t.outcome.value if t.outcome else 0.0, -t.number))
    return min(done, key=lambda t: (t.outcome.violation if t.outcome else 0.0, t.number))
