"""End to end: `autotune start --once` on the simulator, then the read commands and export."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from autotune.cli import cli
from autotune.policy import DEFAULT_POLICY_PATH
from autotune.types import SPECULATIVE_CONFIG_KEYS


@pytest.fixture
def quick_policy(tmp_path: Path) -> Path:
    """The default policy with a small budget and short replays, so the test stays fast."""
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    data["budget"]["trials"] = 2
    data["replay"]["max_requests"] = 40
    data["replay"]["warmup_requests"] = 4
    path = tmp_path / "quick.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.slow
def test_start_once_recommends_and_exports_every_workload(
        tmp_path: Path, small_sample: Path, quick_policy: Path, db_url: str) -> None:
    exports = tmp_path / "exports"
    code, started, err = run("start", "--traffic", small_sample, "--policy", quick_policy,
                             "--db", db_url, "--once", "--export-dir", exports, "--seed", "1")
    assert code == 0, err
    assert "recommendations" in started

    code, out, _ = run("recommendations", "--db", db_url, "--format", "json")
    recs = json.loads(out)
    workloads = {json.loads(line)["workload"] for line in small_sample.read_text().splitlines()}
    assert {r["workload"] for r in recs} == workloads
    for r in recs:  # infeasible: no config serves the sample's busiest minute within the SLO
        assert r["status"] in ("active", "candidate", "infeasible")
        for key in ("workload", "config", "speculative_config", "objective", "value",
                    "baseline_value", "speedup_vs_baseline", "run", "backend", "traffic",
                    "policy", "created_at"):
            assert key in r, key

    active = [r["workload"] for r in recs if r["status"] == "active"]
    assert active, "at least one workload should meet the default SLOs on the example sample"
    code, out, _ = run("export", "--workload", active[0], "--db", db_url)
    assert code == 0
    spec = json.loads(out)
    assert spec["method"] == "dspark" and spec["model"] == "novita/kimi-k2.6-dspark"
    assert 1 <= spec["num_speculative_tokens"] <= 8
    assert set(spec) <= SPECULATIVE_CONFIG_KEYS
    written = exports / f"{active[0]}.speculative-config.json"
    assert json.loads(written.read_text()) == spec

    code, out, _ = run("runs", "--db", db_url, "--format", "json")
    (run_row,) = json.loads(out)
    assert run_row["status"] == "finished" and run_row["backend"] == "sim"
    assert set(run_row) >= {"run", "status", "backend", "policy", "traffic", "started_at",
                            "finished_at"}
    code, out, _ = run("trials", "--db", db_url, "--run", run_row["run"], "--format", "json")
    trials = json.loads(out)
    # every workload's trials are listed: its baseline, and its search's until it stopped, at
    # the budget of 2 or by the guided stop rule, as the pass said of each
    per_workload = Counter(t["workload"] for t in trials)
    assert set(per_workload) == workloads and all(1 <= n <= 2 for n in per_workload.values())
    said = " ".join(started.split())
    spent = sum(1 for n in per_workload.values() if n == 2)
    assert said.count("search stopped: budget of 2 trials spent") == spent
    stopped = "search stopped: the best expected improvement left"
    assert said.count(stopped) == len(workloads) - spent
    assert all(t["state"] == "complete" and t["metrics"]["requests"] > 0 for t in trials)
    assert sum(t["baseline"] for t in trials) == len(workloads)


def test_bad_sample_writes_nothing(tmp_path: Path, db_url: str) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt_tokens": 5, "output_tokens": 3}\n'
                   '{"prompt_tokens": 5, "output_tokens": -1}\n')
    code, _, err = run("start", "--traffic", bad, "--db", db_url, "--once")
    assert code == 2
    assert f"{bad}:2: output_tokens: must be >= 1" in err
    assert "Traceback" not in err
    # the sample is read before the database is opened: no database was created
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]
    code, _, err = run("runs", "--db", db_url, "--format", "json")
    assert code == 1 and "no autotune database" in err


def test_bad_policy_and_flags(tmp_path: Path, small_sample: Path, db_url: str) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("name: x\nserve: {model: m}\nobjective: {maximise: goodput}\n")
    code, _, err = run("start", "--traffic", small_sample, "--policy", policy, "--db", db_url,
                       "--once")
    assert code == 2 and "objective.maximise: unknown key" in err
    code, _, err = run("start", "--traffic", small_sample, "--budget-trials", "0", "--once")
    assert code == 2 and "--budget-trials" in err
    code, _, err = run("export", "--workload", "nope", "--db", db_url)
    assert code == 1 and "no autotune database at" in err  # the bad starts wrote nothing


def test_real_subprocess_reports_errors_without_traceback(tmp_path: Path, db_url: str) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    proc = subprocess.run([sys.executable, "-m", "autotune.cli", "start", "--traffic",
                           str(empty), "--db", db_url, "--once"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "empty.jsonl: it holds no requests" in proc.stderr
    assert "Traceback" not in proc.stderr
