"""Speculative gain under load: speedup vs concurrency per window (issue 3 item 4).

Closed-loop replays at each concurrency (max_num_seqs = max(concurrency, 1), vLLM's default
token budget 8192) of a chat workload (Azure conversation lengths, chat acceptance prior) and a
code workload (SPEED-Bench Coding lengths and prior), on the Kimi-K2.6 profile with DSpark.
Speedup = output tokens/s at window n / at n=0, same concurrency. Also shows where a wide
window loses to a narrow one and where adaptive verification helps.

    .venv/bin/python -m bench.studies.load_sweep [--json] [--plot sweep.svg]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

WINDOWS = (0, 1, 2, 3, 5, 7)
CONCURRENCY = (1, 4, 16, 64, 128, 256, 512)
WORKLOADS = {"chat": "chat", "code": "speed-bench-coding"}


def sweep(profile: str, drafter: str, requests_per_point: int, seed: int) -> dict[str, Any]:
    from autotune.backends.sim import create_sim_backend, generate_requests
    from autotune.types import ReplaySchedule, ServeSpec, Slo, TrialConfig

    serve = ServeSpec(model="bench", draft_model=None, method="dspark", draft_block_size=8)
    backend = create_sim_backend(serve, {"profile": profile, "drafter": drafter}, seed)
    out: dict[str, Any] = {}
    for label, workload in WORKLOADS.items():
        rows: dict[str, Any] = {}
        for conc in CONCURRENCY:
            count = max(requests_per_point, 3 * conc)
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
                     + "   best     preemptions n=0/3/7")
        for conc, row in rows.items():
            best = max(keys, key=lambda k: row[k]["tok_s"])
            pre = "/".join(str(int(row[k]["preemptions"])) for k in ("0", "3", "7"))
            lines.append(f"{conc:>5s} {row['0']['tok_s']:10.0f} "
                         + " ".join(f"{row[k]['speedup']:7.2f}" for k in keys[1:])
                         + f"   n={best:6s} {pre}")
    return "\n".join(lines)


def _plot(result: dict[str, Any], path: Path) -> None:
    """An SVG line chart per workload (no plotting dependency): speedup vs log2 concurrency."""
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22"]
    w, h, pad = 420, 300, 45
    panels = []
    for p_i, (label, rows) in enumerate(result.items()):
        concs = [int(c) for c in rows]
        keys = list(next(iter(rows.values())))[1:]
        ys = [rows[str(c)][k]["speedup"] for c in concs for k in keys]
        y_lo, y_hi = 0.8, max(ys) * 1.05
        xs = [math.log2(c) for c in concs]

        def px(x: float, x0: float = min(xs), x1: float = max(xs)) -> float:
            return pad + (x - x0) / ((x1 - x0) or 1) * (w - 2 * pad)

        def py(y: float, y_lo: float = y_lo, y_hi: float = y_hi) -> float:
            return h - pad - (y - y_lo) / (y_hi - y_lo) * (h - 2 * pad)

        g = [f'<g transform="translate({p_i * w},0)">',
             f'<text x="{w / 2}" y="18" text-anchor="middle" font-size="13">{label}</text>',
             f'<line x1="{pad}" y1="{py(1.0):.1f}" x2="{w - pad}" y2="{py(1.0):.1f}" '
             'stroke="#aaa"/>']
        for c, x in zip(concs, xs, strict=True):
            g.append(f'<text x="{px(x):.1f}" y="{h - pad + 15}" text-anchor="middle" '
                     f'font-size="10">{c}</text>')
        for tick in (1.0, 1.5, 2.0, 2.5):
            if tick <= y_hi:
                g.append(f'<text x="{pad - 5}" y="{py(tick) + 3:.1f}" text-anchor="end" '
                         f'font-size="10">{tick:.1f}x</text>')
        for i, k in enumerate(keys):
            pts = " ".join(f"{px(x):.1f},{py(rows[str(c)][k]['speedup']):.1f}"
                           for c, x in zip(concs, xs, strict=True))
            col = colours[i % len(colours)]
            g.append(f'<polyline points="{pts}" fill="none" stroke="{col}" stroke-width="1.5"/>')
            g.append(f'<text x="{w - pad + 4}" y="{pad + 12 * i}" font-size="10" '
                     f'fill="{col}">n={k}</text>')
        g.append(f'<text x="{w / 2}" y="{h - 8}" text-anchor="middle" font-size="11">'
                 'concurrency (closed loop)</text></g>')
        panels.append("\n".join(g))
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w * len(result)}" height="{h}" '
           'font-family="sans-serif">\n' + "\n".join(panels) + "\n</svg>\n")
    path.write_text(svg, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.load_sweep",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="kimi-k2.6@8xH200-tp8")
    parser.add_argument("--drafter", default="dspark")
    parser.add_argument("--requests", type=int, default=300, help="requests per point (min)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print only JSON")
    parser.add_argument("--plot", type=Path, help="write an SVG of speedup vs concurrency")
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
