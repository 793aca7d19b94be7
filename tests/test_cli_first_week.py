"""What a user meets in a first week, as they see it: ``recommendations`` says every workload's
newest result when none is active, ``status`` names who holds the daemon's lease."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from autotune.cli import cli
from autotune.policy import DEFAULT_POLICY_PATH


def write_policy(path: Path, **changes: Any) -> Path:
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    data["budget"]["trials"] = 2
    data["search"]["strategy"] = "grid"  # what is judged here is not the search
    data["replay"]["max_requests"] = 30
    data["replay"]["warmup_requests"] = 2
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    path.write_text(yaml.safe_dump(data))
    return path


def run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def one_line(text: str) -> str:
    return " ".join(text.split())  # notes wrap at 100 columns


def start(db: str, sample: Path, policy: Path, *extra: str) -> None:
    code, _, err = run("start", "--traffic", sample, "--policy", policy, "--db", db, "--once",
                       "--replicas", "1", "--export-dir", Path(policy).parent / "exports",
                       *extra)
    assert code == 0, err


def test_recommendations_without_an_active_one_show_the_newest_result(
        tmp_path: Path, small_sample: Path) -> None:
    db = f"sqlite:///{tmp_path / 'a.db'}"
    # No config can meet a 5 ms p99 TTFT (prefill alone takes longer): every workload is
    # infeasible, so none has an active recommendation.
    start(db, small_sample, write_policy(tmp_path / "slo.yaml", **{"objective.slo.ttft_p99_ms": 5}))

    code, out, _ = run("recommendations", "--db", db)
    assert code == 0
    text = one_line(out)
    for workload in ("chat", "code", "math"):
        assert f"{workload} #" in text and "(infeasible, no active recommendation): infeasible:" \
            in text, out
    assert text.count("infeasible") >= 6  # a row and a note per workload
    code, out, _ = run("recommendations", "--db", db, "--workload", "nope")
    assert code == 0 and "no result for workload 'nope' yet; run: autotune start" in out
    code, out, _ = run("recommendations", "--db", db, "--format", "json")
    rows = json.loads(out)
    assert [r["workload"] for r in rows] == ["chat", "code", "math"]
    assert {r["status"] for r in rows} == {"infeasible"}
    assert all(r["reason"].startswith("infeasible:") and r["id"] for r in rows)

    # A newer run in which every trial fails (a launch command that does not exist) recommends
    # nothing: that is now each workload's newest result.
    broken = write_policy(tmp_path / "broken.yaml", **{
        "serve.command": [str(tmp_path / "no-such-vllm")], "serve.gpus_per_replica": 0,
        "budget.max_retries": 0})
    start(db, small_sample, broken, "--backend", "vllm")
    code, out, _ = run("recommendations", "--db", db, "--format", "json", "--workload", "code")
    (row,) = json.loads(out)
    assert row["status"] == "failed" and row["id"] is None and row["workload"] == "code"
    assert row["reason"].startswith("every trial failed (")
    assert f"autotune trials --run {row['run']} --workload code" in row["reason"]
    code, out, _ = run("recommendations", "--db", db)
    assert code == 0 and "failed" in out and "every trial failed" in one_line(out)
    assert "infeasible" not in out
    # the lineage keeps the infeasible results
    code, out, _ = run("recommendations", "--db", db, "--history", "--format", "json")
    assert {r["status"] for r in json.loads(out)} == {"infeasible"}

    # A pass with an SLO every config meets: the active recommendations are listed, and
    # nothing else.
    start(db, small_sample, write_policy(tmp_path / "ok.yaml", **{
        "objective.slo.ttft_p99_ms": 600_000, "objective.slo.itl_p99_ms": 600_000}))
    code, out, _ = run("recommendations", "--db", db, "--format", "json")
    rows = json.loads(out)
    assert {r["workload"]: r["status"] for r in rows} == {
        "chat": "active", "code": "active", "math": "active"}, rows
