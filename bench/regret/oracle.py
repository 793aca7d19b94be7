"""The oracle a method's pick is scored against: every config's repeated readings
(:class:`Table`), read again near the top until they settle (:func:`settle`); for a simulated
world one exhaustive table (:func:`build_table`), for a real engine one table per seed held out
from that seed's own runs (:func:`held_out`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from bench.regret.reading import Reading
from bench.regret.settings import Settings

#: A config as the oracle keys it (a TrialConfig; anything hashable to the table itself).
K = TypeVar("K", bound=Hashable)


@dataclass
class Table(Generic[K]):
    """The oracle: every config's repeated readings (``binding``: scored on whether a config
    serves the workload's rate within the SLO, see :meth:`meets`)."""

    readings: dict[K, list[Reading]] = field(default_factory=dict)
    #: binding SLO: a config stands when most of its readings serve the workload's rate within
    #: the SLO, and a pick that does not is worth nothing (regret 1)
    binding: bool = False

    def true_value(self, config: K) -> float:
        return statistics.fmean(r.value for r in self.readings[config])

    def mostly_feasible(self, config: K) -> bool:
        return self.mostly(config, self.meets)

    def mostly(self, config: K, meets: Callable[[Reading], bool]) -> bool:
        """Whether most of ``config``'s readings meet ``meets``."""
        rs = self.readings[config]
        return sum(meets(r) for r in rs) * 2 > len(rs)

    def meets_somewhere(self, config: K) -> bool:
        """Whether most of ``config``'s readings meet the SLO at some rate (binding or not)."""
        from bench.regret.economy import meets_at_some_rate

        return self.mostly(config, meets_at_some_rate)

    def meets(self, r: Reading) -> bool:
        """What a reading must meet for its config to stand: the SLO at some rate its capacity
        reading tried, or, binding, at the workload's rate to serve. Autotune's recommendation
        ranks by the same standards (:func:`autotune.objective.rank_best`). A capacity reading
        that met the SLO at no rate keeps its slowest replay, whose p99s may be within bounds
        (it fell behind the arrivals): its constraints read feasible, yet no recommendation
        would name it while a config meeting the SLO at some rate is known, so it is no
        oracle either."""
        from bench.regret.economy import meets_at_some_rate, serves_the_rate

        return serves_the_rate(r) if self.binding else meets_at_some_rate(r)

    def oracle(self) -> tuple[K, float]:
        """The best config whose readings mostly meet the SLO (the best of all when none
        does), and its true value."""
        ok = [c for c in self.readings if self.mostly_feasible(c)]
        best = max(ok or self.readings, key=self.true_value)
        return best, self.true_value(best)

    def regret(self, config: K | None) -> float:
        """1 - true(config) / the oracle's (1 for no pick)."""
        if config is None or (self.binding and not self.mostly_feasible(config)):
            return 1.0
        _, best = self.oracle()
        return max(0.0, 1.0 - self.true_value(config) / best) if best > 0 else 0.0

    def regret_se(self, config: K | None) -> float | None:
        """The standard error of :meth:`regret` that the spread of the oracle's own readings
        leaves (delta method on the ratio of two means): a regret within about two of these
        is the oracle's noise as much as the pick's. None where the config or the oracle's
        best has fewer than two readings."""
        if config is None:
            return None
        best, _ = self.oracle()
        if config == best:
            return 0.0
        means, rel = [], []
        for c in (config, best):
            values = [r.value for r in self.readings[c]]
            mean = statistics.fmean(values) if values else 0.0
            if len(values) < 2 or mean <= 0:
                return None
            means.append(mean)
            rel.append(statistics.variance(values) / len(values) / mean**2)
        return means[0] / means[1] * math.sqrt(sum(rel))

    def in_doubt(self, config: K, best: float, within: float, se_to: float) -> bool:
        """Whether the readings of ``config`` leave it unsettled near the top: its mean plus
        two standard errors reaches within ``within`` of ``best`` (the oracle's mean), and that
        standard error is above ``se_to`` of it (or its readings split on the SLO verdict)."""
        values = [r.value for r in self.readings[config]]
        mean = statistics.fmean(values)
        se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.inf
        split = len({self.meets(r) for r in self.readings[config]}) > 1
        return (mean + 2 * se >= (1.0 - within) * best
                and (se > se_to * best or split))


def settle(table: Table[K], read: Callable[[K, int], Reading], *, within: float, se_to: float,
           most: int) -> int:
    """Read again, two at a time on the oracle's next replay seeds, every config the table
    cannot yet tell from its best (:meth:`Table.in_doubt`), until none is or each has ``most``
    readings; the number of readings added.

    Two readings per config leave a regret that means nothing where the readings of one config
    are bimodal: Llama-70B on one MI300X, chat-high, put window 7 x 8 x 8192 at 0.851 on two
    readings and at 1.015 on seven (its p99 ITL within 2% of the bound over a range of rates),
    and scored a pick of it a 17.87% loss (regret_se 13.72%)."""
    added = 0
    while True:
        _, best = table.oracle()
        todo = [c for c, rs in table.readings.items()
                if len(rs) < most and table.in_doubt(c, best, within, se_to)]
        if not todo:
            return added
        for c in todo:
            n = len(table.readings[c])
            more = min(2, most - n)
            table.readings[c] += [read(c, 1000 + n + k) for k in range(more)]
            added += more


def build_table(configs: Sequence[K], read: Callable[[K, int], Reading],
                settings: Settings, *, binding: bool = False) -> Table[K]:
    """The exhaustive oracle of a simulated world: every config read ``settings.repeats`` times
    on the oracle's own replay seeds (1000 and up), the best ``refine`` read ``refine_repeats``
    times more, then :func:`settle`."""
    table: Table[K] = Table(binding=binding)
    for c in configs:
        table.readings[c] = [read(c, 1000 + r) for r in range(settings.repeats)]
    top = sorted(configs, key=table.true_value, reverse=True)[: settings.refine]
    for c in top:
        table.readings[c] += [read(c, 1000 + r) for r in
                              range(settings.repeats, settings.repeats + settings.refine_repeats)]
    settle(table, read, within=settings.settle_within, se_to=settings.settle_se,
           most=settings.settle_max)
    return table


def held_out(sweep: dict[K, list[Reading]], read: Callable[[K, int], Reading], *,
             within: float, most: int) -> list[Table[K]]:
    """One oracle per seed from ``sweep`` (each config's readings, the s-th taken by seed s):
    seed s's holds every reading of a config but its own, plus the readings :func:`settle`
    adds where the pooled sweep cannot tell a config from its best. Those are read by ``read``
    on replay seeds of the oracle's own (1000 and up), which no method reads, so they are held
    out from every seed and join every seed's oracle.

    Every config within reach of the best is read in each round, however steady its readings
    (no ``se_to``): a server's readings move together over time or with the replay seed (on
    eps002 the three configs of a first settling run read 3.1% lower at replay seeds 1005-1006
    than at 1003-1004, every one of them), so a config left out of later rounds would be
    compared with the others at another time. Read in the same rounds, on the same replay
    seeds, the configs near the top share that movement."""
    seeds = len(next(iter(sweep.values())))
    pooled = Table({c: list(rs) for c, rs in sweep.items()})
    settle(pooled, read, within=within, se_to=0.0, most=most)
    return [Table({c: [r for t, r in enumerate(rs) if t != seed] + pooled.readings[c][seeds:]
                   for c, rs in sweep.items()})
            for seed in range(seeds)]
