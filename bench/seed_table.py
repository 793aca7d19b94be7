"""Reproduce the seed's speedup table through the simulator (issue 3 item 3).

Replays GSM8K, MATH-500, AIME-24, HumanEval (prompts and lengths from ../shared/data/prompts),
LiveCodeBench and SPEED-Bench Coding (length models, docs/simulator.md) one request at a time
(batch size 1, greedy) at n=3 and n=7 with each drafter and without speculation, on both Kimi
profiles; speedup = output tokens/s with the drafter / without.

    .venv/bin/python bench/seed_table.py            # table with published numbers and errors
    .venv/bin/python bench/seed_table.py --json     # the seed's JSON shape, nothing else
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def shared_data() -> Path:
    env = os.environ.get("AUTOTUNE_SHARED_DATA")
    return Path(env) if env else (REPO / ".." / "shared" / "data").resolve()


def main(argv: list[str] | None = None) -> int:
    from autotune.backends.sim import seed_benchmark_requests, seed_table, seed_table_errors
    from autotune.backends.sim._benchmarks import DEFAULT_SEEDS, PER_BENCHMARK

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON table")
    parser.add_argument("--data", type=Path, default=shared_data(), help="shared data folder")
    parser.add_argument("--per-benchmark", type=int, default=PER_BENCHMARK,
                        help=f"requests per benchmark (default {PER_BENCHMARK}; AIME-24 has 30, "
                             "HumanEval 164)")
    parser.add_argument("--seeds", default=",".join(map(str, DEFAULT_SEEDS)),
                        help="simulator seeds averaged per cell (default %(default)s)")
    args = parser.parse_args(argv)

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
