"""Speculative gain under load: speedup vs concurrency per window (issue 3 item 4).

Closed-loop replays at each concurrency (max_num_seqs = max(concurrency, 1), vLLM's default
token budget 8192) of a chat workload (Azure conversation lengths, chat acceptance prior) and a
code workload (SPEED-Bench Coding lengths and prior), on the Kimi-K2.6 profile with DSpark.
Speedup = output tokens/s at window n / at n=0, same concurrency. Also shows where a wide
window loses to a narrow one and where adaptive verification helps.

    .venv/bin/python bench/load_sweep.py [--json] [--plot sweep.png]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

WINDOWS = (0, 1, 2, 3, 5, 7)
CONCURRENCY = (1, 4, 16, 32, 64, 128, 256)
WORKLOADS = {"chat": "chat", "code": "speed-bench-coding"}


def sweep(profile: str, drafter: str, requests_per_point: int, seed: int) -> dict[str, Any]:
    from autotune.backends.sim import create, generate_requests
    from autotune.types import ReplaySchedule, ServeSpec, Slo, TrialConfig

    serve = ServeSpec(model="bench", draft_model=None, method="dspark", draft_block_size=8)
    backend = create(serve, {"profile": profile, "drafter": drafter}, seed)
    out: dict[str, Any] = {}
    for label, workload in WORKLOADS.items():
        rows: dict[str, Any] = {}
        for conc in CONCURRENCY:
            count = max(requests_per_point, 4 * conc)
            reqs = list(generate_requests(count, workload=workload, seed=seed))
            sched = ReplaySchedule(reqs, mode="closed", concurrency=conc,
                                   warmup_requests=conc, seed=seed)
            row: dict[str, Any] = {}
            for n in WINDOWS:
                for av in ((False, True) if n >= 3 else (False,)):
                    cfg = TrialConfig(n, av, max(conc, 1), 8192)
                    m = backend.start(cfg).replay(sched)
                    s = m.summary(Slo())
                    key = f"{n}{'+av' if av else ''}"
                    row[key] = {"tok_s": s["output_tokens_per_s"],
                                "itl_p50_ms": s["itl_p50_ms"],
                                "tpot_ms": s["tpot_mean_ms"],
                                "batch": m.extra["mean_batch_size"],
                                "preemptions": m.extra["preemptions"]}
            base = row["0"]["tok_s"]
            for v in row.values():
                v["speedup"] = v["tok_s"] / base
            rows[str(conc)] = row
        out[label] = rows
    return out


def _table(result: dict[str, Any]) -> str:
    lines = []
    for label, rows in result.items():
        keys = list(next(iter(rows.values())))
        lines.append(f"\n{label}: speedup vs n=0 at the same concurrency (tokens/s at n=0)")
        lines.append(f"{'conc':>5s} {'n=0 tok/s':>10s} " + " ".join(f"{k:>7s}" for k in keys[1:])
                     + "   best")
        for conc, row in rows.items():
            best = max(keys, key=lambda k: row[k]["tok_s"])
            lines.append(f"{conc:>5s} {row['0']['tok_s']:10.0f} "
                         + " ".join(f"{row[k]['speedup']:7.2f}" for k in keys[1:])
                         + f"   n={best}")
    return "\n".join(lines)


def _plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(result), figsize=(6 * len(result), 4), squeeze=False)
    for ax, (label, rows) in zip(axes[0], result.items(), strict=True):
        concs = [int(c) for c in rows]
        for key in list(next(iter(rows.values())))[1:]:
            ax.plot(concs, [rows[str(c)][key]["speedup"] for c in concs], marker="o",
                    label=f"n={key}")
        ax.set_xscale("log", base=2)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("concurrency")
        ax.set_ylabel("speedup vs no speculation")
        ax.set_title(label)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="kimi-k2.6@8xH200-tp8")
    parser.add_argument("--drafter", default="dspark")
    parser.add_argument("--requests", type=int, default=400, help="requests per point (min)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print only JSON")
    parser.add_argument("--plot", type=Path, help="write a PNG of speedup vs concurrency")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    result = sweep(args.profile, args.drafter, args.requests, args.seed)
    if args.plot:
        _plot(result, args.plot)
    if args.json:
        print(json.dumps(result))
        return 0
    print(_table(result))
    print(f"\n{args.profile} {args.drafter}; closed loop, max_num_seqs = concurrency, "
          f"max_num_batched_tokens 8192; {time.perf_counter() - t0:.1f} s wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
