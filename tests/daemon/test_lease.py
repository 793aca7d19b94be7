"""One process per database and traffic, with real processes on SQLite and PostgreSQL.

The holder is either this test process (through the same ``HeldLease`` the commands use) or a
real ``autotune start`` daemon held at the start of its first pass; the contender is the
other one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from signal_cases import REPO, write_inputs

from autotune.store import HeldLease, LeaseHeld, Store, leases

pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "COLUMNS": "200",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            **extra}


def _cli(*args: str | Path, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, env=_env(**env), timeout=120)


def _daemon(tmp: Path, db: str, traffic: Path, policy: Path,
            **env: str) -> subprocess.Popen[bytes]:
    """A daemon held at the start of its first pass (it holds the lease by then)."""
    hold = tmp / "hold"
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "start", "--traffic", str(traffic), "--policy",
         str(policy), "--db", db, "--every", "1h", "--state-file", str(tmp / "daemon.json"),
         "--replicas", "1", "--export-dir", str(tmp / "exports")],
        cwd=tmp, stdout=subprocess.DEVNULL, stderr=open(tmp / "daemon.log", "wb"),  # noqa: SIM115
        env=_env(AUTOTUNE_HOLD_AT="loading@1", AUTOTUNE_HOLD_FILE=str(hold), **env))
    deadline = time.monotonic() + 120
    while not hold.exists():
        assert proc.poll() is None, (tmp / "daemon.log").read_text()
        assert time.monotonic() < deadline, "the daemon never reached its first pass"
        time.sleep(0.05)
    return proc


def _runs(db: str) -> list[object]:
    store = Store.open(db)
    try:
        return list(store.runs())
    finally:
        store.close()


def test_a_second_start_or_nightly_is_refused_naming_the_holder(tmp_path: Path,
                                                                any_db: str) -> None:
    traffic, policy = write_inputs(tmp_path)
    store = Store.open(any_db)
    with HeldLease(store, traffic, "start"):
        args = ("--policy", policy, "--db", any_db, "--replicas", "1", "--export-dir",
                tmp_path / "exports")
        procs = [subprocess.Popen([sys.executable, "-m", "autotune.cli", *map(str, a)],
                                  cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=_env())
                 for a in (("start", "--traffic", traffic, "--once", *args),
                           ("nightly", "--traffic-dir", tmp_path, *args))]
        outs = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [3, 3], outs
        for stdout, stderr in outs:
            (line,) = [x for x in stderr.splitlines() if x.startswith("error:")]
            assert f"host {socket.gethostname()}, pid {os.getpid()}" in line
            assert f"traffic {traffic.resolve()} is already being tuned" in line
            assert "Traceback" not in stderr and stdout == ""
    assert _runs(any_db) == []  # the refused ones wrote nothing
    assert leases(store) == []  # released on leaving the block
    store.close()


def test_a_holder_killed_on_this_machine_is_taken_over_at_once(tmp_path: Path,
                                                               any_db: str) -> None:
    traffic, policy = write_inputs(tmp_path)
    daemon = _daemon(tmp_path, any_db, traffic, policy)
    store = Store.open(any_db)
    (held,) = leases(store)
    assert (held.pid, held.command, held.host) == (daemon.pid, "start", socket.gethostname())
    with pytest.raises(LeaseHeld, match=f"pid {daemon.pid}"), HeldLease(store, traffic, "start"):
        pass
    daemon.send_signal(signal.SIGKILL)
    daemon.wait(timeout=30)
    t0 = time.monotonic()
    with HeldLease(store, traffic, "start", ttl_s=3600):  # long before its expiry
        (mine,) = leases(store)
        assert mine.pid == os.getpid()
    assert time.monotonic() - t0 < 5
    store.close()


def test_an_expired_lease_is_taken_over_and_its_frozen_holder_stops(tmp_path: Path,
                                                                   any_db: str) -> None:
    """A holder that stops renewing (frozen here; a lost host alike) keeps its lease until it
    expires; then another takes it, and the old holder, back, stops with one line."""
    traffic, policy = write_inputs(tmp_path)
    daemon = _daemon(tmp_path, any_db, traffic, policy, AUTOTUNE_LEASE_TTL="2")
    store = Store.open(any_db)
    try:
        daemon.send_signal(signal.SIGSTOP)
        frozen = time.monotonic()
        (held,) = leases(store)
        if time.monotonic() - frozen < 1.0:  # surely before its expiry
            with pytest.raises(LeaseHeld, match=f"pid {daemon.pid}"), \
                    HeldLease(store, traffic, "start"):
                pass
        time.sleep(max(0.0, (held.expires_at.timestamp() - time.time()) + 0.2))
        with HeldLease(store, traffic, "start", ttl_s=3600):
            daemon.send_signal(signal.SIGCONT)
            assert daemon.wait(timeout=30) == 1
            (mine,) = leases(store)
            assert mine.pid == os.getpid()  # the old holder left it alone
    finally:
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGCONT)
            daemon.kill()
    log = (tmp_path / "daemon.log").read_text()
    (line,) = [x for x in log.splitlines() if x.startswith("error:")]
    assert "lost the lease" in line and f"pid {os.getpid()}" in line
    assert "Traceback" not in log
    state = json.loads((tmp_path / "daemon.json").read_text())
    assert state["status"] == "stopped" and "lost the lease" in state["error"]
    store.close()
