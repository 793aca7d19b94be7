"""The binding-SLO mode (``python -m bench.regret --binding-slo``): a config's value is whether
it serves the workload's rate to serve within the SLO, and among those that do, its capacity
(:class:`bench.regret.oracle.Table` with ``binding``); not its capacity at any rate.

A unit's rate to serve and its bound on one of the SLO's two tails (p99 ITL or p99 TTFT) are
set by one rule (:data:`RULE`), from a model of how a replica's tails grow with its load:

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
- **Both tails, one chunk.** The chunk size sets two things at once: how long a decode stalls
  behind a prefill chunk (the ITL tail) and how many chunk steps a long prompt takes before its
  first token (the TTFT tail). A config with short chunks stalls decodes briefly but makes a
  long prompt wait through several steps, each shared with the running decodes; a config with
  long chunks does the reverse. So at a rate where the throughput-best's p99 ITL and the
  shortest are set by the same stall (both the same chunk), their p99 TTFTs can still lie far
  apart, and the other way round. (Kimi DSpark code, for one: 97.39 and 97.45 ms p99 ITL, while
  its 2048-token-chunk configs read ~0.9-1.2 s p99 TTFT against ~350 ms for 8192-token ones.)
  The rule is therefore the same for either tail, and binds the one that separates.
- **The rate to serve** (:func:`rate_to_serve`) is the median of the configs' capacities under
  the workload's own SLO (the configs that meet it at some rate, each its readings' mean
  ``load_scale``): half of them carry it, the rest cannot whatever the bound, and the
  throughput-best carries it loaded (at its capacity / the median). The workload's arrivals
  are sped up by that factor, so the rate to serve is 1 × the sample's, as autotune reads it;
  the samples' own rates are at or beyond every config's sustained capacity (HISTORY.md,
  2026-12-06), which no bound can make binding.
- **A tail's candidate bound** (:func:`bound`) lies between the configs' p99s of that tail at
  that rate, read as the capacity search reads its first rate (the busiest window of the
  sped-up sample, one reading, the workload's TTFT bound alone: :func:`autotune.orchestrate.
  capacity.replay_at_capacity` with one replay), among the configs that keep up there (TTFT
  met, the arrivals kept up with, the rate sustained) and meet the workload's own bound on the
  other tail, which the bound leaves in place (:func:`serving`; for an ITL bound that is the
  keep-up itself): at the geometric midpoint of the lowest p99 and the throughput-best's.
  The two sides then have equal SLO margins (the capacity search's margin is the log of a p99
  over its bound, and its verdict is on the p99 as read), so the config with the shortest
  tail serves the rate and the throughput-best does not, each by the widest margin one bound
  can give both. A config over the other tail's bound cannot serve the rate whatever this
  one's, so it does not set the lowest: long chunks give the shortest TTFTs and, loaded, ITL
  stalls past the workload's ITL bound (Llama-70B code at its rate to serve: the lowest p99
  TTFT, 1.59 s, is an 8192-token config's at 564 ms p99 ITL against a 200 ms bound; every
  config within 200 ms reads 1.84 s or more, so a TTFT bound set from 1.59 s left none
  serving the rate).
- **Only a bound clear of the replay noise binds.** Every config is read at the rate a second
  time, on another replay (:func:`replay_noise`, per tail: one reading's p99 noise from the
  pairs of the configs whose p99 lies between the two the bound would split), and a tail's
  bound is a candidate only where half the log gap between its lowest p99 and the
  throughput-best's is at least :data:`SEPARATION_Z` noise sds: one reading of either then
  lands on its own side 95% of the time. Closer than that (Kimi DSpark code's p99 ITLs at
  97.39 and 97.45 ms; Llama-70B code's at 157.4 and 160.1 ms), which config serves the rate
  would be decided by replay luck, the oracle's and the search's alike.
- **One tail binds** (:func:`choose`). Where both tails have a candidate, the one whose
  separation is the larger in noise sds (half the log gap over the noise; with no noise, the
  larger log gap) is bound and the other keeps the workload's own bound: bounding both can
  leave no config serving the rate (the short-ITL configs are the long-TTFT ones). Where
  neither has one, the unit keeps the workload's own bounds at that rate.
- **What one reading can tell.** Each at-rate reading keeps its p99 ITL's order-statistic
  interval (:meth:`autotune.slo.Slo.verdict`), and the record the two ends the ITL bound would
  lie between (the lowest interval top, the throughput-best's interval bottom). They are not
  used to set a bound: at the light rates where the window alone sets the tail (a few dozen
  requests in the window) the interval spans from the step time to the longest gap (Kimi
  DSpark, chat-low, at 0.073x: 25.6 to 60.2 ms for every window-1 config), wider than any
  difference between configs; whether the throughput-best serves the rate is read from the
  oracle's repeated capacity readings under the bound, not from this one reading.

A unit where no config meets the workload's SLO at any rate (no rate to set), none keeps up at
the rate, or none's capacity reading serves the rate under the bound is scored by capacity at
any rate and counted apart (``out_of_reach``).

A unit's ``binding`` record (:class:`bench.regret.records.BindingRecord`) keeps the rate, the
tail bound and its bound, the p99s of both tails it was chosen from with each tail's noise,
and the throughput-best config with whether it serves the rate within the binding SLO (its
oracle readings mostly do): the units where it does not are those where the SLO changes the
winner (:func:`changed_winner`), counted in the output per world and over all (:func:`count`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal, NamedTuple, TypeVar

from bench.regret.reading import Reading
from bench.regret.records import BindingCount, BindingRecord, Detail

#: A config (a TrialConfig; anything hashable here).
K = TypeVar("K", bound=Hashable)

RULE = ("rate to serve = the median capacity (under the workload's own SLO) of the configs "
        "meeting it at some rate; for each tail (p99 ITL, p99 TTFT) a candidate bound = the "
        "geometric midpoint of the lowest p99 at that rate and the throughput-best config's, "
        "among the configs keeping up there (one capacity-search reading at the rate, the "
        "workload's TTFT bound) and meeting the workload's own bound on the other tail, when "
        "the two lie further apart than one reading's noise lets a bound separate (a second "
        "reading of every config at the rate measures it); the tail separated by more noise "
        "sds is bound, the other keeps the workload's own bound; neither separated: the "
        "workload's own bounds")

#: One reading lands on its side of a bound at the midpoint with this chance at least (one
#: sided, its p99's replay noise log-normal): 95%.
SEPARATION_Z = NormalDist().inv_cdf(0.95)

#: The SLO's two tails, as a binding names them.
TailName = Literal["itl", "ttft"]
TAILS: tuple[TailName, ...] = ("itl", "ttft")


class Tail(NamedTuple):
    """A config's p99s (ms) at the rate to serve: its p99 ITL with the ITL's order-statistic
    interval, and its p99 TTFT."""

    p99: float
    low: float
    high: float
    ttft_p99: float

    def of(self, tail: TailName) -> float:
        """The p99 of ``tail``."""
        return self.p99 if tail == "itl" else self.ttft_p99


@dataclass(frozen=True)
class Choice:
    """The bound a unit is held to (:func:`choose`): the tail bound (None: the workload's own
    bounds both) and its bound in ms, with each tail's replay noise (None: not read) and the
    workload's own bounds it was chosen under (ms; None: not given, no config left out)."""

    tail: TailName | None
    bound: float | None
    noise: Mapping[TailName, float | None]
    own: Mapping[TailName, float] | None = None

    def of(self, tail: TailName) -> float | None:
        """The bound set on ``tail`` (None: the workload's own)."""
        return self.bound if self.tail == tail else None


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
                 throughput_best: K, tail: TailName = "itl") -> float | None:
    """One reading's p99 noise of ``tail`` at the rate (sd of its log) where a bound would
    lie: from two readings of each config on different replays, over the configs whose first
    p99 lies between the lowest and the throughput-best's (all kept up when fewer than three
    do; a chunk stall's p99 is near-deterministic, a plain step's is not, so the noise away
    from the bound says little of it there): sqrt(mean(log ratio²) / 2). None with no config
    kept up in both readings."""
    pairs = {k: (a.of(tail), b.of(tail)) for k, a in first.items()
             if a is not None and (b := second.get(k)) is not None
             and a.of(tail) > 0 and b.of(tail) > 0}
    if not pairs:
        return None
    mine = first.get(throughput_best)
    lowest = min(a for a, _ in pairs.values())
    band = [p for p in pairs.values() if mine is not None and lowest <= p[0] <= mine.of(tail)]
    used = band if len(band) >= 3 else list(pairs.values())
    return math.sqrt(statistics.fmean(math.log(a / b) ** 2 for a, b in used) / 2.0)


def serving(at_rate: Mapping[K, Tail | None], tail: TailName,
            own: Mapping[TailName, float] | None) -> dict[K, Tail | None]:
    """``at_rate`` as a bound on ``tail`` sees it: a config kept up there counts only when it
    also meets the workload's own bound on the other tail (``own``, ms; None: no such bound),
    which that bound leaves in place: one over it cannot serve the rate whatever ``tail``'s
    bound, so its p99 of ``tail`` must not set the lowest. Keeping up already meets the own
    TTFT bound, so for an ITL bound this is the keep-up as read."""
    other: TailName = "ttft" if tail == "itl" else "itl"
    limit = math.inf if own is None else own.get(other, math.inf)
    return {k: t if t is not None and t.of(other) <= limit else None
            for k, t in at_rate.items()}


def _ends(at_rate: Mapping[K, Tail | None], throughput_best: K,
          tail: TailName) -> tuple[float, float] | None:
    """The lowest p99 of ``tail`` among the configs keeping up at the rate and the
    throughput-best's; None when none keeps up or the throughput-best does not (or its p99
    was not read)."""
    kept = [p for t in at_rate.values() if t is not None and math.isfinite(p := t.of(tail))]
    mine = at_rate.get(throughput_best)
    if not kept or mine is None or not math.isfinite(mine.of(tail)):
        return None
    return min(kept), mine.of(tail)


def bound(at_rate: Mapping[K, Tail | None], throughput_best: K,
          noise: float = 0.0, tail: TailName = "itl") -> float | None:
    """A candidate bound (ms) on ``tail`` from the configs' p99s of it at the rate to serve
    (``at_rate``: None for a config that does not keep up there): the geometric midpoint of
    the lowest and the throughput-best's. None when no config keeps up, when the
    throughput-best does not keep up (it fails the rate whatever the bound), or its p99 is not
    above the lowest by more than ``noise`` (one reading's, sd of the log) lets a bound between
    them separate: each side's margin, half the log gap, must be :data:`SEPARATION_Z` noise
    sds."""
    ends = _ends(at_rate, throughput_best, tail)
    if ends is None:
        return None
    lowest, mine = ends
    if mine <= lowest or math.log(mine / lowest) / 2.0 < SEPARATION_Z * noise:
        return None
    return math.sqrt(lowest * mine)


def separation(at_rate: Mapping[K, Tail | None], throughput_best: K, tail: TailName,
               noise: float | None) -> tuple[float, float]:
    """How far a bound on ``tail`` separates the throughput-best from the shortest tail, as
    :func:`choose` ranks the tails: (half the log gap in noise sds, infinite with no noise;
    the half log gap), so with no noise the larger log gap wins; (-inf, -inf) with no gap."""
    ends = _ends(at_rate, throughput_best, tail)
    if ends is None or ends[1] <= ends[0]:
        return -math.inf, -math.inf
    half = math.log(ends[1] / ends[0]) / 2.0
    return (half / noise if noise else math.inf), half


def choose(first: Mapping[K, Tail | None], second: Mapping[K, Tail | None],
           throughput_best: K, own: Mapping[TailName, float] | None = None) -> Choice:
    """The bound a unit is held to, from every config's two readings at the rate to serve:
    each tail's candidate (:func:`bound`, clear of that tail's :func:`replay_noise`, among the
    configs :func:`serving` it under the workload's ``own`` bound on the other tail), and of
    two candidates the one whose separation is the larger in noise sds (:func:`separation`).
    One tail at most: bounding both can leave no config serving the rate."""
    seen = {t: serving(first, t, own) for t in TAILS}
    noise = {t: replay_noise(seen[t], second, throughput_best, t) for t in TAILS}
    candidates = {t: b for t in TAILS
                  if (b := bound(seen[t], throughput_best, noise[t] or 0.0, t)) is not None}
    if not candidates:
        return Choice(None, None, noise, own)
    tail = max(candidates, key=lambda t: separation(seen[t], throughput_best, t, noise[t]))
    return Choice(tail, candidates[tail], noise, own)


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


def _ms(value: float | None) -> float | None:
    """A p99 or bound as recorded (ms, three decimals; None kept)."""
    return None if value is None else round(value, 3)


def _lowest(at_rate: Mapping[str, Tail | None], tail: TailName) -> float | None:
    """The lowest p99 of ``tail`` of the configs counted in ``at_rate`` (None: none is)."""
    kept = [t.of(tail) for t in at_rate.values() if t is not None]
    return min(kept) if kept else None


def record(world: str, rate: float | None, choice: Choice, at_rate: Mapping[str, Tail | None],
           throughput_best: str, serves: bool, reachable: bool = True) -> BindingRecord:
    """A unit's binding record: ``rate`` (× the sample's rate; None: out of reach), the bound
    chosen (``choice``: which tail, its bound, each tail's noise), both tails' p99s at the rate
    (by config, None: not keeping up), the throughput-best config and whether it serves the
    rate within the binding SLO."""
    kept = [t for t in at_rate.values() if t is not None]
    mine = at_rate.get(throughput_best)
    itl, ttft = choice.noise.get("itl"), choice.noise.get("ttft")
    by_itl, by_ttft = (_lowest(serving(at_rate, t, choice.own), t) for t in TAILS)
    return {"world": world, "rule": RULE,
            "rate_to_serve": None if rate is None else round(rate, 6),
            "bound_tail": choice.tail,
            "itl_p99_ms": _ms(choice.of("itl")), "ttft_p99_ms": _ms(choice.of("ttft")),
            "configs_keeping_up": len(kept), "configs": len(at_rate),
            "itl_p99_at_rate_best_ms": _ms(by_itl),
            "itl_p99_at_rate_median_ms": (_ms(float(statistics.median(t.p99 for t in kept)))
                                          if kept else None),
            "itl_p99_at_rate_throughput_best_ms": None if mine is None else _ms(mine.p99),
            "itl_p99_interval_shortest_top_ms": _ms(min(t.high for t in kept)) if kept else None,
            "itl_p99_interval_throughput_best_bottom_ms": None if mine is None else _ms(mine.low),
            "itl_p99_replay_noise": None if itl is None else round(itl, 5),
            "ttft_p99_at_rate_best_ms": _ms(by_ttft),
            "ttft_p99_at_rate_throughput_best_ms": None if mine is None else _ms(mine.ttft_p99),
            "ttft_p99_replay_noise": None if ttft is None else round(ttft, 5),
            "throughput_best": throughput_best, "throughput_best_serves": serves,
            "reachable": reachable}
