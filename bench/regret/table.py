"""Print a regret result's per-world summary as a Markdown table (one row per world and one over
all of them), read from a results file: ``--out``'s JSON, ``--detail``'s or
``python -m bench.regret.merge``'s (``bench/results/regret/regret-worlds.json``). With the units'
details in the file (``--detail``, merge), the last column says which of the targets
(:func:`bench.regret.report.checks`) each row misses, or "all met". Where the runs carry their
cost, guided's median GPU-hours and the regret at an equal GPU-hour budget (guided's at its
stop, TPE's when its spending stops at guided's, and guided's over TPE's); under a binding
SLO, the units whose throughput-best config fails it at the rate to serve, of the units.

    .venv/bin/python -m bench.regret.table bench/results/regret/regret-worlds.json
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.regret.records import Detail, MethodSummary, Result, Summary, read_results
from bench.regret.report import checks

HEADER = ("| world | guided median / worst | guided median runs | guided at 6 runs | "
          "TPE at 6 runs | TPE median / worst | random median / worst | grid median / worst | "
          "default | guided GPU-h | at guided's GPU-h: guided / TPE (ratio) | binding units |")
TARGETS = " targets |"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2%}"


def _pair(methods: Mapping[str, MethodSummary], m: str) -> str:
    if m not in methods:
        return "-"
    return f"{_pct(methods[m]['median_regret'])} / {_pct(methods[m].get('max_regret'))}"


def _economy(summary: Summary) -> list[str]:
    """The GPU-hours, equal-GPU-hour and binding-SLO cells ("-" where the result has none)."""
    eq, b = summary.get("equal_gpu_h"), summary.get("binding_slo")
    at = "-"
    if eq is not None and "tpe" in eq["at_guided_gpu_h"]:
        ratio = eq["guided_over_tpe"]
        at = (f"{_pct(eq['guided'])} / {_pct(eq['at_guided_gpu_h']['tpe'])} "
              f"({'-' if ratio is None else f'{ratio:.2f}'})")
    return [f"{eq['gpu_h']:.3g}" if eq is not None else "-", at,
            f"{b['binding_units']} / {b['units']}" if b is not None else "-"]


def missed(name: str, summary: Summary, units: Sequence[Detail]) -> str:
    """The targets a row misses, "all met" when none: the FAIL clauses of :func:`checks`."""
    clauses = [c.strip() for line in checks(name, summary, units)
               for c in line.removeprefix(f"{name}:").split(";")]
    failed = [c.removeprefix("FAIL ") for c in clauses if c.startswith("FAIL")]
    return "all met" if not failed else "misses: " + "; ".join(failed)


def row(name: str, summary: Summary, units: Sequence[Detail] | None = None) -> str:
    """One world's (or the summary's) row of :data:`HEADER` (with ``units``, and the targets
    column)."""
    ms = summary["methods"]
    g, t = ms.get("guided"), ms.get("tpe")
    cells = [name, _pair(ms, "guided"),
             f"{g['median_runs']:g}" if g else "-",
             _pct(g["regret_at_6"]) if g else "-",
             _pct(t["regret_at_6"]) if t else "-",
             _pair(ms, "tpe"), _pair(ms, "random"), _pair(ms, "grid"),
             _pct(ms["default"]["median_regret"]), *_economy(summary)]
    if units is not None:
        cells.append(missed(name, summary, units))
    return "| " + " | ".join(cells) + " |"


def markdown(res: Result, units: Mapping[str, Sequence[Detail]] | None = None) -> str:
    """The table of a result (``{"worlds": ..., "summary": ...}``); with ``units`` (per world,
    its units' details), a targets column."""
    worlds = res["worlds"]
    header = HEADER + TARGETS if units is not None else HEADER
    lines = [header, "|" + "---|" * header.count(" | ") + "---|"]
    lines += [row(name, summary, None if units is None else units[name])
              for name, summary in worlds.items()]
    if res.get("summary"):
        every = None if units is None else [u for name in worlds for u in units[name]]
        lines.append(row(f"all {len(worlds)} worlds", res["summary"], every))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.regret.table",
                                     description=__doc__.split("\n\n", 1)[0].replace("\n", " "))
    parser.add_argument("file", type=Path, help="a regret results file (JSON)")
    args = parser.parse_args(argv)
    print(markdown(*read_results(args.file)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
