"""``python -m bench.studies.knee``: the knee search side by side on the simulator (default),
or ``--pass-db URL``: a pass's capacity readings (:mod:`.pass_readings`).

    .venv/bin/python -m bench.studies.knee [--configs 5] [--sds 0.1 0.3 0.6] [--out DIR]
    .venv/bin/python -m bench.studies.knee --pass-db sqlite:////tmp/x.db [--out DIR]

With ``--out`` the rows (``knee-arms.jsonl`` or ``pass.json``), the summary and a manifest
(command, commit, date, machine) are written there.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autotune.knee_search import MAX_READINGS
from bench.paths import REPO


def _manifest(argv: list[str], what: dict[str, str]) -> dict[str, Any]:
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--",
                            "autotune", "bench"], capture_output=True, text=True,
                           check=False).stdout.strip()
    return {"benchmark": "the capacity reading's knee search by hint (python -m "
                         "bench.studies.knee)",
            "command": "python -m bench.studies.knee " + " ".join(argv),
            "commit": commit + ("+uncommitted" if dirty else ""),
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.node()} ({platform.machine()}, python "
                       f"{platform.python_version()})", "files": what}


def _arms(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[Any]]:
    from autotune.backends import create_backend
    from autotune.policy import load_policy
    from autotune.traffic.load import read_workloads
    from bench.studies.knee.arms import default_arms, read_unit, summarize

    policy = load_policy(args.policy)
    sample = read_workloads(args.traffic, max_requests=policy.replay.max_requests,
                            max_model_len=policy.serve.max_model_len)
    slo = policy.objective.slo.slo()
    backend = create_backend("sim", policy.serve.spec(), policy.sim.model_dump(), args.seed)
    baseline = policy.baseline.config()
    space = [c for c in policy.space.configs() if c != baseline]
    configs = [baseline, *random.Random(args.seed).sample(space, args.configs - 1)]
    arms = default_arms(tuple(args.sds))
    rows = []
    for name, w in sample.workloads.items():
        schedule = policy.replay.schedule(w.replay, seed=args.seed, slo=slo)
        for config in configs:
            rows += read_unit(backend, name, config, schedule, slo, arms, args.readings,
                              lambda line: print(line, file=sys.stderr, flush=True))
    return [r.as_dict() for r in rows], summarize(rows)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m bench.studies.knee",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--traffic", type=Path, default=REPO / "examples" / "sample.jsonl")
    parser.add_argument("--policy", type=Path, help="default: the embedded default policy")
    parser.add_argument("--configs", type=int, default=5,
                        help="configs per workload: the baseline and a seeded draw")
    parser.add_argument("--sds", type=float, nargs="+", default=[0.1, 0.3, 0.6])
    parser.add_argument("--readings", type=int, default=MAX_READINGS,
                        help="readings a search may take (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pass-db", help="read a pass's database instead")
    parser.add_argument("--out", type=Path, help="write rows, summary and manifest here")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    if args.pass_db:
        from bench.studies.knee.pass_readings import read_pass

        summary = read_pass(args.pass_db).summary()
        print(json.dumps(summary, indent=1))
        files = {"pass.json": "the pass's capacity readings: trials, readings and replica "
                              "seconds per trial spent and predicted, resolution, GPU-h, "
                              "budget stop; per_trial rows are [workload, number, readings, "
                              "predicted readings, busy s, predicted busy s, resolution]"}
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "pass.json").write_text(json.dumps(summary, indent=1) + "\n")
    else:
        from bench.studies.knee.arms import table

        rows, summ = _arms(args)
        print(table(summ))
        print(f"\n{len(rows)} readings, {time.perf_counter() - t0:.0f} s wall")
        files = {"knee-arms.jsonl": "one row per (workload, config, arm): the fine reading "
                                    "(arm fine) and each arm's capacity, readings, replica "
                                    "seconds, resolution, predicted readings and seconds, and "
                                    "the scales read with the log of each reading's worst "
                                    "p99 over its bound",
                 "summary.json": "per arm: means over the units and ratios to no hint",
                 "summary.txt": "the same as printed"}
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "knee-arms.jsonl").write_text(
                "".join(json.dumps(r) + "\n" for r in rows))
            (args.out / "summary.json").write_text(json.dumps(summ, indent=1) + "\n")
            (args.out / "summary.txt").write_text(table(summ) + "\n")
    if args.out:
        (args.out / "manifest.json").write_text(
            json.dumps(_manifest(argv, files), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
