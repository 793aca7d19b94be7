"""One process per database and traffic, with real processes on SQLite and PostgreSQL.

The holder is either this test process (through the same ``HeldLease`` the commands use) or a
real ``autotune start`` daemon held at the start of its first pass (``tests/holds``); the
contender is the other one. Whether a lease has expired is decided by the clock the contender
reads: where that matters, the test sets it to a moment read off the lease row, so the
outcome does not depend on how fast the machine is.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import pytest
from holds import Holds
from signal_cases import REPO, write_inputs

from autotune.store import HeldLease, LeaseHeld, LeaseRecord, Store, leases

pytestmark = pytest.mark.slow

T = TypeVar("T")


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "COLUMNS": "200",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            **extra}


def _until(what: str, check: Callable[[], T | None], give_up_s: float = 60.0) -> T:
    """Poll ``check`` until it returns something; fail after ``give_up_s``."""
    deadline = time.monotonic() + give_up_s
    while (value := check()) is None:
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return value


def _daemon(tmp: Path, db: str, traffic: Path, policy: Path,
            **env: str) -> subprocess.Popen[bytes]:
    """A daemon held at the start of its first pass (it holds the lease by then)."""
    holds = Holds(tmp / "holds")
    holds.hold_at("loading@1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "start", "--traffic", str(traffic), "--policy",
         str(policy), "--db", db, "--every", "1h", "--state-file", str(tmp / "daemon.json"),
         "--replicas", "1", "--export-dir", str(tmp / "exports")],
        cwd=tmp, stdout=subprocess.DEVNULL, stderr=open(tmp / "daemon.log", "wb"),  # noqa: SIM115
        env=holds.env(_env(**env)))
    try:
        held = holds.wait(proc, timeout_s=120)
    except AssertionError:
        raise AssertionError((tmp / "daemon.log").read_text()) from None
    assert held.pid == proc.pid
    return proc


def _process_state(pid: int) -> str:
    """The state letter of process ``pid`` in /proc (``T``: stopped by a signal)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.fixture
def contender_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[datetime], None]]:
    """Sets the time this process's ``HeldLease`` reads (the holder's own clock is not
    touched)."""
    lease_module = importlib.import_module("autotune.store.lease")

    def at(when: datetime) -> None:
        monkeypatch.setattr(lease_module, "utcnow", lambda: when)

    yield at


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


def test_a_holder_killed_on_this_machine_is_taken_over_at_once(
        tmp_path: Path, any_db: str, caplog: pytest.LogCaptureFixture) -> None:
    traffic, policy = write_inputs(tmp_path)
    # Its lease would live an hour: only the process being gone can free it now.
    daemon = _daemon(tmp_path, any_db, traffic, policy, AUTOTUNE_LEASE_TTL="3600")
    store = Store.open(any_db)
    (held,) = leases(store)
    assert (held.pid, held.command, held.host) == (daemon.pid, "start", socket.gethostname())
    with pytest.raises(LeaseHeld, match=f"pid {daemon.pid}"), HeldLease(store, traffic, "start"):
        pass
    daemon.send_signal(signal.SIGKILL)
    daemon.wait(timeout=30)
    with caplog.at_level(logging.WARNING, logger="autotune.store.lease"), \
            HeldLease(store, traffic, "start", ttl_s=3600):
        (mine,) = leases(store)
        assert mine.pid == os.getpid()
    (taken,) = [r.getMessage() for r in caplog.records if "taking over" in r.getMessage()]
    assert f"pid {daemon.pid}" in taken and "that process is gone" in taken
    store.close()


def test_an_expired_lease_is_taken_over_and_its_frozen_holder_stops(
        tmp_path: Path, any_db: str, contender_clock: Callable[[datetime], None]) -> None:
    """A holder that stops renewing (frozen here; a lost host alike) keeps its lease until it
    expires; then another takes it, and the old holder, back, stops with one line."""
    traffic, policy = write_inputs(tmp_path)
    daemon = _daemon(tmp_path, any_db, traffic, policy, AUTOTUNE_LEASE_TTL="4")
    store = Store.open(any_db)
    try:
        # Freeze it right after a renewal (it renews every second): the frozen process is then
        # between two renewals, holding no transaction on the lease row.
        (first,) = leases(store)

        def renewed() -> LeaseRecord | None:
            rows = leases(store)
            return rows[0] if rows and rows[0].heartbeat_at > first.heartbeat_at else None

        _until("a renewal of the daemon's lease", renewed)
        daemon.send_signal(signal.SIGSTOP)
        _until("the daemon to stop", lambda: _process_state(daemon.pid) == "T" or None)
        (held,) = leases(store)
        assert held.pid == daemon.pid
        contender_clock(held.heartbeat_at)  # before its expiry
        with pytest.raises(LeaseHeld, match=f"pid {daemon.pid}"), \
                HeldLease(store, traffic, "start"):
            pass
        contender_clock(held.expires_at)  # at its expiry
        with HeldLease(store, traffic, "start", ttl_s=3600):
            daemon.send_signal(signal.SIGCONT)
            assert daemon.wait(timeout=60) == 1
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
