"""The binding-SLO mode (``python -m bench.regret --binding-slo``): a config's value is whether
it serves the workload's rate to serve within the SLO, and among those that do, its capacity
(:class:`bench.regret.oracle.Table` with ``binding``); not its capacity at any rate.

A unit's rate to serve and its p99 ITL bound are set by one rule (:data:`RULE`), from a model
of how a replica's tail grows with its load:

- **Light load does not separate the configs.** With few requests in flight, a p99 ITL is a
  decode step of the window at a small batch: every batching of a window reads the same (Kimi
  DSpark, chat-high: 25.6, 27.7, 30.3 and 32.4 ms for windows 1, 3, 5 and 7 at 1/16 of the
  sample's rate, whatever ``max_num_seqs`` and chunk). A bound between those unloaded latencies
  leaves no config room for any load (every config's capacity reading met one at no rate above
  1/64: bench/results/HISTORY.md, 2026-12-06).
- **Load does.** Under load a p99 ITL is set by the steps a decode shares with others' prefill
  chunks and by the batch: a long chunk (``max_num_batched_tokens``) and a large batch raise
  throughput and lengthen those steps together. So the config with the most capacity under
  the workload's own SLO (the *throughput-best*, the oracle scored by capacity at any rate)
  is the one whose tail grows most with the load, and a bound can only bind on it at a rate
  that loads it.
- **The rate to serve** (:func:`rate_to_serve`) is therefore the median of the configs'
  capacities under the workload's own SLO (the configs that meet it at some rate, each its
  readings' mean ``load_scale``): half of them carry it, the rest cannot whatever the ITL
  bound, and the throughput-best carries it loaded (at its capacity / the median). The
  workload's arrivals are sped up by that factor, so the rate to serve is 1 × the sample's,
  as autotune reads it; the samples' own rates are at or beyond every config's sustained
  capacity (HISTORY.md, 2026-12-06), which no ITL bound can make binding.
- **The p99 ITL bound** (:func:`bound`) lies between the configs' p99 ITLs at that rate, read
  as the capacity search reads its first rate (the busiest window of the sped-up sample, one
  reading, the workload's TTFT bound alone: :func:`autotune.orchestrate.capacity.
  replay_at_capacity` with one replay), among the configs that keep up there (TTFT met, the
  arrivals kept up with, the rate sustained): at the geometric midpoint of the lowest p99 ITL
  and the throughput-best's. The two sides then have equal SLO margins (the capacity search's
  margin is the log of a p99 over its bound, and its verdict is on the p99 as read), so the
  config with the shortest tail serves the rate and the throughput-best does not, each by the
  widest margin one bound can give both. The p99 TTFT bound stays the workload's.
- **Only a bound clear of the replay noise binds.** Every config is read at the rate a second
  time, on another replay (:func:`replay_noise`: one reading's p99 noise from the pairs of
  the configs whose p99 lies between the two the bound would split), and
  the bound is set only where half the log gap between the lowest p99 ITL and the
  throughput-best's is at least :data:`SEPARATION_Z` noise sds: one reading of either then
  lands on its own side 95% of the time. Closer than that (Kimi DSpark code at 97.39 and
  97.45 ms; Llama-70B code at 157.4 and 160.1 ms), which config serves the rate would be
  decided by replay luck, the oracle's and the search's alike, so the workload keeps its own
  bound there.
- **What one reading can tell.** Each at-rate reading keeps its p99's order-statistic interval
  (:meth:`autotune.slo.Slo.verdict`), and the record the two ends the bound lies between (the
  lowest interval top, the throughput-best's interval bottom). They are not used to set the
  bound: at the light rates where the window alone sets the tail (a few dozen requests in the
  window) the interval spans from the step time to the longest gap (Kimi DSpark, chat-low, at
  0.073x: 25.6 to 60.2 ms for every window-1 config), wider than any difference between
  configs; whether the throughput-best serves the rate is read from the oracle's repeated
  capacity readings under the bound, not from this one reading.

Where the throughput-best has the shortest tail at the rate (no bound fails it while another
config serves the rate), or one no bound clear of the noise separates from the shortest, the
unit keeps the workload's own ITL bound at that rate. A unit where
no config meets the workload's SLO at any rate (no rate to set), none keeps up at the rate, or
none's capacity reading serves the rate under the bound is scored by capacity at any rate and
counted apart (``out_of_reach``).

A unit's ``binding`` record (:class:`bench.regret.records.BindingRecord`) keeps the rate, the
bound and the p99 ITLs it was set from, and the throughput-best config with whether it serves
the rate within the binding SLO (its oracle readings mostly do): the units where it does not
are those where the SLO changes the winner (:func:`changed_winner`), counted in the output per
world and over all (:func:`count`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from statistics import NormalDist
from typing import NamedTuple, TypeVar

from bench.regret.reading import Reading
from bench.regret.records import BindingCount, BindingRecord, Detail

#: A config (a TrialConfig; anything hashable here).
K = TypeVar("K", bound=Hashable)

RULE = ("rate to serve = the median capacity (under the workload's own SLO) of the configs "
        "meeting it at some rate; p99 ITL bound = the geometric midpoint of the lowest p99 ITL "
        "at that rate and the throughput-best config's, among the configs keeping up there "
        "(one capacity-search reading at the rate, the workload's TTFT bound), when the two "
        "lie further apart than one reading's noise lets a bound separate (a second reading of "
        "every config at the rate measures it); else the workload's own bound")

#: One reading lands on its side of a bound at the midpoint with this chance at least (one
#: sided, its p99's replay noise log-normal): 95%.
SEPARATION_Z = NormalDist().inv_cdf(0.95)


class Tail(NamedTuple):
    """A config's p99 ITL (ms) at the rate to serve, with its order-statistic interval."""

    p99: float
    low: float
    high: float


def capacity(readings: Sequence[Reading]) -> float:
    """A config's capacity, × the sample's rate: its readings' mean ``load_scale`` (0 for a
    reading without one)."""
    scales = [r.summary.get("load_scale") for r in readings]
    return statistics.fmean(float(s) if isinstance(s, int | float) else 0.0 for s in scales)


def rate_to_serve(capacities: Sequence[float]) -> float | None:
    """The rate to serve, × the sample's rate: the median of ``capacities`` (the capacities,
    under the workload's own SLO, of the configs that meet it at some rate); None when there
    are none."""
    positive = [c for c in capacities if c > 0 and math.isfinite(c)]
    return float(statistics.median(positive)) if positive else None


def replay_noise(first: Mapping[K, Tail | None], second: Mapping[K, Tail | None],
                 throughput_best: K) -> float | None:
    """One reading's p99 ITL noise at the rate (sd of its log) where a bound would lie: from
    two readings of each config on different replays, over the configs whose first p99 lies
    between the lowest and the throughput-best's (all kept up when fewer than three do; a
    chunk stall's p99 is near-deterministic, a plain step's is not, so the noise away from the
    bound says little of it there): sqrt(mean(log ratio²) / 2). None with no config kept up
    in both readings."""
    pairs = {k: (a.p99, b.p99) for k, a in first.items()
             if a is not None and (b := second.get(k)) is not None and a.p99 > 0 and b.p99 > 0}
    if not pairs:
        return None
    mine = first.get(throughput_best)
    lowest = min(a for a, _ in pairs.values())
    band = [p for p in pairs.values() if mine is not None and lowest <= p[0] <= mine.p99]
    used = band if len(band) >= 3 else list(pairs.values())
    return math.sqrt(statistics.fmean(math.log(a / b) ** 2 for a, b in used) / 2.0)


def bound(at_rate: Mapping[K, Tail | None], throughput_best: K,
          noise: float = 0.0) -> float | None:
    """The p99 ITL bound (ms) from the configs' p99 ITLs at the rate to serve (``at_rate``:
    None for a config that does not keep up there): the geometric midpoint of the lowest and
    the throughput-best's. None when no config keeps up, when the throughput-best does not
    keep up (it fails the rate whatever the bound), or its p99 ITL is not above the lowest by
    more than ``noise`` (one reading's, sd of the log) lets a bound between them separate: each
    side's margin, half the log gap, must be :data:`SEPARATION_Z` noise sds."""
    kept = [t.p99 for t in at_rate.values() if t is not None]
    mine = at_rate.get(throughput_best)
    if not kept or mine is None:
        return None
    lowest = min(kept)
    if mine.p99 <= lowest or math.log(mine.p99 / lowest) / 2.0 < SEPARATION_Z * noise:
        return None
    return math.sqrt(lowest * mine.p99)


def changed_winner(units: Sequence[Detail]) -> list[str]:
    """The units (``world workload``) whose throughput-best config fails the binding SLO at the
    rate to serve (out-of-reach units left out); the binding record's world is the unit's."""
    return [f"{b['world']} {u['workload']}" for u in units
            if (b := u.get("binding")) is not None and b.get("reachable", True)
            and b.get("rate_to_serve", 1.0) is not None and b["configs_keeping_up"] > 0
            and not b["throughput_best_serves"]]


def out_of_reach(units: Sequence[Detail]) -> list[str]:
    """The units where no config met the workload's SLO at some rate or kept up at the rate to
    serve, or no config's capacity reading served the rate under the bound (scored by capacity
    at any rate)."""
    return [f"{b['world']} {u['workload']}" for u in units
            if (b := u.get("binding")) is not None
            and (b.get("rate_to_serve", 1.0) is None or b["configs_keeping_up"] == 0
                 or not b.get("reachable", True))]


def count(units: Sequence[Detail]) -> BindingCount:
    """Over ``units`` (those scored under a binding SLO): how many, and those whose
    throughput-best config fails the SLO at the rate (``binding_units``) and out of reach."""
    fails = changed_winner(units)
    return {"units": len(units), "binding_units": len(fails), "which": fails,
            "out_of_reach": out_of_reach(units)}


def record(world: str, rate: float | None, itl_bound: float | None,
           at_rate: Mapping[str, Tail | None], throughput_best: str, serves: bool,
           reachable: bool = True, noise: float | None = None) -> BindingRecord:
    """A unit's binding record: ``rate`` (× the sample's rate; None: out of reach), the bound
    (None: the workload's own), the p99 ITLs at the rate (by config, None: not keeping up), the
    throughput-best config and whether it serves the rate within the binding SLO."""
    kept = [t for t in at_rate.values() if t is not None]
    mine = at_rate.get(throughput_best)
    return {"world": world, "rule": RULE,
            "rate_to_serve": None if rate is None else round(rate, 6),
            "itl_p99_ms": None if itl_bound is None else round(itl_bound, 3),
            "configs_keeping_up": len(kept), "configs": len(at_rate),
            "itl_p99_at_rate_best_ms": round(min(t.p99 for t in kept), 3) if kept else None,
            "itl_p99_at_rate_median_ms": (round(float(statistics.median(t.p99 for t in kept)),
                                                3) if kept else None),
            "itl_p99_at_rate_throughput_best_ms": None if mine is None else round(mine.p99, 3),
            "itl_p99_interval_shortest_top_ms": (round(min(t.high for t in kept), 3) if kept
                                                 else None),
            "itl_p99_interval_throughput_best_bottom_ms": (None if mine is None
                                                           else round(mine.low, 3)),
            "itl_p99_replay_noise": None if noise is None else round(noise, 5),
            "throughput_best": throughput_best, "throughput_best_serves": serves,
            "reachable": reachable}
