"""A run stopped while it recommends, resumed: one recommendation per workload, never two.

``autotune start --once`` is held (``tests/holds``) right after its first workload's
recommendation is stored and exported, and stopped there with SIGTERM; the same command then
resumes the run. Each workload of the run ends with exactly one recommendation: the one stored
before the stop is kept as it was, the other is added by the resumed run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from holds import Holds
from signal_cases import REPO, write_inputs

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "200",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def _cli(tmp: Path, *args: str) -> list[dict[str, object]]:
    proc = subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=tmp, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows: list[dict[str, object]] = json.loads(proc.stdout)
    return rows


def test_a_run_stopped_while_recommending_resumes_with_one_recommendation_per_workload(
        tmp_path: Path, any_db: str) -> None:
    traffic, policy = write_inputs(tmp_path)
    exports = tmp_path / "exports"
    start = [sys.executable, "-m", "autotune.cli", "start", "--traffic", str(traffic),
             "--policy", str(policy), "--db", any_db, "--once", "--replicas", "1",
             "--export-dir", str(exports)]
    holds = Holds(tmp_path / "holds")
    holds.hold_at("recommended")
    first = subprocess.Popen(start, cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=holds.env(_env()))
    try:
        holds.wait(first, timeout_s=240)
        first.send_signal(signal.SIGTERM)
    finally:
        holds.release()
    _, err = first.communicate(timeout=120)
    assert first.returncode == 130, err
    assert "interrupted: the run is marked interrupted" in err
    (run,) = _cli(tmp_path, "runs", "--db", any_db, "--format", "json")
    assert run["status"] == "interrupted"
    before = _cli(tmp_path, "recommendations", "--db", any_db, "--history", "--format", "json")
    assert len(before) == 1 and before[0]["run"] == run["run"]  # the first workload's only

    again = subprocess.run(start, cwd=tmp_path, capture_output=True, text=True, env=_env(),
                           timeout=600)
    assert again.returncode == 0, again.stderr
    assert f"resuming run {run['run']}" in again.stderr
    (resumed,) = _cli(tmp_path, "runs", "--db", any_db, "--format", "json")
    assert (resumed["run"], resumed["status"]) == (run["run"], "finished")
    after = _cli(tmp_path, "recommendations", "--db", any_db, "--history", "--format", "json")
    assert sorted(r["workload"] for r in after) == ["code", "math"], after
    assert {r["run"] for r in after} == {run["run"]}
    kept = next(r for r in after if r["workload"] == before[0]["workload"])
    assert {k: kept[k] for k in ("id", "status", "config", "value", "reason")} == {
        k: before[0][k] for k in ("id", "status", "config", "value", "reason")}
    # the pass's table lists both workloads, each with its one recommendation; an active one
    # is exported (again, for the one kept: the stop may have come before its export)
    for r in after:
        assert r["workload"] in again.stdout and r["status"] in again.stdout
        exported = exports / f"{r['workload']}.speculative-config.json"
        assert exported.is_file() == (r["status"] == "active"), (r, list(exports.iterdir()))
