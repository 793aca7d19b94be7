"""The predictor sees measurements only: no import path from autotune.predict,
autotune.search or autotune.acceptance into autotune.backends (where the simulator's hidden
truth lives)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "autotune"


def _module_file(name: str) -> Path | None:
    rel = Path(*name.split("."))
    root = PACKAGE.parent
    for candidate in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _runtime_imports(path: Path, module: str) -> set[str]:
    """Every autotune module imported by ``path``, including inside functions, except under
    ``if TYPE_CHECKING:`` (never executed)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                and node.test.id == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m.split(".")[0] == "autotune" and _module_file(m)}


def _reachable(roots: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = _module_file(name)
        if path is not None:
            todo.extend(_runtime_imports(path, name))
            parent = name.rpartition(".")[0]
            if parent:
                todo.append(parent)  # importing a module runs its package's __init__
    return seen


def _modules(sub: str) -> list[str]:
    return [".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).replace(".__init__", "")
            for p in (PACKAGE / sub).rglob("*.py")]


def test_no_static_import_path_into_backends() -> None:
    roots = _modules("predict") + _modules("search") + _modules("acceptance")
    assert "autotune.predict.predictor" in roots and "autotune.search.guided" in roots
    reached = _reachable(roots)
    assert "autotune.acceptance.calibration" in reached  # the walk does follow imports
    leaks = sorted(m for m in reached if m.startswith("autotune.backends"))
    assert not leaks, f"autotune.predict/search/acceptance reach the backends through {leaks}"


def test_a_prediction_loads_no_backend_module() -> None:
    code = """
import sys
from autotune.objective import Outcome
from autotune.search.guided import Guide
from autotune.predict import Observation, Predictor
from autotune.predict.facts import kimi_h200_facts
from autotune.types import AcceptanceCounts, Request, Slo, TrialConfig
reqs = [Request(id=str(i), prompt_tokens=200, output_tokens=100, arrival_s=i * 0.5,
                acceptance=(0.8,) * 8) for i in range(60)]
configs = [TrialConfig(n, False, s, 4096) for n in (1, 3, 5) for s in (8, 64)]
p = Predictor(reqs, configs, block=8, objective="goodput", slo=Slo(3000, 60), warmup=4,
              facts=kimi_h200_facts())
g = Guide(p, 0.005)
counts = AcceptanceCounts(1000, 7000, 2500, (700, 500, 400, 300, 250, 200, 150))
g.observe(TrialConfig(7, False, 1024, 8192),
          Outcome(1.0, {}, {"acceptance": counts.as_dict(), "load_scale": 1.0,
                            "itl_p99_ms": 40.0, "ttft_p99_ms": 300.0, "tpot_mean_ms": 20.0,
                            "requests_per_s": 1.0, "output_tokens_per_s": 100.0}))
assert g.propose().config is not None or g.decisions
leaked = sorted(m for m in sys.modules if m.startswith("autotune.backends"))
assert not leaked, leaked
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
