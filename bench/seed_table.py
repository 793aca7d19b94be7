"""Reproduce the seed's speedup table through the simulator (issue 3 item 3).

Replays GSM8K, MATH-500, AIME-24, HumanEval (prompts and lengths from ../shared/data/prompts),
LiveCodeBench and SPEED-Bench Coding (length models, docs/simulator.md) one request at a time
(batch size 1, greedy) at n=3 and n=7 with each drafter and without speculation, on both Kimi
profiles; speedup = output tokens/s with the drafter / without.

    .venv/bin/python bench/seed_table.py            # table with published numbers and errors
    .venv/bin/python bench/seed_table.py --json     # the seed's JSON shape, nothing else
    .venv/bin/python bench/seed_table.py --loo --json   # leave-one-out: refit without each
                                                        # published number, predict it

The leave-one-out run fits two parameterisations of the acceptance priors (the shipped exact
fit, 10 parameters per model, and the reduced shared-slope fit, 6) with each published number
held out in turn (autotune/backends/sim/_loo.py); ``loo`` is the shared fit's held-out errors,
``exact_fit`` the same for the shipped one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

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


def leave_one_out_report(benchmarks: dict[str, Any], seeds: list[int],
                         simulate: bool = False) -> dict[str, Any]:
    """Both fits' in-sample and held-out errors over every published number (the analytic
    batch-1 model, corrected by the simulator when ``simulate``)."""
    from autotune.backends.sim._benchmarks import MODELS, baselines, speedup
    from autotune.backends.sim._loo import (
        DRAFTERS,
        FITS,
        _Predictor,
        describe_priors,
        leave_one_out,
        seed_cells,
    )
    from autotune.backends.sim._profile import load_profile

    out: dict[str, Any] = {}
    results: dict[str, dict[str, Any]] = {fit: {"in_sample": {}, "cells": {}, "priors": {}}
                                          for fit in FITS}
    for model, name in MODELS.items():
        profile = load_profile(name)
        predictor = _Predictor(profile, benchmarks, seeds, {})
        correction = {}
        for b, reqs in benchmarks.items() if simulate else ():  # simulator / analytic
            base = baselines(profile, reqs, seeds)
            for drafter in DRAFTERS:
                prior = profile.drafters[drafter].priors[b]
                for n in (3, 7):
                    sim = speedup(profile, drafter, n, reqs, seeds, base)
                    correction[(drafter, b, n)] = sim / predictor.models[drafter].speedup(
                        b, prior, n)
        predictor = _Predictor(profile, benchmarks, seeds, correction)
        cells = seed_cells(model)
        for fit in FITS:
            r = leave_one_out(fit, predictor, cells)
            published = {c.key: c.published for c in cells}
            results[fit]["in_sample"].update(
                {f"{model}/{k}": round(e, 5) for k, e in r.in_sample.items()})
            results[fit]["cells"].update(
                {f"{model}/{k}": {"published": published[k], "predicted": round(p, 4),
                                  "error": round(e, 5)} for k, (p, e) in r.held_out.items()})
            results[fit]["priors"][model] = describe_priors(r.priors)
    for fit, res in results.items():
        errors = [abs(c["error"]) for c in res["cells"].values()]
        fitted = [abs(e) for e in res["in_sample"].values()]
        summary = {"fit": fit, "median_error": round(float(np.median(errors)), 5),
                   "max_error": round(max(errors), 5), "cells": res["cells"],
                   "in_sample_median_error": round(float(np.median(fitted)), 5),
                   "in_sample_max_error": round(max(fitted), 5), "priors": res["priors"]}
        out["loo" if fit == "shared" else f"{fit}_fit"] = summary
    out["seeds"] = seeds
    out["model"] = ("analytic batch-1 model x simulator correction" if simulate
                    else "analytic batch-1 model (within 0.2% of the simulator)")
    return out


def print_loo(report: dict[str, Any]) -> None:
    shared, exact = report["loo"], report["exact_fit"]
    print(f"{'held-out cell':44s} {'published':>9s} {'shared':>8s} {'err':>7s} "
          f"{'exact':>8s} {'err':>7s}")
    for key, c in shared["cells"].items():
        e = exact["cells"][key]
        print(f"{key:44s} {c['published']:9.2f} {c['predicted']:8.3f} {100 * c['error']:+6.2f}% "
              f"{e['predicted']:8.3f} {100 * e['error']:+6.2f}%")
    for name, r in (("shared", shared), ("exact", exact)):
        print(f"{name:6s} fit: held-out median {100 * r['median_error']:.2f}%, max "
              f"{100 * r['max_error']:.2f}%; in-sample median "
              f"{100 * r['in_sample_median_error']:.2f}%, "
              f"max {100 * r['in_sample_max_error']:.2f}%")


if __name__ == "__main__":
    sys.exit(main())
