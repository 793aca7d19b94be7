"""Reproduce the seed's speedup table through the simulator.

Replays GSM8K, MATH-500, AIME-24, HumanEval (prompts and lengths from the shared data's
prompts/), LiveCodeBench and SPEED-Bench Coding (length models, docs/simulator.md) one request
at a time (batch size 1, greedy) at n=3 and n=7 with each drafter and without speculation, on
both Kimi profiles; speedup = output tokens/s with the drafter / without
(bench/calibration/speedup.py), against the published numbers (autotune/report/seed.py).

    .venv/bin/python -m bench.calibration.seed_table            # table, published, errors
    .venv/bin/python -m bench.calibration.seed_table --json     # the seed's JSON shape only
    .venv/bin/python -m bench.calibration.seed_table --loo --json   # leave-one-out: refit
                                                    # without each published number, predict it

The leave-one-out run fits two parameterisations of the acceptance priors (the shipped exact
fit, 10 parameters per model, and the reduced shared-slope fit, 6) with each published number
held out in turn (bench/calibration/loo.py); ``loo`` is the shared fit's held-out errors,
``exact_fit`` the same for the shipped one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from autotune.backends.sim import PER_BENCHMARK, seed_benchmark_requests
from bench.calibration.loo import leave_one_out_report, print_loo
from bench.calibration.speedup import DEFAULT_SEEDS, seed_table, seed_table_errors
from bench.paths import shared_data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.calibration.seed_table",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON table")
    parser.add_argument("--data", type=Path, default=shared_data(), help="shared data folder")
    parser.add_argument("--per-benchmark", type=int, default=PER_BENCHMARK,
                        help=f"requests per benchmark (default {PER_BENCHMARK}; AIME-24 has 30, "
                             "HumanEval 164)")
    parser.add_argument("--seeds", default=",".join(map(str, DEFAULT_SEEDS)),
                        help="simulator seeds averaged per cell (default %(default)s)")
    parser.add_argument("--loo", action="store_true",
                        help="leave-one-out: predict each published number from the others")
    parser.add_argument("--simulate", action="store_true",
                        help="with --loo: correct the analytic model by the simulator/analytic "
                             "ratio of every cell at the shipped priors (slow)")
    args = parser.parse_args(argv)
    if args.loo:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        report = leave_one_out_report(seed_benchmark_requests(args.data, args.per_benchmark),
                                      seeds, simulate=args.simulate)
        if args.json:
            print(json.dumps(report))
        else:
            print_loo(report)
        return 0 if report["loo"]["max_error"] <= 0.05 else 1

    t0 = time.perf_counter()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    benchmarks = seed_benchmark_requests(args.data, args.per_benchmark)
    table = seed_table(benchmarks, seeds=seeds)
    rounded = {m: {d: {c: {n: round(v, 2) for n, v in w.items()} for c, w in cells.items()}
                   for d, cells in drafters.items()} for m, drafters in table.items()}
    if args.json:
        print(json.dumps(rounded))
        return 0
    errors = seed_table_errors(table)
    print(f"{'cell':48s} {'published':>9s} {'sim':>7s} {'error':>7s}")
    for cell, published, sim, err in errors:
        print(f"{cell:48s} {published:9.2f} {sim:7.3f} {100 * err:+6.2f}%")
    worst = max(errors, key=lambda e: abs(e[3]))
    print(f"worst relative error: {100 * worst[3]:+.2f}% ({worst[0]}); "
          f"{sum(len(r) for r in benchmarks.values())} requests per config, seeds {seeds}, "
          f"{time.perf_counter() - t0:.1f} s wall")
    print(json.dumps(rounded))
    return 0 if abs(worst[3]) <= 0.03 else 1


if __name__ == "__main__":
    sys.exit(main())
