"""``autotune status`` names who holds the daemon's lease: host, pid and since, read from the
database, for a real daemon process (held at the start of its first pass, when it holds the
lease), and says when none is held once it stopped."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from holds import Holds
from signal_cases import REPO, write_inputs


def _env() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "200",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def _status(tmp: Path, db: str, *extra: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "autotune.cli", "status", "--db", db,
                           "--state-file", str(tmp / "daemon.json"), *extra], cwd=tmp,
                          capture_output=True, text=True, env=_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_status_names_the_lease_holder(tmp_path: Path, any_db: str) -> None:
    traffic, policy = write_inputs(tmp_path)
    holds = Holds(tmp_path / "holds")
    holds.hold_at("loading@1")
    before = datetime.now(UTC).replace(microsecond=0)
    daemon = subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "start", "--traffic", str(traffic), "--policy",
         str(policy), "--db", any_db, "--every", "1h", "--state-file",
         str(tmp_path / "daemon.json"), "--replicas", "1", "--export-dir",
         str(tmp_path / "exports")],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=holds.env(_env()))
    try:
        assert holds.wait(daemon, timeout_s=120).pid == daemon.pid
        out = _status(tmp_path, any_db)
        line = next(x for x in out.splitlines() if x.startswith("lease on "))
        assert line.startswith(f"lease on {traffic.resolve()}: held by autotune start on host "
                               f"{socket.gethostname()}, pid {daemon.pid} (since "), out
        (lease,) = json.loads(_status(tmp_path, any_db, "--format", "json"))[0]["leases"]
        assert (lease["host"], lease["pid"], lease["command"], lease["live"]) == (
            socket.gethostname(), daemon.pid, "start", True)
        since = datetime.fromisoformat(lease["since"])
        assert before - timedelta(seconds=1) <= since <= datetime.now(UTC)
        assert f"(since {since:%Y-%m-%d %H:%M:%S} UTC" in line
    finally:
        daemon.send_signal(signal.SIGTERM)
        holds.release()
        daemon.wait(timeout=120)
    assert daemon.returncode == 0
    out = _status(tmp_path, any_db)
    assert "lease: none held" in out and "lease on " not in out
    assert json.loads(_status(tmp_path, any_db, "--format", "json"))[0]["leases"] == []
