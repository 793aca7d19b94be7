"""The binding-SLO mode (``python -m bench.regret --binding-slo``): a config's value is whether
it serves the workload's rate to serve within the SLO, and among those that do, its capacity
(:class:`bench.regret.oracle.Table` with ``binding``); not its capacity at any rate.

The p99 ITL bound of each (world, workload) is set by one rule (:func:`bound`) from the configs'
p99 ITLs at the rate to serve: every config of the space (the baseline too) replays the
workload's requests once as they arrive (one replay, no capacity search), in the world's own
time; among the configs that keep up with the arrivals there (their p99 TTFT meets the
workload's bound), the bound lies :data:`POSITION` of the way from the best (lowest) p99 ITL to
their median. So fewer than half of those configs meet it at the rate, and those that do keep
their steps short there. The p99 TTFT bound stays the workload's. Where no config keeps up with
the arrivals, the rate is out of reach whatever the ITL bound: the unit keeps the workload's own
SLO, is scored as without ``--binding-slo``, and is counted apart (``out_of_reach``).

Unloaded latencies (one request in flight) do not separate the configs where it matters: on the
Kimi-K2.6 DSpark world, chat-low, 100 requests, every config's unloaded p99 ITL was 22.3-25.0 ms,
set by the window alone, and under a bound between them (23.2 ms) every config's capacity
reading met it at no rate above 1/64 of the rate to serve: no config served the rate. The rate
to serve loads the batch, which is what separates them.

A unit's ``binding`` record (:class:`bench.regret.records.BindingRecord`) keeps the bound, the
p99 ITLs it was set from, and the throughput-best config (the oracle of the same world and
workload under the workload's own SLO, scored by capacity at any rate) with whether it serves
the rate within the binding SLO: the units where it does not are those where the SLO changes
the winner (:func:`changed_winner`), counted in the output.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from bench.regret.records import BindingRecord, Detail

#: Where the bound lies between the best p99 ITL at the rate (0) and the configs' median (1).
POSITION = 0.5
RULE = (f"p99 ITL bound = best + {POSITION:g} x (median - best) of the p99 ITLs at the rate to "
        f"serve (one replay of the workload as it arrives, in the world's time) of the configs "
        f"whose p99 TTFT there meets the workload's bound")


def keeping_up(at_rate: Sequence[tuple[float, float]], ttft_bound_ms: float) -> list[float]:
    """The p99 ITLs of the configs whose p99 TTFT at the rate (``at_rate``: per config, its
    p99 ITL and p99 TTFT in ms) meets ``ttft_bound_ms``: those that keep up with the arrivals."""
    return [itl for itl, ttft in at_rate if ttft <= ttft_bound_ms]


def bound(at_rate: Sequence[tuple[float, float]], ttft_bound_ms: float) -> float | None:
    """The binding p99 ITL bound (ms) from the configs' p99 ITLs and TTFTs at the rate
    (:data:`RULE`); None when no config keeps up with the arrivals there."""
    itl_ms = keeping_up(at_rate, ttft_bound_ms)
    if not itl_ms:
        return None
    best, mid = min(itl_ms), float(statistics.median(itl_ms))
    return best + POSITION * (mid - best)


def changed_winner(units: Sequence[Detail]) -> list[str]:
    """The units (``world workload``) whose throughput-best config fails the binding SLO at the
    rate to serve; the binding record's world is the unit's."""
    return [f"{b['world']} {u['workload']}" for u in units
            if (b := u.get("binding")) is not None and b["itl_p99_ms"] is not None
            and b.get("reachable", True) and not b["throughput_best_serves"]]


def out_of_reach(units: Sequence[Detail]) -> list[str]:
    """The units where no config kept up with the arrivals at the rate (no binding bound), or
    no config's capacity reading served the rate under the bound (scored by capacity at any
    rate)."""
    return [f"{b['world']} {u['workload']}" for u in units
            if (b := u.get("binding")) is not None
            and (b["itl_p99_ms"] is None or not b.get("reachable", True))]


def record(world: str, itl_bound: float | None, kept: Sequence[float], configs: int,
           throughput_best: str, serves: bool, reachable: bool = True) -> BindingRecord:
    """A unit's binding record (``kept``: the p99 ITLs at the rate of the configs that kept
    up, of ``configs``)."""
    return {"world": world, "rule": RULE,
            "itl_p99_ms": None if itl_bound is None else round(itl_bound, 3),
            "configs_keeping_up": len(kept), "configs": configs,
            "itl_p99_at_rate_best_ms": round(min(kept), 3) if kept else None,
            "itl_p99_at_rate_median_ms": (round(float(statistics.median(kept)), 3) if kept
                                          else None),
            "throughput_best": throughput_best, "throughput_best_serves": serves,
            "reachable": reachable}
