"""Paths built from input stay in their directory; processes never go through a shell; servers
bind to loopback unless told otherwise; SQL strings are never built from input.

The last three are audits of the source: a rule the code must keep (as the layering test does),
with the reviewed exceptions listed by name.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.backends.vllm._backend import VllmBackend
from autotune.backends.vllm._options import parse_options
from autotune.export import export_stem, render
from autotune.policy import load_policy
from autotune.store import RecommendationRecord
from autotune.types import TrialConfig

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "autotune"

HOSTILE_LABELS = ["../../etc/x", "..", ".", "/abs/path", "a/b", "a_b", "a b", ".hidden",
                  "x" * 300, "语言模型" * 40, "nul\x00byte", "~root", "$(touch pwned)",
                  "</script><script>alert(1)</script>", "C:\\windows\\x", "chat"]


def test_export_stems_stay_in_the_directory_and_never_collide(tmp_path: Path) -> None:
    stems = [export_stem(label) for label in HOSTILE_LABELS]
    assert len(set(stems)) == len(stems), "two labels share an export file"
    for label, stem in zip(HOSTILE_LABELS, stems, strict=True):
        name = f"{stem}.speculative-config.json"
        assert "/" not in name and "\\" not in name and not name.startswith(".")
        assert len(name.encode()) <= 255, (label, len(name.encode()))
        (tmp_path / name).write_text("{}")  # a valid file name on this file system
    assert export_stem("chat") == "chat" and export_stem("long-prompt_v2.1") == "long-prompt_v2.1"
    assert sorted(p.parent for p in tmp_path.iterdir()) == [tmp_path] * len(stems)


def test_vllm_args_export_is_shell_safe() -> None:
    """What `export --format vllm-args` prints runs the same argv however hostile the policy."""
    rec = RecommendationRecord(
        id=1, workload="w\nid; touch /tmp/pwned", status="active",
        config={"num_speculative_tokens": 3, "enable_adaptive_verification": False,
                "max_num_seqs": 8, "max_num_batched_tokens": 2048},
        speculative_config={"method": "dspark", "model": "d'; id; '",
                            "num_speculative_tokens": 3},
        serve={"model": "m; touch /tmp/pwned", "extra_args": ["--x", "$(id)", "`id`"]},
        objective="goodput", value=1.0, value_ci=None, baseline_value=None,
        speedup_vs_baseline=None, gain=None, gain_ci=None, compared_with=None, run="r",
        trial_id=None, backend="sim", provenance={"vllm_version": "0.33\nid"}, reason="",
        created_at=None, promoted_at=None, retired_at=None, retired_by=None)
    line = render(rec, "vllm-args")
    comment, command = line.rstrip("\n").split("\n")  # the note stays one comment line
    assert comment.startswith("# ")
    argv = shlex.split(command)
    assert argv[:3] == ["vllm", "serve", "m; touch /tmp/pwned"]
    assert argv[-3:] == ["--x", "$(id)", "`id`"]
    assert json.loads(argv[argv.index("--speculative-config") + 1])["model"] == "d'; id; '"


def test_vllm_servers_bind_to_loopback_unless_told_otherwise() -> None:
    serve = load_policy(None).serve.spec()
    config = TrialConfig(num_speculative_tokens=3, enable_adaptive_verification=False,
                         max_num_seqs=8, max_num_batched_tokens=2048)
    argv = VllmBackend(serve, parse_options({})).argv(config, 8001)
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    told = VllmBackend(serve, parse_options({"host": "10.0.0.5"})).argv(config, 8001)
    assert told[told.index("--host") + 1] == "10.0.0.5"


def _calls(path: Path) -> list[tuple[str, ast.Call]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            out.append((ast.unparse(node.func), node))
    return out


SOURCES = sorted(p for p in PACKAGE.rglob("*.py"))


def test_no_subprocess_goes_through_a_shell() -> None:
    found = []
    for path in SOURCES:
        for name, call in _calls(path):
            shell = [k for k in call.keywords if k.arg == "shell"]
            if any(not (isinstance(k.value, ast.Constant) and k.value.value is False)
                   for k in shell):
                found.append(f"{path.relative_to(REPO)}:{call.lineno} {name}(shell=...)")
            if name in ("os.system", "os.popen", "os.spawnlp", "os.execlp", "commands.getoutput",
                        "subprocess.getoutput", "subprocess.getstatusoutput"):
                found.append(f"{path.relative_to(REPO)}:{call.lineno} {name}")
            if name.endswith(("Popen", "subprocess.run", "check_output", "check_call",
                              "create_subprocess_exec")) and call.args and \
                    isinstance(call.args[0], ast.Constant | ast.JoinedStr):
                found.append(f"{path.relative_to(REPO)}:{call.lineno} {name} with a string")
    assert found == []


#: SQL built with an f-string, reviewed: every interpolated name is a constant of the code.
REVIEWED_SQL = {
    ("autotune/store/schema.py", "f'SELECT version_num FROM {VERSION_TABLE}'"),
    ("autotune/store/engine.py", "f'PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}'"),
    ("autotune/store/migrations/versions/0002_prefix_and_lifecycle.py",
     "f'ALTER TABLE {_q(new)} RENAME CONSTRAINT {_q(old)} TO {_q(target)}'"),
    ("autotune/store/migrations/versions/0002_prefix_and_lifecycle.py",
     "f\"ALTER SEQUENCE {seq} RENAME TO {_q(f'{new}_id_seq')}\""),
    ("autotune/store/migrations/versions/0002_prefix_and_lifecycle.py",
     "f'SELECT COUNT(*) FROM {_q(table)}'"),
}


def test_sql_strings_are_constants_or_reviewed() -> None:
    """SQL passes through the ORM or bound parameters; a formatted SQL string must be one of
    the reviewed few (names from the code, never values from input)."""
    found = set()
    for path in SOURCES:
        for name, call in _calls(path):
            if name.split(".")[-1] not in ("execute", "exec_driver_sql", "text") or \
                    not call.args:
                continue
            arg = call.args[0]
            if isinstance(arg, ast.Call) and ast.unparse(arg.func).split(".")[-1] == "text":
                arg = arg.args[0] if arg.args else arg
            if isinstance(arg, ast.Constant):
                continue
            if isinstance(arg, ast.JoinedStr | ast.BinOp) or (
                    isinstance(arg, ast.Call) and ast.unparse(arg.func).endswith("format")):
                found.add((str(path.relative_to(REPO)), ast.unparse(arg)))
    assert found == REVIEWED_SQL


@pytest.mark.slow
def test_hostile_workload_labels_through_a_pass(tmp_path: Path) -> None:
    """A sample whose labels try to escape: exports stay in --export-dir, the report escapes."""
    sample = tmp_path / "s.jsonl"
    labels = ["../../escape", "</script><script>alert(1)</script>"]
    sample.write_text("".join(
        json.dumps({"id": f"{w}-{i}", "arrival_s": i * 0.5, "workload": w,
                    "prompt_tokens": 200 + 10 * i, "output_tokens": 50 + i,
                    "acceptance": [0.9, 0.8, 0.7]}) + "\n" for i in range(30) for w in labels))
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    db = f"sqlite:///{tmp_path / 'at.db'}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def autotune(*args: str) -> None:
        proc = subprocess.run([sys.executable, "-c", "from autotune.cli import main; main()",
                               *args], cwd=work, env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr

    autotune("start", "--once", "--traffic", str(sample), "--db", db, "--export-dir", "exp",
             "--budget-trials", "1", "--replicas", "1")
    autotune("report", "--db", db, "-o", "report.html")
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    exports = [f for f in files if "speculative-config" in f]
    assert exports == sorted(f"a/b/exp/{export_stem(w)}.speculative-config.json"
                             for w in labels)
    assert set(files) - set(exports) == {"s.jsonl", "at.db", "a/b/report.html"}
    html = (work / "report.html").read_text()
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html
