"""What a pass's capacity readings replayed, and how many of them were sustained rates.

Reads the trials of a database (what ``autotune trials --format json`` prints) and the
traffic sample the pass tuned, and prints per workload and for the pass: trials, readings,
replayed seconds (Σ ``replay{i}_duration_s``, first measured arrival to last completion of
each reading) and, when the trials record it, replica seconds (Σ ``replay{i}_busy_s``); the
kept readings that were sustained (``capacity_sustained``; on rows that predate it, estimated
by the same rule: the workload's arrival span / ``load_scale`` at least 4 lifetimes, the
median E2E or the drain, ``duration_s`` - that span, as those passes replayed the whole
workload), the kept readings whose completion rate is under
80% of the rate they are credited with (``requests_per_s`` against ``load_scale`` × the
workload's mean arrival rate) and those whose verdict is undecided.

    .venv/bin/python -m bench.studies.capacity_cost --db sqlite:///x.db --traffic sample.jsonl \
        [--json]

``--make-long-prompt OUT`` writes instead a long-prompt sample like the one issue 37 measured:
the first 600 requests of the Mooncake conversation trace (``$AUTOTUNE_SHARED_DATA``) whose
prompt is at most 16,000 tokens and whole length at most 19,000 (prompts p50 ≈ 5.5k), at the
trace's arrival times, dealt in turn to three workloads (≈ 0.74 request/s each, over 270 s) with the
acceptance predictions of ``examples/sample.jsonl``'s workloads of the same names.
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
    duration = _num(metrics, "duration_s")
    if scale is None or e2e is None or span_s is None or duration is None:
        return None
    window = span_s / scale
    return window >= SETTLE_LIFETIMES * max(e2e / 1000, duration - window)


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


LONG_PROMPT_REQUESTS, LONG_PROMPT_MAX, LONG_TOTAL_MAX = 600, 16_000, 19_000


def make_long_prompt(out: Path, examples: Path) -> int:
    """Write the long-prompt sample (module doc) to ``out``; the number of requests."""
    import os

    data = Path(os.environ.get("AUTOTUNE_SHARED_DATA", Path(__file__).resolve().parents[3]
                               / "shared" / "data"))
    acceptance: dict[str, list[float]] = {}
    with examples.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            acceptance.setdefault(row["workload"], row["acceptance"])
    names = sorted(acceptance)[:3]
    rows: list[dict[str, Any]] = []
    with (data / "mooncake_fast25" / "conversation_trace.jsonl").open(encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            prompt, output = int(r["input_length"]), int(r["output_length"])
            if prompt > LONG_PROMPT_MAX or prompt + output > LONG_TOTAL_MAX or output < 1:
                continue
            name = names[len(rows) % len(names)]
            rows.append({"id": f"mooncake-{len(rows)}", "arrival_s": r["timestamp"] / 1000.0,
                         "workload": name, "prompt_tokens": prompt, "output_tokens": output,
                         "acceptance": acceptance[name]})
            if len(rows) == LONG_PROMPT_REQUESTS:
                break
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return len(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", help="database URL of the pass")
    ap.add_argument("--traffic", type=Path, help="the sample it tuned")
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--make-long-prompt", type=Path, metavar="OUT",
                    help="write the long-prompt sample to OUT instead")
    args = ap.parse_args(argv)
    if args.make_long_prompt is not None:
        examples = Path(__file__).resolve().parents[2] / "examples" / "sample.jsonl"
        print(f"{make_long_prompt(args.make_long_prompt, examples)} requests written to "
              f"{args.make_long_prompt}")
        return 0
    if args.db is None or args.traffic is None:
        ap.error("--db and --traffic are required")
    from autotune.store import Store

    trials = [t.to_json() for t in Store.open(args.db, existing=True).trials(None, None)]
    result = summarize(trials, workload_spans(args.traffic))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{'workload':10} {'trials':>6} {'reads':>6} {'replayed h':>10} {'min/trial':>9} "
          f"{'busy h':>7} {'sustained':>9} {'drained':>7} {'undecided':>9}")
    for name, w in [*sorted(result["workloads"].items()), ("pass", result["pass"])]:
        per_trial = w["replayed_s"] / 60 / w["trials"] if w["trials"] else math.nan
        print(f"{name:10} {w['trials']:6d} {w['readings']:6d} {w['replayed_s'] / 3600:10.2f} "
              f"{per_trial:9.1f} {w['busy_s'] / 3600:7.2f} {w['sustained']:9d} "
              f"{w['drained']:7d} {w['undecided']:9d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
