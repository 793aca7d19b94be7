"""Simulator speed: replay the Azure conversation trace hour at its real arrival times.

Imports ../shared/data/azure_llm_2023/AzureLLMInferenceTrace_conv.csv (19,366 requests) with
the azure importer into a temporary sample, streams it through the sample reader into one sim
replay (Kimi-K2.6, DSpark, the default policy's baseline config unless told otherwise) and
prints simulated seconds per wall-clock second of the replay.

    .venv/bin/python bench/sim_speed.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def shared_data() -> Path:
    env = os.environ.get("AUTOTUNE_SHARED_DATA")
    return Path(env) if env else (REPO / ".." / "shared" / "data").resolve()


def main(argv: list[str] | None = None) -> int:
    from autotune.backends.sim import create_sim_backend
    from autotune.traffic import read_sample
    from autotune.traffic.importers import import_traffic
    from autotune.types import ReplaySchedule, ServeSpec, Slo, TrialConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=shared_data())
    parser.add_argument("--window", type=int, default=7)
    parser.add_argument("--adaptive", action="store_true",
                        help="enable adaptive verification (per-step budget choice)")
    parser.add_argument("--max-num-seqs", type=int, default=1024)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    csv = args.data / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    serve = ServeSpec(model="moonshotai/Kimi-K2.6", draft_model="novita/kimi-k2.6-dspark",
                      method="dspark", draft_block_size=8)
    config = TrialConfig(args.window, args.adaptive, args.max_num_seqs,
                         args.max_num_batched_tokens)
    with tempfile.TemporaryDirectory() as tmp:
        sample_path = Path(tmp) / "azure_conv.jsonl"
        t0 = time.perf_counter()
        import_traffic("azure", csv, sample_path, workload="chat")
        import_s = time.perf_counter() - t0
        sample = read_sample(sample_path)
        replica = create_sim_backend(serve, {}, seed=0).start(config)
        t0 = time.perf_counter()
        m = replica.replay(ReplaySchedule(sample, mode="trace", seed=0))
        wall = time.perf_counter() - t0
    summary = m.summary(Slo())
    result = {
        "sim_seconds_per_wall_second": round(m.duration_s / wall, 1),
        "requests": m.requests,
        "sim_seconds": round(m.duration_s, 1),
        "wall_seconds": round(wall, 3),
        "import_seconds": round(import_s, 3),
        "steps": int(m.extra["steps"]),
        "steps_per_wall_second": round(m.extra["steps"] / wall),
        "mean_batch_size": round(m.extra["mean_batch_size"], 2),
        "output_tokens_per_s": round(summary["output_tokens_per_s"], 1),
        "config": config.as_dict(),
        "cpu": "one process, single-threaded numpy",
    }
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:28s} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
