"""Imports flow one way (DESIGN §3): cli → daemon → orchestrate → search, backends →
acceptance, traffic, store, export → types. Checked on the source, import by import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "autotune"

#: layer -> the autotune layers it must never import
FORBIDDEN = {
    "types": {"*"},
    "errors": {"*"},
    "backends": {"search", "store", "orchestrate", "daemon", "cli", "ui", "report"},
    "search": {"backends", "orchestrate", "daemon", "cli", "ui", "report"},
    "acceptance": {"backends", "search", "orchestrate", "daemon", "cli", "ui", "report"},
    "traffic": {"backends", "search", "store", "orchestrate", "daemon", "cli", "ui"},
    "store": {"backends", "orchestrate", "daemon", "cli", "ui", "report"},
    "export": {"backends", "search", "orchestrate", "daemon", "cli", "ui"},
    "orchestrate": {"daemon", "cli", "ui", "report"},
    "daemon": {"cli", "ui"},
    "report": {"backends", "orchestrate", "daemon", "cli"},
}


def layer_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


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


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_flow_one_way(path: Path) -> None:
    layer = layer_of(path)
    banned = FORBIDDEN.get(layer, set())
    imported = autotune_imports(path) - {layer}
    bad = imported if "*" in banned else imported & banned
    assert not bad, f"{path.relative_to(PACKAGE.parent)} ({layer}) imports {sorted(bad)}"


def test_nothing_imports_the_cli() -> None:
    users = [p for p in MODULES if layer_of(p) != "cli" and "cli" in autotune_imports(p)]
    assert not users
