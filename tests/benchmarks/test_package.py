"""The benchmarks stay a package: every entry point imports and answers ``--help`` as
``python -m bench.<name>``, no module edits ``sys.path``, and bench's modules import one another
without a cycle."""

from __future__ import annotations

import ast
import graphlib
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
MODULES = sorted(BENCH.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def entry_points() -> list[str]:
    """Every module run as a program: a package's ``__main__`` is run as the package."""
    out = []
    for path in MODULES:
        if "__name__ == \"__main__\"" in path.read_text(encoding="utf-8"):
            name = module_name(path)
            out.append(name.removesuffix(".__main__"))
    return out


def test_every_entry_point_answers_help() -> None:
    names = entry_points()
    assert "bench.regret" in names  # the evaluation itself is found
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = {name: subprocess.Popen([sys.executable, "-m", name, "--help"], cwd=REPO, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name in names}
    failed = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        if proc.returncode != 0 or "usage:" not in out:
            failed[name] = f"exit {proc.returncode}: {err[-500:]}"
    assert not failed, failed


def _imports(path: Path) -> set[str]:
    """The bench modules ``path`` imports (type-checking-only imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        found |= {n for n in names if n == "bench" or n.startswith("bench.")}
    return found


def test_bench_modules_import_without_a_cycle() -> None:
    known = {module_name(p) for p in MODULES}
    graph = {module_name(p): {n for n in _imports(p) if n in known} - {module_name(p)}
             for p in MODULES}
    graphlib.TopologicalSorter(graph).static_order()  # raises CycleError on a cycle


def test_no_bench_module_edits_the_import_path() -> None:
    editing = [str(p.relative_to(REPO)) for p in MODULES
               if "sys.path" in p.read_text(encoding="utf-8")]
    assert not editing
