"""What a pass's capacity readings replayed, and how many of them were sustained rates.

Reads the trials of a database (what ``autotune trials --format json`` prints) and the
traffic sample the pass tuned, and prints per workload and for the pass: trials, readings,
replayed seconds (Σ ``replay{i}_duration_s``, first measured arrival to last completion of
each reading) and, when the trials record it, replica seconds (Σ ``replay{i}_busy_s``); the
kept readings that were sustained (``capacity_sustained``; on rows that predate it, estimated
by the same rule: the workload's arrival span / ``load_scale`` at least 4 median E2Es, as
those passes replayed the whole workload), the kept readings whose completion rate is under
80% of the rate they are credited with (``requests_per_s`` against ``load_scale`` × the
workload's mean arrival rate) and those whose verdict is undecided.

    .venv/bin/python -m bench.studies.capacity_cost --db sqlite:///x.db --traffic sample.jsonl \
        [--json]
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from autotune.orchestrate.capacity_window import SETTLE_LIFETIMES

#: A kept reading completing under this share of its credited rate drained a burst.
DRAINED = 0.8


def workload_spans(traffic: Path) -> dict[str, tuple[float, float]]:
    """Each workload's mean arrival rate (requests/s) and arrival span (s) in the sample."""
    times: dict[str, list[float]] = defaultdict(list)
    with traffic.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row.get("arrival_s") is not None:
                times[str(row.get("workload"))].append(float(row["arrival_s"]))
    return {w: ((len(t) - 1) / (max(t) - min(t)), max(t) - min(t)) for w, t in times.items()
            if len(t) > 1 and max(t) > min(t)}


def _num(metrics: dict[str, Any], key: str) -> float | None:
    v = metrics.get(key)
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def _sustained(metrics: dict[str, Any], span_s: float | None) -> bool | None:
    recorded = _num(metrics, "capacity_sustained")
    if recorded is not None:
        return recorded == 1.0
    scale, e2e = _num(metrics, "load_scale"), _num(metrics, "e2e_p50_ms")
    if scale is None or e2e is None or span_s is None:
        return None
    return span_s / scale >= SETTLE_LIFETIMES * e2e / 1000


def summarize(trials: list[dict[str, Any]],
              spans: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """Per workload and for the pass: trials, readings, replayed and replica seconds,
    sustained and drained kept readings."""
    out: dict[str, dict[str, Any]] = {}
    for t in trials:
        m = t.get("metrics") or {}
        if t.get("state") != "complete" or "load_scale" not in m:
            continue
        w = out.setdefault(t["workload"], {"trials": 0, "readings": 0, "replayed_s": 0.0,
                                           "busy_s": 0.0, "sustained": 0, "drained": 0,
                                           "undecided": 0, "capacities": []})
        w["trials"] += 1
        i = 0
        while f"replay{i}_scale" in m:
            w["readings"] += 1
            w["replayed_s"] += _num(m, f"replay{i}_duration_s") or 0.0
            w["busy_s"] += _num(m, f"replay{i}_busy_s") or 0.0
            i += 1
        rate, span = spans.get(t["workload"], (None, None))
        w["sustained"] += bool(_sustained(m, span))
        w["undecided"] += _num(m, "slo_verdict_code") == 0.5
        scale, done = _num(m, "load_scale"), _num(m, "requests_per_s")
        if scale and done is not None and rate and m.get("capacity_met_slo"):
            w["drained"] += done < DRAINED * scale * rate
            w["capacities"].append(round(scale, 3))
    total = {k: sum(w[k] for w in out.values())
             for k in ("trials", "readings", "replayed_s", "busy_s", "sustained", "drained",
                       "undecided")}
    return {"workloads": out, "pass": total}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, help="database URL of the pass")
    ap.add_argument("--traffic", required=True, type=Path, help="the sample it tuned")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args(argv)
    from autotune.store import Store

    trials = [t.to_json() for t in Store.open(args.db, existing=True).trials(None, None)]
    result = summarize(trials, workload_spans(args.traffic))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{'workload':10} {'trials':>6} {'reads':>6} {'replayed h':>10} {'busy h':>7} "
          f"{'sustained':>9} {'drained':>7} {'undecided':>9}")
    for name, w in [*sorted(result["workloads"].items()), ("pass", result["pass"])]:
        print(f"{name:10} {w['trials']:6d} {w['readings']:6d} {w['replayed_s'] / 3600:10.2f} "
              f"{w['busy_s'] / 3600:7.2f} {w['sustained']:9d} {w['drained']:7d} "
              f"{w['undecided']:9d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
