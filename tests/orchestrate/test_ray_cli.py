"""`autotune start --once` on a local Ray it starts itself: no Ray process outlives it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from autotune.store import Store

pytestmark = [pytest.mark.ray, pytest.mark.slow]

_MARK = "AUTOTUNE_TEST_RAY_MARK"


def _marked(token: str) -> list[int]:
    """Processes whose environment carries ``token`` (everything the command started)."""
    needle = f"{_MARK}={token}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return pids


def _names(pids: list[int]) -> set[str]:
    out = set()
    for pid in pids:
        try:
            out.add(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            continue
    return out


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
def test_once_with_two_replicas_leaves_no_ray_process(small_sample: Path, tmp_path: Path) -> None:
    token = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env[_MARK] = token
    db = f"sqlite:///{tmp_path / 'autotune.db'}"
    argv = [sys.executable, "-m", "autotune.cli", "start", "--traffic", str(small_sample),
            "--once", "--replicas", "2", "--budget-trials", "2", "--db", db,
            "--export-dir", str(tmp_path / "exports")]
    seen: set[str] = set()
    log = tmp_path / "stderr.log"
    with log.open("w") as err, subprocess.Popen(argv, env=env, cwd=tmp_path,
                                                stdout=subprocess.DEVNULL, stderr=err) as proc:
        end = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < end:
            seen.update(_names(_marked(token)))
            time.sleep(0.2)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert {"raylet", "gcs_server"} <= seen  # it did start a local Ray (and we saw it)
    # ray.shutdown() returns once its processes are signalled; they exit on their own soon
    # after (a generous give-up: a process still there then has outlived the command).
    deadline = time.monotonic() + 30
    while (left := _marked(token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:  # never leave them behind, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not left, f"Ray processes outlived `autotune start --once`: {left}"
    trials = Store.open(db).trials()
    assert trials and all(t.state == "complete" for t in trials)
    assert {t.replica for t in trials} == {"ray-0", "ray-1"}
