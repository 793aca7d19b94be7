"""Peak memory of a 1,000,000-request sample: ``traffic inspect`` and a sim replay, streamed.

Generates a labelled sample (GSM8K- and HumanEval-like requests with acceptance predictions,
Poisson arrivals) to a temporary JSONL file, then in two child processes (so each peak is its
own): ``autotune traffic inspect FILE --format json`` and a closed-loop sim replay that streams
the file through ``autotune.traffic.read_sample``. Prints each peak RSS (target < 500 MB).

    .venv/bin/python -m bench.perf.sim_memory [--requests 1000000] [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.paths import child_env


def _peak_mb_self() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def generate(path: Path, count: int, seed: int) -> None:
    """Write ``count`` requests (70% gsm8k, 30% humaneval) interleaved by arrival time."""
    from autotune.backends.sim import generate_requests

    rate = 50.0
    a = generate_requests(count, workload="gsm8k", seed=seed, rate=0.7 * rate)
    b = generate_requests(count, workload="humaneval", seed=seed + 1, rate=0.3 * rate)
    ra, rb = next(a), next(b)
    with path.open("w", encoding="utf-8") as f:
        for _ in range(count):
            if (ra.arrival_s or 0.0) <= (rb.arrival_s or 0.0):
                r, ra = ra, next(a)
            else:
                r, rb = rb, next(b)
            f.write(json.dumps({"id": r.id, "arrival_s": r.arrival_s, "workload": r.workload,
                                "prompt_tokens": r.prompt_tokens,
                                "output_tokens": r.output_tokens,
                                "acceptance": list(r.acceptance or ())}) + "\n")


def replay_child(path: Path) -> dict[str, float]:
    """The replay, run in a child process: stream the sample into one sim replay."""
    from autotune.backends.sim import create_sim_backend
    from autotune.traffic import read_sample
    from autotune.types import ReplaySchedule, ServeSpec, TrialConfig

    serve = ServeSpec(model="moonshotai/Kimi-K2.6", draft_model="novita/kimi-k2.6-dspark",
                      method="dspark", draft_block_size=8)
    replica = create_sim_backend(serve, {}, seed=0).start(TrialConfig(3, False, 512, 8192))
    t0 = time.perf_counter()
    m = replica.replay(ReplaySchedule(read_sample(path), mode="closed", concurrency=512,
                                      warmup_requests=512, seed=0))
    return {"replay_peak_rss_mb": round(_peak_mb_self(), 1), "replayed_requests": m.requests,
            "replay_wall_s": round(time.perf_counter() - t0, 1),
            "sim_seconds": round(m.duration_s, 1), "itl_samples": int(m.itl_s.size)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.sim_memory",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--replay-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.replay_child:
        print(json.dumps(replay_child(args.replay_child)))
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "million.jsonl"
        t0 = time.perf_counter()
        generate(path, args.requests, args.seed)
        result: dict[str, float | int | str] = {
            "requests": args.requests, "sample_mb": round(path.stat().st_size / 2**20, 1),
            "generate_s": round(time.perf_counter() - t0, 1)}
        autotune = Path(sys.executable).with_name("autotune")
        t0 = time.perf_counter()
        inspect = subprocess.run([str(autotune), "traffic", "inspect", str(path), "--format",
                                  "json"], capture_output=True, text=True, check=True)
        rows = json.loads(inspect.stdout)
        result["inspect_s"] = round(time.perf_counter() - t0, 1)
        result["inspect_workloads"] = ",".join(sorted(str(r["workload"]) for r in rows))
        result["inspect_peak_rss_mb"] = round(
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0, 1)
        child = subprocess.run([sys.executable, "-m", "bench.perf.sim_memory",
                                "--replay-child", str(path)],
                               capture_output=True, text=True, check=True, env=child_env())
        result.update(json.loads(child.stdout.strip().splitlines()[-1]))
        # RUSAGE_CHILDREN is the max over children: the replay's own figure is in its output
    result["target_mb"] = 500
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:24s} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
