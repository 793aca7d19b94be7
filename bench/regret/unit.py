"""One unit of the benchmark, a (world, workload): its oracle, then every method over every seed
scored against it (:func:`bench_unit`); the simulated units in parallel processes, the
real-engine ones one at a time after them (:func:`map_units`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from bench.regret.binding import Tail, capacity, choose, rate_to_serve, record
from bench.regret.economy import gpu_h_to, no_rate_trials, trial_gpu_h, within_budget
from bench.regret.engine_reader import EngineReader
from bench.regret.methods import Trials, race, recommended, run_grid, run_searcher, runs_to
from bench.regret.oracle import Table
from bench.regret.reader import Reader
from bench.regret.records import BindingRecord, Detail, RunRow
from bench.regret.report import median
from bench.regret.settings import BUDGET, EQUAL_BUDGET, Settings
from bench.regret.sim_reader import SimReader
from bench.regret.workloads import Workload
from bench.regret.worlds import World

if TYPE_CHECKING:
    from autotune.types import TrialConfig


@dataclass(frozen=True)
class UnitResult:
    """A finished unit: its detail (the JSON of ``--detail``), the lines it prints, and what it
    took."""

    world: str
    workload: str
    detail: Detail
    seconds: float
    measured: int
    lines: list[str]
    seeds: int


def bench_unit(world: World, wl: Workload | None, settings: Settings) -> UnitResult:
    """The oracle table of one (world, workload), then every method over every seed on it
    (a real-engine world has its own workload: ``wl`` None)."""
    t0 = time.perf_counter()
    reader: Reader
    if world.kind == "engine":
        reader, seeds = EngineReader(world, settings), settings.engine_seeds
    else:
        assert wl is not None
        sim = SimReader(world, wl, settings)
        if settings.binding_slo:
            return _binding(sim, settings, t0)
        reader, seeds = sim, settings.seeds
    return score_methods(reader, seeds, settings.methods, t0)


def set_binding(reader: SimReader) -> tuple[Table[TrialConfig], BindingRecord]:
    """Put ``reader`` under its unit's binding SLO (bench/regret/binding.py) and return the
    oracle table it is scored by, with the unit's ``binding`` record: the oracle under the
    workload's own SLO (capacity at any rate) gives the throughput-best config and the configs'
    capacities, which set the rate to serve; the configs' p99 ITLs and TTFTs at that rate, read
    twice, choose the tail bound and its bound (:func:`choose`)."""
    own = reader.tables(1)[0]
    throughput_best, _ = own.oracle()
    rate = rate_to_serve([capacity(own.readings[c]) for c in own.readings
                          if own.meets_somewhere(c)])
    at: dict[str, Tail | None] = {}
    again: dict[str, Tail | None] = {}
    if rate is not None:
        reader.serve_at(rate)
        at = {c.short(): reader.at_rate(c) for c in reader.configs()}
        again = {c.short(): reader.at_rate(c, 1) for c in reader.configs()}
    ttft, itl = reader.wl.slo  # the workload's own bounds, in the world's time
    choice = choose(at, again, throughput_best.short(), {"ttft": ttft, "itl": itl})
    if choice.tail is not None and choice.bound is not None:
        reader.hold_to(choice.tail, choice.bound)
    if rate is None or not any(v is not None for v in at.values()):
        reader.reachable = False  # out of reach: scored by capacity at any rate
    table = reader.tables(1)[0]
    if reader.bound and not any(table.mostly_feasible(c) for c in table.readings):
        reader.reachable = False  # no capacity reading serves the rate: capacity at any rate
        table = reader.tables(1)[0]
    serves = Table(table.readings, binding=True).mostly_feasible(throughput_best)
    return table, record(reader.world.name, rate, choice, at, throughput_best.short(), serves,
                         reader.bound)


def _binding(reader: SimReader, settings: Settings, t0: float) -> UnitResult:
    """A unit under its binding SLO (:func:`set_binding`), with its ``binding`` record."""
    _, binding = set_binding(reader)
    res = score_methods(reader, settings.seeds, settings.methods, t0)
    res.detail["binding"] = binding
    res.lines.insert(1, _binding_line(res.detail["binding"]))
    return replace(res, seconds=time.perf_counter() - t0)


def _percent(sd: float | None) -> str:
    """A log sd as a percentage ("?" when not read)."""
    return "?" if sd is None else f"{math.expm1(sd):.1%}"


def _ms(value: float | None) -> str:
    """A p99 or bound in ms, one decimal ("?" when not recorded)."""
    return "?" if value is None else f"{value:.1f} ms"


def _itl_part(b: BindingRecord) -> str:
    """The p99 ITLs at the rate a unit's binding was chosen from."""
    mine = b.get("itl_p99_at_rate_throughput_best_ms")
    return (f"p99 ITL lowest {_ms(b['itl_p99_at_rate_best_ms'])}, interval top "
            f"{_ms(b.get('itl_p99_interval_shortest_top_ms'))}; throughput-best "
            + (f"{_ms(mine)}, interval bottom "
               f"{_ms(b.get('itl_p99_interval_throughput_best_bottom_ms'))}"
               if mine is not None else "falls behind")
            + f"; one reading's noise {_percent(b.get('itl_p99_replay_noise'))}")


def _ttft_part(b: BindingRecord) -> str:
    """The p99 TTFTs at the rate a unit's binding was chosen from (a record made before TTFT
    could be bound has none)."""
    if "ttft_p99_at_rate_best_ms" not in b:
        return "p99 TTFT not read"
    return (f"p99 TTFT lowest {_ms(b.get('ttft_p99_at_rate_best_ms'))}; throughput-best "
            f"{_ms(b.get('ttft_p99_at_rate_throughput_best_ms'))}; one reading's noise "
            f"{_percent(b.get('ttft_p99_replay_noise'))}")


def _bound_part(b: BindingRecord) -> str:
    """Which tail a unit is bound on and its bound (an old record's bound is on ITL)."""
    tail = b.get("bound_tail", "itl" if b["itl_p99_ms"] is not None else None)
    if tail == "ttft":
        return f"bound: p99 TTFT {_ms(b.get('ttft_p99_ms'))} (p99 ITL: the workload's own)"
    if tail == "itl":
        return f"bound: p99 ITL {_ms(b['itl_p99_ms'])} (p99 TTFT: the workload's own)"
    return "bound: neither tail separates, the workload's own bounds"


def _binding_line(b: BindingRecord) -> str:
    """A unit's binding SLO, one line."""
    if b["rate_to_serve"] is None:
        return "  binding SLO: no config meets the workload's SLO at any rate: its own kept"
    head = (f"  binding: rate to serve {b['rate_to_serve']:.3g}x the sample's; "
            f"{b['configs_keeping_up']} of {b['configs']} configs keep up there")
    if not b["configs_keeping_up"]:
        return head + ": out of reach, scored by capacity at any rate"
    return (head + f" ({_itl_part(b)}; {_ttft_part(b)}); {_bound_part(b)}; "
            f"throughput-best {b['throughput_best']} "
            + ("serves" if b["throughput_best_serves"] else "FAILS") + " the rate"
            + ("" if b.get("reachable", True) else "; no config's capacity reading serves "
               "the rate: scored by capacity at any rate"))


def score_methods(reader: Reader, seeds: int, methods: Sequence[str], t0: float) -> UnitResult:
    """Every method over ``seeds`` seeds, each seed scored on its oracle of ``reader``'s
    (world, workload): ``reader.tables(seeds)``, one table per seed (the simulated worlds share
    one; a real-engine world holds out the seed's own readings)."""
    world, wl = reader.world, reader.wl
    tables = reader.tables(seeds)
    pooled = Table({c: list({id(r): r for t in tables for r in t.readings[c]}.values())
                    for c in tables[0].readings}, binding=tables[0].binding)  # every reading once
    best_c, best_v = pooled.oracle()
    default = reader.policy.baseline.config()
    runs: dict[str, list[RunRow]] = {}
    detail: Detail = {
        "slo": {"ttft_p99_ms": wl.slo[0], "itl_p99_ms": wl.slo[1],
                "dilation": list(reader.dilation)},
        "oracle": best_c.short(), "oracle_value": best_v,
        "oracle_feasible": pooled.mostly_feasible(best_c),
        "default_regret": median([t.regret(default) for t in tables]),
        "default_meets_slo": pooled.mostly_feasible(default), "runs": runs,
        "workload": wl.name}
    lines = [f"{world.name} {wl.name}: oracle {best_c.short()} = {best_v:.3f}; default regret "
             f"{detail['default_regret']:.2%} (meets SLO: {detail['default_meets_slo']})"]
    budgets: dict[int, float] = {}  # guided's GPU-hours per seed: the equal budget
    for method in methods:
        rows: list[RunRow] = []
        for seed, table in enumerate(tables):
            if method == "grid":
                run = run_grid(reader, seed)
                head, at6 = run.trials, run.trials[:EQUAL_BUDGET]
            else:
                long = method in ("tpe", "random")
                run = run_searcher(reader, method, seed, reader.long_run if long else BUDGET)
                head = run.trials[:BUDGET] if long else run.trials
                at6 = run_searcher(reader, method, seed, EQUAL_BUDGET).trials
            chosen = recommended(head)
            se = table.regret_se(chosen)
            row: RunRow = {"regret": table.regret(chosen), "runs": len(head),
                           "regret_se": round(se, 4) if se is not None else None,
                           "regret_at_6": table.regret(recommended(at6)),
                           "to_2pct": runs_to(table, run.trials, 0.02),
                           "chosen": chosen.short() if chosen else None,
                           "stop": run.stop_reason,
                           "trials": [c.short() for c, _ in head], **race(head),
                           "no_rate_trials": no_rate_trials([c for c, _ in head],
                                                            table.meets_somewhere, default)}
            _economy(row, table, run.trials, len(head),
                     budgets.get(seed) if method != "guided" else None)
            if method == "guided" and "gpu_h" in row:
                budgets[seed] = row["gpu_h"]
            if any(t is not tables[0] for t in tables):  # the seed's own oracle and default
                oracle_c, oracle_v = table.oracle()
                row.update({"oracle": oracle_c.short(), "oracle_value": oracle_v,
                            "default_regret": table.regret(default),
                            "default_meets_slo": table.mostly_feasible(default)})
            rows.append(row)
        runs[method] = rows
        lines.append(f"  {method:7s} regret median {median([r['regret'] for r in rows]):.2%} "
                     f"max {max(r['regret'] for r in rows):.2%} at6 "
                     f"{median([r['regret_at_6'] for r in rows]):.2%} runs "
                     f"{median([r['runs'] for r in rows]):.0f} to2% "
                     f"{[r['to_2pct'] for r in rows]}")
        lines.append(_economy_line(rows))
    if "guided" in runs:
        g = runs["guided"][0]
        lines.append(f"  guided seed 0 ran {g['trials']} -> {g['chosen']} ({g['stop']})")
    return UnitResult(world.name, wl.name, detail, time.perf_counter() - t0, reader.measured,
                      lines, seeds)


def _economy(row: RunRow, table: Table[TrialConfig], trials: Trials, head: int,
             budget: float | None) -> None:
    """Set ``row``'s cost keys (bench/regret/economy.py): its first ``head`` trials'
    GPU-hours, the regret when it stops at ``budget`` GPU-hours (guided's on the seed; None:
    the row is guided's, whose budget is its own spend), the GPU-hours to 1% over all its
    ``trials``; none when a reading lacks its cost."""
    spent = trial_gpu_h(trials)
    if spent is None:
        return
    row["trial_gpu_h"] = [round(g, 6) for g in spent[:head]]
    row["gpu_h"] = round(sum(spent[:head]), 6)
    k = head if budget is None else within_budget(spent, budget)
    row["regret_at_gpu_h"] = table.regret(recommended(trials[:k]))
    row["gpu_h_to_1pct"] = gpu_h_to(spent, lambda k: table.regret(recommended(trials[:k])))


def _economy_line(rows: Sequence[RunRow]) -> str:
    """A method's GPU-hours, regret at guided's GPU-hours and no-rate trials, one line."""
    no_rate = median([r["no_rate_trials"] for r in rows if "no_rate_trials" in r] or [0])
    costed = [r for r in rows if "gpu_h" in r]
    if not costed:
        return f"          no-rate trials {no_rate:g} (the readings carry no cost)"
    at = [a for r in costed if (a := r.get("regret_at_gpu_h")) is not None]
    return (f"          GPU-h median {median([r['gpu_h'] for r in costed]):.3g} at guided's "
            f"GPU-h {median(at) if at else math.nan:.2%} GPU-h to 1% "
            f"{median([r['gpu_h_to_1pct'] for r in costed]):.3g} no-rate trials {no_rate:g}")


def map_units(jobs: int, settings: Settings,
              units: Sequence[tuple[World, Workload | None]]) -> Iterator[UnitResult]:
    """Simulated units in ``jobs`` processes, then the real-engine ones one at a time in this
    process (two servers side by side would measure each other)."""
    sim = [(w, wl) for w, wl in units if w.kind != "engine"]
    engine = [(w, wl) for w, wl in units if w.kind == "engine"]
    if jobs <= 1:
        yield from (bench_unit(w, wl, settings) for w, wl in sim)
    else:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(bench_unit, w, wl, settings) for w, wl in sim]
            for f in as_completed(futures):
                yield f.result()
    yield from (bench_unit(w, wl, settings) for w, wl in engine)
