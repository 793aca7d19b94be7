"""The binding-SLO mode (``python -m bench.regret --binding-slo``): a config's value is whether
it serves the workload's rate to serve within the SLO, and among those that do, its capacity
(:class:`bench.regret.oracle.Table` with ``binding``); not its capacity at any rate.

The p99 ITL bound of each (world, workload) is set by one rule (:func:`bound`) from the configs'
unloaded latencies: every config of the space (the baseline too) serves the workload's requests
one at a time (closed loop, one in flight: no queueing, no batching), in the world's own time;
the bound lies :data:`POSITION` of the way from the best (lowest) of their p99 ITLs to their
median. So about half the configs cannot meet it at any rate, and the ones that can must keep
their batches' steps short at the rate to serve. The p99 TTFT bound stays the workload's.

A unit's ``binding`` record (:class:`bench.regret.records.BindingRecord`) keeps the bound, the
unloaded p99 ITLs it was set from, and the throughput-best config (the oracle of the same world
and workload under the workload's own SLO, scored by capacity at any rate) with whether it
serves the rate within the binding SLO: the units where it does not are those where the SLO
changes the winner (:func:`changed_winner`), counted in the output.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from bench.regret.records import BindingRecord, Detail

#: Where the bound lies between the best unloaded p99 ITL (0) and the configs' median (1).
POSITION = 0.5
RULE = (f"p99 ITL bound = best + {POSITION:g} x (median - best) of the configs' unloaded p99 "
        f"ITLs (closed loop, one request in flight, in the world's time)")


def bound(unloaded_itl_ms: Sequence[float]) -> float:
    """The binding p99 ITL bound (ms) from the configs' unloaded p99 ITLs (:data:`RULE`)."""
    best, mid = min(unloaded_itl_ms), float(statistics.median(unloaded_itl_ms))
    return best + POSITION * (mid - best)


def changed_winner(units: Sequence[Detail]) -> list[str]:
    """The units (``world workload``) whose throughput-best config fails the binding SLO at the
    rate to serve; the binding record's world is the unit's."""
    return [f"{b['world']} {u['workload']}" for u in units
            if (b := u.get("binding")) is not None and not b["throughput_best_serves"]]


def record(world: str, itl_bound: float, unloaded: Sequence[float], throughput_best: str,
           serves: bool) -> BindingRecord:
    return {"world": world, "rule": RULE, "itl_p99_ms": round(itl_bound, 3),
            "unloaded_itl_p99_best_ms": round(min(unloaded), 3),
            "unloaded_itl_p99_median_ms": round(float(statistics.median(unloaded)), 3),
            "throughput_best": throughput_best, "throughput_best_serves": serves}
