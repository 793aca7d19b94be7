"""The shape of the source: small modules, and one meaning per public name.

Every module of ``autotune/`` stays within 600 lines, and no two public (non-underscore,
module-level) classes or functions share a name anywhere in ``autotune/``, so a name found in a
traceback, a doc or a grep points at one thing. Alembic's migration scripts are left out: each
must define ``upgrade`` and ``downgrade``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "autotune"
MAX_LINES = 600
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts)


def public_definitions(path: Path) -> list[str]:
    """Names of the public classes and functions defined at a module's top level."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return [node.name for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and not node.name.startswith("_")]


def test_the_walk_sees_the_package() -> None:
    names = {p.relative_to(PACKAGE).as_posix() for p in MODULES}
    assert {"cli/__init__.py", "policy.py", "backends/sim/_engine.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_is_at_most_600_lines(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, (f"{path.relative_to(PACKAGE.parent)} has {lines} lines (at most "
                                f"{MAX_LINES}): split it by concept")


def test_no_two_public_definitions_share_a_name() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in MODULES:
        for name in public_definitions(path):
            where[name].append(path.relative_to(PACKAGE.parent).as_posix())
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not shared, f"public names defined more than once: {shared}"


def test_the_checks_can_fail(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("class A: ...\ndef f(): ...\ndef _g(): ...\nx = 1\n", encoding="utf-8")
    assert public_definitions(module) == ["A", "f"]
