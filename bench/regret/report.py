"""The report over finished units: per world and over all, each method's median and worst
regret, median runs, regret at 6 runs and runs to 2% (:func:`summarize`, :func:`result`: the
JSON), and the issue's targets checked line by line (:func:`checks`).

A unit's detail (what ``--detail`` keeps per (world, workload)) is a
:class:`bench.regret.records.Detail`: its ``slo``, ``oracle``, ``oracle_value``,
``default_regret``, ``default_meets_slo`` and ``runs``, one row per method and seed
(:class:`~bench.regret.records.RunRow`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from bench.regret.binding import RULE, count
from bench.regret.records import Detail, EqualGpuH, MethodSummary, Result, RunRow, Summary
from bench.regret.settings import METHODS, SAID_LOSS
from bench.regret.worlds import TUNED_ON, held_out_worlds

#: The issue's target for guided's median runs.
MEDIAN_RUNS = 6


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def summarize(units: Sequence[Detail], seeds: int) -> Summary:
    """The issue's shape over a set of (world, workload) details (at least one)."""
    methods: dict[str, MethodSummary] = {}
    for m in (m for m in METHODS if m in units[0]["runs"]):
        rows = [row for u in units for row in u["runs"][m]]
        regrets = [row["regret"] for row in rows]
        summary: MethodSummary = {
            "median_regret": round(median(regrets), 4), "max_regret": round(max(regrets), 4),
            "median_runs": median([row["runs"] for row in rows]),
            "regret_at_6": round(median([row["regret_at_6"] for row in rows]), 4)}
        summary["max_regret_se"] = max(rows, key=lambda r: r["regret"]).get("regret_se")
        if m in ("guided", "tpe", "random"):
            to2 = median([row["to_2pct"] for row in rows])
            summary["median_runs_to_2pct"] = to2 if math.isfinite(to2) else None
        if m == "guided":
            summary["losses_said_close"], summary["others_said_close"] = _said_close(units)
        _economy(summary, rows)
        methods[m] = summary
    methods["default"] = {"median_regret": round(median([u["default_regret"]
                                                         for u in units]), 4)}
    out: Summary = {"workloads": sorted({u["workload"] for u in units}), "seeds": seeds,
                    "methods": methods}
    equal = equal_gpu_h(methods)
    if equal is not None:
        out["equal_gpu_h"] = equal
    bound = [u for u in units if "binding" in u]
    if bound:
        out["binding_slo"] = count(bound)
    return out


def equal_gpu_h(methods: Mapping[str, MethodSummary]) -> EqualGpuH | None:
    """Regret at an equal GPU-hour budget (:class:`~bench.regret.records.EqualGpuH`): guided's
    at its stop against every other method's when its spending stops at guided's; None without
    a guided run whose rows carry their cost."""
    g = methods.get("guided")
    if g is None or "median_gpu_h" not in g:
        return None
    at = {m: s["regret_at_guided_gpu_h"] for m, s in methods.items()
          if m != "guided" and "regret_at_guided_gpu_h" in s}
    tpe = at.get("tpe")
    return {"gpu_h": g["median_gpu_h"], "guided": g["median_regret"], "at_guided_gpu_h": at,
            "guided_over_tpe": round(g["median_regret"] / tpe, 4) if tpe else None}


def _economy(summary: MethodSummary, rows: Sequence[RunRow]) -> None:
    """Set a method's economy over its rows (bench/regret/economy.py), the keys its rows carry:
    median GPU-hours of a run, median regret at guided's GPU-hours, median GPU-hours to 1%
    (None: not reached in half the runs), median search trials on configs that meet the SLO
    at no rate."""
    no_rate = [r["no_rate_trials"] for r in rows if "no_rate_trials" in r]
    if no_rate:
        summary["median_no_rate_trials"] = median(no_rate)
    costed = [r for r in rows if "gpu_h" in r]
    if not costed:
        return
    summary["median_gpu_h"] = round(median([r["gpu_h"] for r in costed]), 6)
    at = [a for r in costed if (a := r.get("regret_at_gpu_h")) is not None]
    if at:
        summary["regret_at_guided_gpu_h"] = round(median(at), 4)
    to1 = median([r["gpu_h_to_1pct"] for r in costed])
    summary["median_gpu_h_to_1pct"] = round(to1, 6) if math.isfinite(to1) else None


def _said_close(units: Sequence[Detail]) -> tuple[float | None, float | None]:
    """How often guided's recommendation says it is a close race: among its runs that lost
    more than :data:`SAID_LOSS` (a loss it should own up to) and among the others (a close race
    said where nothing was lost costs trust, not regret). None: no such run, or rows recorded
    before the race was."""
    rows = [(row["regret"], row["close_race"]) for u in units for row in u["runs"]["guided"]
            if "close_race" in row]
    lost = [said for regret, said in rows if regret > SAID_LOSS]
    kept = [said for regret, said in rows if regret <= SAID_LOSS]
    return (round(sum(lost) / len(lost), 4) if lost else None,
            round(sum(kept) / len(kept), 4) if kept else None)


def checks(name: str, res: Summary, units: Sequence[Detail]) -> list[str]:
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

    economy = []
    if "regret_at_guided_gpu_h" in t:
        spent = res["methods"]["guided"].get("median_gpu_h")
        economy.append(f"{mark(g['median_regret'] <= t['regret_at_guided_gpu_h'] / 3)} at "
                       f"guided's GPU-hours" + (f" ({spent:.3g} GPU-h median)" if spent else "")
                       + f" guided {g['median_regret']:.2%} <= tpe "
                       f"{t['regret_at_guided_gpu_h']:.2%} / 3")
    if "median_no_rate_trials" in g:
        economy.append(f"{mark(g['median_no_rate_trials'] <= 1)} guided median search trials "
                       f"on configs meeting the SLO at no rate {g['median_no_rate_trials']:g} "
                       f"<= 1")
    return [
        f"{name}: {mark(g['median_regret'] <= 0.01)} guided median regret "
        f"{g['median_regret']:.2%} <= 1%; {mark(g['max_regret'] <= 0.03)} worst "
        f"{g['max_regret']:.2%}"
        + (f" (± {g['max_regret_se']:.2%} by the oracle's readings)"
           if g.get("max_regret_se") else "")
        + f" <= 3%; {mark(g['median_runs'] <= MEDIAN_RUNS)} median runs "
        f"{g['median_runs']} <= {MEDIAN_RUNS}",
        f"  {mark(g['regret_at_6'] <= t['regret_at_6'] / 3)} regret_at_6 guided "
        f"{g['regret_at_6']:.2%} <= tpe {t['regret_at_6']:.2%} / 3; "
        f"{mark(not losses)} never loses to a default that meets the SLO"
        + (f" (loses: {', '.join(losses)})" if losses else ""),
        *(["  " + "; ".join(economy)] if economy else []),
    ]


def result(by_world: Mapping[str, list[Detail]], order: Sequence[str],
           seeds: Mapping[str, int]) -> Result:
    """The JSON over the (world, workload) units finished, at least one: per world and over
    all (``seeds``: per world; the summary gives the fewest)."""
    worlds: dict[str, Summary] = {}
    for name, details in by_world.items():
        if details:
            details.sort(key=lambda u: (order.index(u["workload"]) if u["workload"] in order
                                        else len(order), u["workload"]))
            worlds[name] = summarize(details, seeds[name])
    held = {w.name for w in held_out_worlds()}
    for name, summary in worlds.items():
        summary["tuned_on"] = name in TUNED_ON
        if name in held:
            summary["held_out"] = True
    every = [u for details in by_world.values() for u in details]
    out: Result = {"worlds": worlds,
                   "summary": summarize(every, min(seeds[n] for n, d in by_world.items() if d)),
                   "tuned_on": list(TUNED_ON)}
    bound = [u for u in every if "binding" in u]
    if bound:
        out["binding_slo"] = {"rule": RULE, **count(bound)}
    return out


def tuned_on_lines(worlds: Sequence[str]) -> list[str]:
    """Which worlds the search was tuned on, and which of ``worlds`` are new to it."""
    held = {w.name for w in held_out_worlds()}
    new = [w + (" (held out)" if w in held else "") for w in worlds if w not in TUNED_ON]
    return [f"tuned on ({len(TUNED_ON)} worlds, in-sample): {', '.join(TUNED_ON)}",
            f"scored once (new to the search, the code frozen): {', '.join(new) or 'none'}"]


def binding_lines(res: Result) -> list[str]:
    """The binding-SLO count, per world and over all: units whose throughput-best config fails
    the SLO at the rate to serve, and those out of reach."""
    b = res.get("binding_slo")
    if b is None:
        return []
    lines = [f"binding SLO ({b['rule']})"]
    per = [(name, w["binding_slo"]) for name, w in res["worlds"].items() if "binding_slo" in w]
    for name, c in [*per, ("all worlds", b)]:
        lines.append(
            f"  {name}: the throughput-best config fails the SLO at the rate to serve in "
            f"{c['binding_units']} of {c['units']} units "
            f"({'PASS' if 2 * c['binding_units'] >= c['units'] else 'FAIL'} at least half)"
            + (f": {', '.join(c['which'])}" if c["which"] else "")
            + (f"; out of reach (scored by capacity at any rate, or under the workload's own "
               f"SLO): {', '.join(c['out_of_reach'])}" if c["out_of_reach"] else ""))
    return lines
