"""Faults injected for real into running autotune processes.

Each ends with one clear ``error:`` line (no traceback), an intact database, no half-written
file, and a run the next start resumes without measuring a finished trial again:

- the SQLite database's disk filling up mid-run (the process's file-size limit dropped to one
  byte with ``prlimit`` while it runs: every write to the database fails as on a full disk);
- the PostgreSQL server becoming unreachable mid-run (autotune reaches it through a TCP proxy
  the test cuts);
- a full disk when exporting (a file-size limit below the export's size);
- a replica process killed mid-trial (a Ray replica actor's process, SIGKILL);
- a damaged daemon state file.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from holds import Holds
from signal_cases import REPO, processes_left, write_inputs
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from autotune.store import Store

pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "COLUMNS": "200",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            **extra}


def _start(tmp: Path, db: str, *extra: str, **env: str) -> subprocess.Popen[str]:
    traffic, policy = tmp / "traffic.jsonl", tmp / "policy.yaml"
    return subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "start", "--traffic", str(traffic), "--policy",
         str(policy), "--db", db, "--once", "--export-dir", str(tmp / "exports"), *extra],
        cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(**env))


def _complete(db: str) -> dict[tuple[str, int], dict[str, Any]]:
    try:
        store = Store.open(db, existing=True)
    except Exception:
        return {}
    try:
        return {(t.workload, t.number): t.to_json() for t in store.trials()
                if t.state == "complete"}
    finally:
        store.close()


def _wait_trials(db: str, proc: subprocess.Popen[str], count: int) -> None:
    deadline = time.monotonic() + 180
    while len(_complete(db)) < count:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the pass never finished its first trials"
        time.sleep(0.2)


def _one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = [x for x in stderr.splitlines() if x.startswith("error:")]
    assert len(lines) == 1, stderr
    return lines[0]


def _resumes_without_repeating(tmp: Path, db: str,
                               before: dict[tuple[str, int], dict[str, Any]]) -> None:
    """The next start with the same inputs resumes the unfinished run and finishes it."""
    store = Store.open(db)
    (run,) = store.runs()
    assert run.status in ("running", "interrupted"), run.status
    again = _start(tmp, db, "--replicas", "1")
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert f"resuming run {run.id}" in err
    assert store.run(run.id).status == "finished"
    after = {(t.workload, t.number): t.to_json() for t in store.trials(run.id)}
    for key, old in before.items():
        assert after[key]["id"] == old["id"] and after[key]["metrics"] == old["metrics"]
    store.close()


def test_the_sqlite_disk_filling_up_mid_run(tmp_path: Path) -> None:
    write_inputs(tmp_path, trials=3)
    db_file = tmp_path / "a.db"
    db = f"sqlite:///{db_file}"
    proc = _start(tmp_path, db, "--replicas", "1")
    _wait_trials(db, proc, 2)
    resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (1, 1))  # every write now fails
    before = _complete(db)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode not in (0, None)
    line = _one_error_line(err)
    assert f"database {db} is not usable" in line and "check the disk" in line, line
    with sqlite3.connect(db_file) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert not list(tmp_path.glob("exports/.*.tmp"))  # no half-written export
    _resumes_without_repeating(tmp_path, db, before)


class _Proxy:
    """A TCP proxy to PostgreSQL that the test can cut: the server becomes unreachable."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            with self.lock:  # a connection accepted while cutting is closed too
                if self.closed:
                    client.close()
                    return
                up = socket.create_connection(self.upstream)
                self.sockets += [client, up]
            for a, b in ((client, up), (up, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)

    def cut(self) -> None:
        with self.lock:
            self.closed = True
            self.server.close()
            for s in self.sockets:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()


@pytest.fixture
def proxied(pg_url: str) -> Iterator[tuple[str, str, _Proxy]]:
    """(direct URL, URL through a proxy, the proxy)."""
    url = make_url(pg_url)
    proxy = _Proxy(url.host or "127.0.0.1", url.port or 5432)
    try:
        yield pg_url, url.set(host="127.0.0.1", port=proxy.port).render_as_string(
            hide_password=False), proxy
    finally:
        proxy.cut()


@pytest.mark.postgres
def test_postgresql_becoming_unreachable_mid_run(tmp_path: Path,
                                                 proxied: tuple[str, str, _Proxy]) -> None:
    direct, through, proxy = proxied
    write_inputs(tmp_path, trials=3)
    proc = _start(tmp_path, through, "--replicas", "1")
    _wait_trials(direct, proc, 2)
    proxy.cut()
    before = _complete(direct)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode not in (0, None)
    line = _one_error_line(err)
    assert "database postgresql+psycopg://" in line and "not usable" in line, line
    engine = create_engine(direct)
    with engine.connect() as conn:  # consistent: no orphan trial, at most one active per workload
        assert conn.execute(text(
            "SELECT count(*) FROM autotune_trials t LEFT JOIN autotune_runs r "
            "ON t.run_id = r.id WHERE r.id IS NULL")).scalar() == 0
        assert conn.execute(text(
            "SELECT count(*) FROM (SELECT workload FROM autotune_recommendations WHERE "
            "status = 'active' GROUP BY workload HAVING count(*) > 1) AS x")).scalar() == 0
    engine.dispose()
    _resumes_without_repeating(tmp_path, direct, before)


def _limit_file_size(limit: int) -> Any:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@pytest.mark.postgres
def test_a_full_disk_when_exporting_keeps_the_old_file(tmp_path: Path, pg_url: str) -> None:
    """On PostgreSQL, so that the file-size limit bites the export alone (a SQLite file on a
    full disk fails first, as above)."""
    write_inputs(tmp_path, trials=2)
    first = _start(tmp_path, pg_url, "--replicas", "1")
    assert first.communicate(timeout=300) and first.returncode == 0
    out = tmp_path / "served" / "code.sh"
    out.parent.mkdir()
    out.write_text("# the old one\n")
    full = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "export", "--workload", "code", "--db", pg_url,
         "--format", "vllm-args", "-o", str(out)], cwd=tmp_path, capture_output=True,
        text=True, env=_env(), preexec_fn=_limit_file_size(16), timeout=120)
    assert full.returncode != 0
    line = _one_error_line(full.stderr)
    assert str(out) in line and "too large" in line.lower(), line
    assert out.read_text() == "# the old one\n"  # the old file, whole
    assert sorted(p.name for p in out.parent.iterdir()) == ["code.sh"]  # no temporary left
    ok = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "export", "--workload", "code", "--db", pg_url,
         "--format", "vllm-args", "-o", str(out)], cwd=tmp_path, capture_output=True,
        text=True, env=_env(), timeout=120)
    assert ok.returncode == 0 and out.read_text().startswith("# ")
    assert "vllm serve" in out.read_text()


@pytest.mark.ray
def test_a_replica_process_killed_mid_trial(tmp_path: Path) -> None:
    write_inputs(tmp_path, trials=3)
    db = f"sqlite:///{tmp_path / 'a.db'}"
    tag = f"faults-{os.getpid()}-{time.monotonic_ns()}"
    holds = Holds(tmp_path / "holds")
    holds.hold_at("replaying")  # the first replica to start a trial's replay (a Ray actor)
    traffic, policy = tmp_path / "traffic.jsonl", tmp_path / "policy.yaml"
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "start", "--traffic", str(traffic), "--policy",
         str(policy), "--db", db, "--once", "--export-dir", str(tmp_path / "exports"),
         "--replicas", "2"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=holds.env(_env(AUTOTUNE_TEST_TAG=tag)))
    try:
        held = holds.wait(proc, timeout_s=180)
        assert held.pid != proc.pid  # a replica's process, in the middle of its trial
        os.kill(held.pid, signal.SIGKILL)
    finally:
        holds.release()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "died during trial" in err
    store = Store.open(db)
    (run,) = store.runs()
    assert run.status == "finished"
    trials = store.trials(run.id)
    assert len({(t.workload, t.number) for t in trials}) == len(trials) == 6
    assert all(t.state == "complete" for t in trials)
    assert [t.attempts for t in trials].count(2) == 1  # the killed one, run again
    store.close()
    with sqlite3.connect(tmp_path / "a.db") as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert processes_left(tag) == []


def test_a_damaged_state_file(tmp_path: Path) -> None:
    traffic, policy = write_inputs(tmp_path)
    state = tmp_path / "daemon.json"
    state.write_bytes(b'{"status": "tuning", "pid": \x00\xff')
    db = f"sqlite:///{tmp_path / 'a.db'}"
    Store.open(db).close()
    status = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "status", "--state-file", str(state), "--db", db,
         "--check"], cwd=tmp_path, capture_output=True, text=True, env=_env(), timeout=120)
    assert status.returncode == 1  # no daemon runs
    assert "Traceback" not in status.stderr
    assert f"daemon state file {state} is not valid JSON" in status.stderr
    assert "unreadable" in status.stdout
    holds = Holds(tmp_path / "holds")
    holds.hold_at("loading@1")
    daemon = subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "start", "--traffic", str(traffic), "--policy",
         str(policy), "--db", db, "--every", "1h", "--state-file", str(state), "--replicas",
         "1"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=holds.env(_env()))
    holds.wait(daemon, timeout_s=120)
    assert json.loads(state.read_text())["status"] == "tuning"  # rewritten whole
    daemon.send_signal(signal.SIGTERM)
    holds.release()
    _, err = daemon.communicate(timeout=60)
    assert daemon.returncode == 0 and "Traceback" not in err
    assert json.loads(state.read_text())["status"] == "stopped"
