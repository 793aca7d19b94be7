"""What a method's run would cost on real replicas, and its regret against that cost.

Every reading carries the cost a trial of autotune records (:mod:`autotune.cost`: the server's
start and the replica time of every replay, in GPU-hours: ``cost_gpu_h``). A run's trials are
charged in order as one replica slot of autotune serves them: a trial of the config the slot's
server already serves (the run's previous trial's) pays its replay and no start
(autotune/orchestrate/servers.py). :func:`trial_gpu_h` gives each trial's charge (None when a
reading lacks its cost: one cached before cost was recorded).

A method's economy on one seed (:func:`economy`): the GPU-hours of its run (the trials it
recommends from), its regret when its spending stops at a budget of GPU-hours (the GPU-hours
guided spent on that seed, so methods are compared at equal cost), the GPU-hours it needs
before its recommendation comes within :data:`WITHIN` of the oracle, and how many of its
search trials read configs that meet the SLO at no rate (:func:`no_rate_trials`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from bench.regret.reading import Reading

if TYPE_CHECKING:
    from autotune.objective import Outcome

#: A config (a TrialConfig; anything hashable to the functions here).
K = TypeVar("K", bound=Hashable)

#: GPU-hours to reach: the recommendation within this share of the oracle.
WITHIN = 0.01
#: A spend within this share of the budget is within it (float sums).
SLACK = 1e-9


def _outcome(r: Reading) -> Outcome:
    from autotune.objective import Outcome

    return Outcome(r.value, r.constraints, r.summary)


def meets_at_some_rate(r: Reading) -> bool:
    """The reading met the SLO at some rate its capacity reading tried (autotune's rule:
    :func:`autotune.objective.met_at_some_rate`)."""
    from autotune.objective import met_at_some_rate

    return met_at_some_rate(_outcome(r))


def serves_the_rate(r: Reading) -> bool:
    """The reading met the SLO at the workload's rate to serve (its capacity reaches 1 × the
    sample's rate; autotune's rule: :func:`autotune.objective.meets_target`)."""
    from autotune.objective import meets_target

    return meets_target(_outcome(r), 1.0)


def reading_gpu_h(r: Reading, *, start: bool) -> float | None:
    """The GPU-hours of one reading (its start too when ``start``) by autotune's rule
    (:attr:`autotune.cost.TrialCost.gpu_h`); None without a cost."""
    from autotune.cost import trial_cost

    cost = trial_cost(r.summary)
    if cost is None or cost.gpus <= 0:
        return None
    return (cost if start else replace(cost, start_s=0.0)).gpu_h


def trial_gpu_h(trials: Sequence[tuple[K, Reading]]) -> list[float] | None:
    """Each trial's GPU-hours as one replica slot serves the run in order (a trial of the
    previous trial's config pays no start); None when a reading lacks its cost."""
    out: list[float] = []
    previous: K | None = None
    for c, r in trials:
        g = reading_gpu_h(r, start=c != previous)
        if g is None:
            return None
        out.append(g)
        previous = c
    return out


def within_budget(spent: Sequence[float], budget: float) -> int:
    """How many leading trials a budget of ``budget`` GPU-hours pays for."""
    total, k = 0.0, 0
    for g in spent:
        total += g
        if total > budget * (1.0 + SLACK):
            break
        k += 1
    return k


def gpu_h_to(spent: Sequence[float], regret_after: Callable[[int], float],
             target: float = WITHIN) -> float:
    """The GPU-hours a run spends before its recommendation (after ``k`` trials:
    ``regret_after(k)``) comes within ``target`` of the oracle (inf: never)."""
    total = 0.0
    for k, g in enumerate(spent, start=1):
        total += g
        if regret_after(k) <= target:
            return total
    return math.inf


def no_rate_trials(trials: Sequence[K], meets_at_some_rate: Callable[[K], bool],
                   baseline: K) -> int:
    """The search trials (every trial but the baseline's) of configs that meet the SLO at no
    rate by the oracle's readings (``meets_at_some_rate``)."""
    return sum(1 for c in trials if c != baseline and not meets_at_some_rate(c))
