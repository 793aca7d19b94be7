"""The report over finished units: per world and over all, each method's median and worst
regret, median runs, regret at 6 runs and runs to 2% (:func:`summarize`, :func:`result`: the
JSON), and the issue's targets checked line by line (:func:`checks`).

A unit's detail (what ``--detail`` keeps per (world, workload)) is a JSON mapping: its ``slo``,
``oracle``, ``oracle_value``, ``default_regret``, ``default_meets_slo`` and ``runs``, one row per
method and seed (``regret``, ``runs``, ``regret_se``, ``regret_at_6``, ``to_2pct``, ``chosen``,
``close_race``, ...).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from bench.regret.settings import METHODS, SAID_LOSS

#: One unit's detail, as ``--detail`` writes it (JSON).
Detail = dict[str, Any]


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def summarize(units: Sequence[Detail], seeds: int) -> dict[str, Any]:
    """The issue's shape over a set of (world, workload) details."""
    def pooled(method: str, key: str) -> list[float]:
        return [row[key] for u in units for row in u["runs"][method]]

    methods: dict[str, Any] = {}
    for m in (m for m in METHODS if m in units[0]["runs"]):
        methods[m] = {"median_regret": round(median(pooled(m, "regret")), 4),
                      "max_regret": round(max(pooled(m, "regret")), 4),
                      "median_runs": median(pooled(m, "runs")),
                      "regret_at_6": round(median(pooled(m, "regret_at_6")), 4)}
        worst = max((row for u in units for row in u["runs"][m]), key=lambda r: r["regret"])
        methods[m]["max_regret_se"] = worst.get("regret_se")
        if m in ("guided", "tpe", "random"):
            to2 = median(pooled(m, "to_2pct"))
            methods[m]["median_runs_to_2pct"] = to2 if math.isfinite(to2) else None
        if m == "guided":
            methods[m].update(_said_close(units))
    methods["default"] = {"median_regret": round(median([u["default_regret"]
                                                         for u in units]), 4)}
    return {"workloads": sorted({u["workload"] for u in units}), "seeds": seeds,
            "methods": methods}


def _said_close(units: Sequence[Detail]) -> dict[str, Any]:
    """How often guided's recommendation says it is a close race: among its runs that lost
    more than :data:`SAID_LOSS` (a loss it should own up to) and among the others (a close race
    said where nothing was lost costs trust, not regret). None: no such run, or rows recorded
    before the race was."""
    rows = [row for u in units for row in u["runs"]["guided"] if "close_race" in row]
    lost = [row["close_race"] for row in rows if row["regret"] > SAID_LOSS]
    kept = [row["close_race"] for row in rows if row["regret"] <= SAID_LOSS]
    return {"losses_said_close": round(sum(lost) / len(lost), 4) if lost else None,
            "others_said_close": round(sum(kept) / len(kept), 4) if kept else None}


def checks(name: str, res: Mapping[str, Any], units: Sequence[Detail]) -> list[str]:
    """The issue's targets for one world (or the summary), one line each."""
    if not {"guided", "tpe"} <= res["methods"].keys():
        return [f"{name}: (the targets compare guided with tpe; run both)"]
    g, t = res["methods"]["guided"], res["methods"]["tpe"]
    losses = [f"{u['workload']} seed {i}" for u in units
              for i, row in enumerate(u["runs"]["guided"])
              if row.get("default_meets_slo", u["default_meets_slo"])
              and row["regret"] > row.get("default_regret", u["default_regret"]) + 1e-9]

    def mark(ok: bool) -> str:
        return "PASS" if ok else "FAIL"

    return [
        f"{name}: {mark(g['median_regret'] <= 0.01)} guided median regret "
        f"{g['median_regret']:.2%} <= 1%; {mark(g['max_regret'] <= 0.03)} worst "
        f"{g['max_regret']:.2%}"
        + (f" (± {g['max_regret_se']:.2%} by the oracle's readings)"
           if g.get("max_regret_se") else "")
        + f" <= 3%; {mark(g['median_runs'] <= 8)} median runs "
        f"{g['median_runs']} <= 8",
        f"  {mark(g['regret_at_6'] <= t['regret_at_6'] / 3)} regret_at_6 guided "
        f"{g['regret_at_6']:.2%} <= tpe {t['regret_at_6']:.2%} / 3; "
        f"{mark(not losses)} never loses to a default that meets the SLO"
        + (f" (loses: {', '.join(losses)})" if losses else ""),
    ]


def result(by_world: Mapping[str, list[Detail]], order: Sequence[str],
           seeds: Mapping[str, int]) -> dict[str, Any]:
    """The JSON over the (world, workload) units finished: per world and over all
    (``seeds``: per world; the summary gives the fewest)."""
    out: dict[str, Any] = {"worlds": {}, "summary": {}}
    for name, details in by_world.items():
        if details:
            details.sort(key=lambda u: (order.index(u["workload"]) if u["workload"] in order
                                        else len(order), u["workload"]))
            out["worlds"][name] = summarize(details, seeds[name])
    every = [u for details in by_world.values() for u in details]
    out["summary"] = (summarize(every, min(seeds[n] for n, d in by_world.items() if d))
                      if every else {})
    return out
