"""Merge ``python -m bench.regret`` detail files of runs over the same oracles into one result.

A run of ``python -m bench.regret`` with ``--methods guided`` re-scores one method after a
change to it; the other methods' rows come from an earlier run's ``--detail`` file. That is only
sound when both runs read the same oracle: the oracle of a (world, workload) depends on the
simulator and the capacity search alone (its readings are cached under their hash), and the
methods share nothing but the oracle and the fresh replays. So every unit present in two files
must name the same oracle config with the same value, or the merge stops and says which unit
differs.

Later files win: each (world, workload, method) takes its runs from the last file that has
them. The output is the ``--detail`` shape with a ``provenance`` entry in the
result naming, per world and method, the file its rows came from (for a merged input, the file
its own provenance names).

    .venv/bin/python -m bench.regret.merge old.json guided.json --out merged.json \\
        --drop vllm-cpu/eps005
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.regret.records import Detail, DetailFile, Provenance, Units, read_results
from bench.regret.report import checks, result

TOLERANCE = 1e-12


def merge(files: list[Path], drop: set[str]) -> tuple[Units, dict[str, dict[str, str]],
                                                     dict[str, int]]:
    """Units by world, the file each world's method rows came from, and seeds per world."""
    units: dict[str, dict[str, Detail]] = {}
    source: dict[str, dict[str, str]] = {}
    seeds: dict[str, int] = {}
    for path in files:
        res, details = read_results(path)
        if details is None:
            raise SystemExit(f"{path}: keeps no units' details: merge --detail files")
        # a merged file passes on where its rows came from, not its own name
        earlier = res["provenance"]["merged_from"] if "provenance" in res else {}
        for world, rows in details.items():
            if world in drop or world not in res["worlds"]:
                continue
            seeds[world] = res["worlds"][world]["seeds"]
            for unit in rows:
                have = units.setdefault(world, {}).get(unit["workload"])
                if have is None:
                    have = units[world][unit["workload"]] = unit.copy()
                    have["runs"] = dict(unit["runs"])
                elif (have["oracle"] != unit["oracle"]
                      or abs(have["oracle_value"] - unit["oracle_value"]) > TOLERANCE):
                    raise SystemExit(
                        f"{path}: {world} {unit['workload']}: oracle {unit['oracle']} = "
                        f"{unit['oracle_value']}, an earlier file has {have['oracle']} = "
                        f"{have['oracle_value']}: the runs did not read the same oracle")
                for method, runs in unit["runs"].items():
                    have["runs"][method] = runs
                    source.setdefault(world, {})[method] = earlier.get(world, {}).get(
                        method, str(path))
    by_world = {w: list(u.values()) for w, u in units.items()}
    for world, rows in by_world.items():
        methods = {frozenset(u["runs"]) for u in rows}
        if len(methods) != 1:
            raise SystemExit(f"{world}: its units were scored by different methods "
                             f"({sorted(map(sorted, methods))}); merge files that cover every "
                             f"unit of a world")
    return by_world, source, seeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.regret.merge",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, help="detail files, later ones win")
    parser.add_argument("--out", type=Path, required=True, help="the merged detail file")
    parser.add_argument("--drop", nargs="*", default=[], help="worlds left out")
    parser.add_argument("--note", default="", help="provenance note kept in the result")
    args = parser.parse_args(argv)
    by_world, source, seeds = merge(args.files, set(args.drop))
    order = list(dict.fromkeys(u["workload"] for rows in by_world.values() for u in rows))
    out = result(by_world, order, seeds)
    provenance: Provenance = {"merged_from": source}
    if args.note:
        provenance["note"] = args.note
    out["provenance"] = provenance
    merged: DetailFile = {"result": out, "units": by_world}
    args.out.write_text(json.dumps(merged, indent=1, default=str))
    for name, details in by_world.items():
        for line in checks(name, out["worlds"][name], details):
            print(line)
    every = [u for details in by_world.values() for u in details]
    for line in checks("summary", out["summary"], every):
        print(line)
    print(json.dumps({k: out[k] for k in ("worlds", "summary")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
