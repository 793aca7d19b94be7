"""The daemon as a real process: re-tunes on a traffic change, skips undrifted workloads,
stops on SIGTERM with exit 0, and a run killed with SIGKILL resumes without repeating trials."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.policy import DEFAULT_POLICY_PATH
from autotune.store import Store

pytestmark = pytest.mark.slow


def quick_policy(path: Path, trials: int) -> Path:
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    data["budget"]["trials"] = trials
    data["search"]["strategy"] = "grid"  # what is judged here is not the search
    data["replay"]["max_requests"] = 30
    data["replay"]["warmup_requests"] = 2
    path.write_text(yaml.safe_dump(data))
    return path


def two_workloads(src: Path, dst: Path, scale_code_output: int = 1) -> Path:
    rows = [json.loads(x) for x in src.read_text().splitlines()]
    rows = [r for r in rows if r["workload"] in ("code", "math")]
    for r in rows:
        if r["workload"] == "code":
            r["output_tokens"] *= scale_code_output
    dst.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dst


def autotune(*args: str | Path, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "autotune.cli", *map(str, args)], cwd=cwd,
                            stdout=open(cwd / "out.log", "a"), stderr=open(cwd / "err.log", "a"),
                            text=True, env={**os.environ, "COLUMNS": "200"})


def wait_for(what: str, check: Callable[[], Any], timeout: float = 180.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def read(db: str, what: str) -> list[dict[str, Any]]:
    """Rows of ``runs`` or ``trials`` (empty while the database is not created yet)."""
    try:
        store = Store.open(db)
    except Exception:
        return []
    try:
        return [r.to_json() for r in getattr(store, what)()]
    finally:
        store.close()


def finished_runs(db: str) -> list[dict[str, Any]]:
    return [r for r in read(db, "runs") if r["status"] == "finished"]


def finished_trials(db: str) -> list[dict[str, Any]]:
    return [t for t in read(db, "trials") if t["state"] == "complete"]


def test_daemon_retunes_on_change_skips_undrifted_and_stops_on_sigterm(
        tmp_path: Path, small_sample: Path) -> None:
    traffic = two_workloads(small_sample, tmp_path / "traffic.jsonl")
    policy = quick_policy(tmp_path / "p.yaml", trials=2)
    db = f"sqlite:///{tmp_path / 'a.db'}"
    proc = autotune("start", "--traffic", traffic, "--policy", policy, "--db", db,
                    "--every", "1h", "--state-file", tmp_path / "st.json", "--export-dir",
                    tmp_path / "ex", "--replicas", "1", cwd=tmp_path)
    try:
        wait_for("the first pass", lambda: len(finished_runs(db)) == 1)
        first = finished_runs(db)[0]["run"]
        state = wait_for("sleeping state", lambda: (
            json.loads((tmp_path / "st.json").read_text())
            if (tmp_path / "st.json").exists() and
            json.loads((tmp_path / "st.json").read_text())["status"] == "sleeping" else None))
        assert state["last_run"] == first and state["next_pass"]

        two_workloads(small_sample, traffic, scale_code_output=6)  # code drifts, math does not
        wait_for("the change-triggered pass", lambda: len(finished_runs(db)) == 2)
        second = finished_runs(db)[0]["run"]
        store = Store.open(db)
        tuned = {t.workload for t in store.trials(second)}
        assert tuned == {"code"}
        err = (tmp_path / "err.log").read_text()
        assert "math: skipped, not drifted" in err
        assert "pass triggered by: traffic file changed" in err

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        final = json.loads((tmp_path / "st.json").read_text())
        assert final["status"] == "stopped"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigkill_then_restart_resumes_the_same_run(tmp_path: Path, small_sample: Path) -> None:
    traffic = two_workloads(small_sample, tmp_path / "traffic.jsonl")
    policy = quick_policy(tmp_path / "p.yaml", trials=5)
    db = f"sqlite:///{tmp_path / 'a.db'}"
    args = ("start", "--traffic", traffic, "--policy", policy, "--db", db, "--once",
            "--export-dir", tmp_path / "ex", "--replicas", "1")
    proc = autotune(*args, cwd=tmp_path)
    try:
        wait_for("three finished trials", lambda: len(finished_trials(db)) >= 3)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    before = {(t["workload"], t["number"]): t for t in finished_trials(db)}
    store = Store.open(db)
    (killed,) = (r.to_json() for r in store.runs())
    assert killed["status"] == "running"

    again = autotune(*args, cwd=tmp_path)
    assert again.wait(timeout=300) == 0, (tmp_path / "err.log").read_text()
    (run,) = (r.to_json() for r in store.runs())
    assert run["run"] == killed["run"] and run["status"] == "finished"
    trials = [t.to_json() for t in store.trials(run["run"])]
    keys = [(t["workload"], t["number"]) for t in trials]
    assert len(keys) == len(set(keys)) == 2 * 5
    for key, old in before.items():
        now = next(t for t in trials if (t["workload"], t["number"]) == key)
        assert now["id"] == old["id"] and now["params"] == old["params"]
        assert now["metrics"] == old["metrics"]  # not measured again
    assert f"resuming run {killed['run']}" in (tmp_path / "err.log").read_text()
