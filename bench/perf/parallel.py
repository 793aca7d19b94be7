"""Parallel trials: the same tuning pass on 1 and on 2 simulator replicas (issue 6 item 5).

Both passes tune the same sample with the same policy, budget and seed, into fresh SQLite
databases. Simulator trials are paced to take at least ``--pace`` seconds each (as real vLLM
trials take minutes), so parallelism matters. One replica runs in this process without Ray (the
default for one sim replica); N replicas run on a local Ray the pass starts and stops. Prints
the wall-clock of each pass (with and without starting the pool) and their ratio.

    .venv/bin/python -m bench.perf.parallel                 # 1 vs 2 replicas, 8 trials/workload
    .venv/bin/python -m bench.perf.parallel --trials 12 --pace 3 --replicas 2
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.paths import REPO


def run_pass(traffic: Path, trials: int, replicas: int, pace: float, seed: int,
             workdir: Path) -> dict[str, Any]:
    """One tuning pass on ``replicas`` paced sim replicas; wall-clock and what it ran."""
    from autotune.backends import Backend
    from autotune.orchestrate import Pool, Reporter, TuneOptions, tune
    from autotune.orchestrate.ray_pool import RaySettings, open_pool
    from autotune.policy import load_policy
    from autotune.store import Store

    policy = load_policy(overrides={"budget.trials": trials})
    store = Store.open(f"sqlite:///{workdir / f'r{replicas}.db'}")
    opened: dict[str, float] = {}

    def factory(backend: Backend, rep: Reporter) -> Pool:
        t = time.perf_counter()
        pool = open_pool(RaySettings(kind="sim", serve=policy.serve.spec(),
                                     backend_options=policy.sim.model_dump(), seed=seed,
                                     replicas=replicas, min_trial_s=pace,
                                     max_retries=policy.budget.max_retries), backend)
        opened["s"] = time.perf_counter() - t
        return pool

    options = TuneOptions(traffic=traffic, policy=policy, seed=seed, resume=False,
                          export_dir=workdir / f"exports-{replicas}")
    t0 = time.perf_counter()
    result = tune(options, store, pool_factory=factory)
    wall = time.perf_counter() - t0
    rows = store.trials(result.run_id)
    return {
        "replicas": replicas,
        "wall_s": wall,
        "pool_open_s": opened.get("s", 0.0),
        "trials": len(rows),
        "failed": sum(r.state != "complete" for r in rows),
        "used": sorted({str(r.replica) for r in rows}),
        "best": {w.workload: (w.best.value if w.best else None) for w in result.workloads},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.parallel",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--traffic", type=Path, default=REPO / "examples" / "small.jsonl")
    parser.add_argument("--trials", type=int, default=8, help="trials per workload (budget)")
    parser.add_argument("--pace", type=float, default=2.0,
                        help="minimum wall seconds per trial (default %(default)s)")
    parser.add_argument("--replicas", type=int, default=2, help="the parallel side")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    with tempfile.TemporaryDirectory(prefix="autotune-bench-parallel-") as tmp:
        serial = run_pass(args.traffic, args.trials, 1, args.pace, args.seed, Path(tmp))
        parallel = run_pass(args.traffic, args.trials, args.replicas, args.pace, args.seed,
                            Path(tmp))
    print(f"sample {args.traffic.name}, {args.trials} trials per workload, trials paced to "
          f">= {args.pace:g} s, seed {args.seed}")
    for r in (serial, parallel):
        print(f"  {r['replicas']} replica{'s' if r['replicas'] > 1 else ' '}: "
              f"{r['wall_s']:6.1f} s wall ({r['pool_open_s']:4.1f} s starting the pool), "
              f"{r['trials']} trials ({r['failed']} failed) on {', '.join(r['used'])}")
    ratio = serial["wall_s"] / parallel["wall_s"]
    steady = (serial["wall_s"] - serial["pool_open_s"]) / \
        (parallel["wall_s"] - parallel["pool_open_s"])
    print(f"wall-clock ratio 1 : {args.replicas} replicas = {ratio:.2f}x "
          f"(excluding pool start-up: {steady:.2f}x; target >= 1.5x)")
    if serial["trials"] != parallel["trials"]:
        print(f"note: the passes ran different trial counts ({serial['trials']} vs "
              f"{parallel['trials']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
