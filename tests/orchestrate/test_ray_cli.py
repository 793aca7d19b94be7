"""`autotune start --once` on a local Ray it starts itself: its processes listen on loopback
only, and none outlives it."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from autotune.policy import DEFAULT_POLICY_PATH
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


def _listen_addresses() -> dict[str, str]:
    """Every listening TCP socket of this network namespace: its inode -> its local address."""
    out = {}
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A":  # TCP_LISTEN
                continue
            raw = bytes.fromhex(local.split(":")[0])
            # the kernel prints each 32-bit word of the address in host (little-endian) order
            packed = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            out[inode] = socket.inet_ntop(family, packed)
    return out


def _listening(pids: list[int]) -> dict[str, set[str]]:
    """The addresses each process (by name) listens on."""
    addresses = _listen_addresses()
    out: dict[str, set[str]] = {}
    for pid in pids:
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:  # gone meanwhile
            continue
        for link in links:
            inode = link.removeprefix("socket:[").removesuffix("]")
            if link.startswith("socket:[") and inode in addresses:
                out.setdefault(name, set()).add(addresses[inode])
    return out


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
def test_once_with_two_replicas_leaves_no_ray_process(small_sample: Path, tmp_path: Path) -> None:
    token = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env[_MARK] = token
    db = f"sqlite:///{tmp_path / 'autotune.db'}"
    # the default policy searching with the grid: Ray's processes are judged, not the search
    # (the grid proposes without fitting a predictor)
    policy = tmp_path / "policy.yaml"
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    data["search"] = {"strategy": "grid"}
    policy.write_text(yaml.safe_dump(data))
    argv = [sys.executable, "-m", "autotune.cli", "start", "--traffic", str(small_sample),
            "--once", "--policy", str(policy), "--replicas", "2", "--budget-trials", "2",
            "--db", db, "--export-dir", str(tmp_path / "exports")]
    seen: set[str] = set()
    listening: dict[str, set[str]] = {}
    log = tmp_path / "stderr.log"
    with log.open("w") as err, subprocess.Popen(argv, env=env, cwd=tmp_path,
                                                stdout=subprocess.DEVNULL, stderr=err) as proc:
        end = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < end:
            marked = _marked(token)
            seen.update(_names(marked))
            for name, addresses in _listening(marked).items():
                listening.setdefault(name, set()).update(addresses)
            time.sleep(0.2)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert {"raylet", "gcs_server"} <= seen  # it did start a local Ray (and we saw it)
    # the local Ray's servers (GCS, raylet, agents, workers, the driver) listen on loopback only
    assert {"raylet", "gcs_server"} <= set(listening), listening
    exposed = {name: a for name, a in listening.items() if not all(map(_loopback, a))}
    assert not exposed, f"listening beyond loopback: {exposed}"
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
