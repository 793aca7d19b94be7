"""Simulator speed across the space: the Azure conversation trace hour at its real arrival times.

Imports ../shared/data/azure_llm_2023/AzureLLMInferenceTrace_conv.csv (19,366 requests) with
the azure importer into a temporary sample and streams it through the sample reader into sim
replays (Kimi-K2.6, DSpark) of three scenarios:

- ``baseline``: the default policy's baseline config (n=7, 1024 seqs, 8192 tokens) at 1x;
- ``slowest``: the slowest config of the default space (adaptive verification on, the widest
  window n=7, the most sequences 256, the largest budget 16384 tokens) at 1x;
- ``slowest_4x_load``: the same config with the trace replayed 4x faster.

For each it prints simulated seconds per wall-clock second and per CPU second of the replay
(this process's CPU time: on a shared machine the wall-clock ratio says as much about the
neighbours as about the simulator). Target: >= 350x each.

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.perf.sim_speed --json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from bench.paths import shared_data

TARGET = 350.0


def main(argv: list[str] | None = None) -> int:
    from autotune.backends.sim import create_sim_backend
    from autotune.traffic import read_sample
    from autotune.traffic.importers import import_traffic
    from autotune.types import ReplaySchedule, ServeSpec, TrialConfig

    parser = argparse.ArgumentParser(prog="python -m bench.perf.sim_speed",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=shared_data())
    parser.add_argument("--profile", default="kimi-k2.6@8xH200-tp8")
    parser.add_argument("--drafter", default="dspark")
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    args = parser.parse_args(argv)

    csv = args.data / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    serve = ServeSpec(model="moonshotai/Kimi-K2.6", draft_model="novita/kimi-k2.6-dspark",
                      method="dspark", draft_block_size=8)
    backend = create_sim_backend(serve, {"profile": args.profile, "drafter": args.drafter},
                                 seed=0)
    scenarios = {
        "baseline": (TrialConfig(7, False, 1024, 8192), 1.0),
        "slowest": (TrialConfig(7, True, 256, 16384), 1.0),
        "slowest_4x_load": (TrialConfig(7, True, 256, 16384), 4.0),
    }
    result: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        sample_path = Path(tmp) / "azure_conv.jsonl"
        import_traffic("azure", csv, sample_path, workload="chat")
        for name, (config, load) in scenarios.items():
            replica = backend.start(config)
            sample = read_sample(sample_path)
            wall0, cpu0 = time.perf_counter(), time.process_time()
            m = replica.replay(ReplaySchedule(sample, mode="trace", time_scale=load, seed=0))
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            result[name] = {
                "sim_seconds_per_wall_second": round(m.duration_s / wall, 1),
                "sim_seconds_per_cpu_second": round(m.duration_s / cpu, 1),
                "sim_seconds": round(m.duration_s, 1),
                "wall_seconds": round(wall, 3),
                "cpu_seconds": round(cpu, 3),
                "steps": int(m.extra["steps"]),
                "mean_batch_size": round(m.extra["mean_batch_size"], 2),
                "requests": m.requests,
                "load": load,
                "config": config.as_dict(),
            }
    result["target"] = TARGET
    result["cpu"] = "one process, single-threaded numpy; CPU seconds = this process's"
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{'scenario':18s} {'sim s/wall s':>13s} {'sim s/CPU s':>12s} {'steps':>8s} "
          f"{'batch':>6s}")
    for name in scenarios:
        r = result[name]
        assert isinstance(r, dict)
        print(f"{name:18s} {r['sim_seconds_per_wall_second']:13.1f} "
              f"{r['sim_seconds_per_cpu_second']:12.1f} {r['steps']:8d} "
              f"{r['mean_batch_size']:6.1f}")
    print(f"target >= {TARGET:.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
