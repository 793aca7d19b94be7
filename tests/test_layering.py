"""Imports flow one way (docs/architecture.md, "Import rules"), checked on the source, import by
import: every part of ``autotune/`` may import only the parts listed for it below, and every
part must be listed (a new package has to take its place in the order)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "autotune"

_BASE = {"errors", "knee_search", "redact", "slo", "types"}
#: part -> the autotune parts it may import (besides itself)
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "redact": set(),
    "knee_search": set(),
    "slo": {"knee_search"},
    "cost": set(),
    "types": {"slo"},
    "objective": {"slo", "types"},
    "policy": _BASE,
    "acceptance": _BASE,
    "traffic": _BASE,
    "backends": _BASE,
    "store": _BASE,
    "export": _BASE | {"store"},
    "predict": _BASE | {"acceptance"},
    "search": _BASE | {"acceptance", "cost", "objective", "policy", "predict"},
    "recommend": _BASE | {"acceptance", "export", "objective", "policy", "store"},
    "orchestrate": _BASE | {"acceptance", "backends", "cost", "export", "objective", "plan",
                            "policy", "recommend", "search", "store", "traffic"},
    "plan": _BASE | {"export", "objective", "policy", "recommend", "store"},
    "report": _BASE | {"cost", "export", "plan", "policy", "store"},
    "daemon": _BASE | {"export", "orchestrate", "store", "traffic"},
    "ui": _BASE | {"cost", "objective", "orchestrate", "plan", "policy", "recommend", "search",
                   "store", "traffic"},
    "cli": _BASE | {"backends", "cost", "daemon", "export", "orchestrate", "plan", "policy",
                    "report",
                    "store", "traffic", "ui"},
}


def part_of(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def autotune_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "autotune" and len(parts) > 1:
                found.add(parts[1])
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts)
PARTS = sorted({part_of(p) for p in MODULES} - {"__init__"})


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_flow_one_way(path: Path) -> None:
    part = part_of(path)
    if part == "__init__":
        assert not autotune_imports(path), "autotune/__init__.py imports nothing of autotune"
        return
    imported = autotune_imports(path) - {part}
    bad = imported - ALLOWED[part]
    assert not bad, f"{path.relative_to(PACKAGE.parent)} ({part}) imports {sorted(bad)}"


def test_every_part_has_a_place_in_the_order() -> None:
    assert set(PARTS) <= set(ALLOWED), f"unplaced parts: {sorted(set(PARTS) - set(ALLOWED))}"


def test_the_order_has_no_cycle() -> None:
    import graphlib

    graphlib.TopologicalSorter(ALLOWED).static_order()  # raises CycleError on a cycle


def test_nothing_imports_the_cli() -> None:
    users = [p for p in MODULES if part_of(p) != "cli" and "cli" in autotune_imports(p)]
    assert not users


def test_nothing_of_autotune_imports_the_benchmarks() -> None:
    """bench/ (the benchmarks, the simulator's calibration) builds on autotune, never the
    reverse: the runtime ships without it."""
    users = []
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            if any(n == "bench" or n.startswith("bench.") for n in names):
                users.append(str(path.relative_to(PACKAGE.parent)))
    assert not users
