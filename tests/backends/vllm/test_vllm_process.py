"""Server processes are stopped whole: process group, escaped descendants, owner's death."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from vllm_helpers import REPO, group_members, process_tree, survivors, wait_gone

from autotune.backends.vllm._process import LiveServers, ServerProcess, free_port

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")

# A server that ignores SIGTERM, with a child in its group and a grandchild that left the group.
STUBBORN = r"""
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
out = sys.argv[1]
if os.fork() == 0:
    if os.fork() == 0:
        os.setsid()
        open(out + ".tmp", "w").write(str(os.getpid()))
        os.rename(out + ".tmp", out)
    while True:
        time.sleep(1)
while True:
    time.sleep(1)
"""

POLITE = "import time; print('serving', flush=True); time.sleep(120)"


def _wait_for(what: str, condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after a generous deadline."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def test_stop_kills_the_whole_tree_after_grace(tmp_path: Path) -> None:
    registry = LiveServers()
    marker = tmp_path / "escaped"
    server = ServerProcess([sys.executable, "-c", STUBBORN, str(marker)], dict(os.environ),
                           tmp_path / "log" / "server.log", registry=registry)
    server.launch()
    _wait_for("the grandchild left the group", marker.exists)
    escaped = int(marker.read_text())
    tree = process_tree(server.pid or 0)
    assert len(tree) == 3 and escaped in tree
    assert os.getpgid(escaped) != server.pid  # really outside the group
    assert registry.live() == [server]
    start = time.monotonic()
    server.stop(grace_s=0.5)
    assert time.monotonic() - start >= 0.5  # SIGTERM was ignored: the grace was waited out
    assert server.poll() == -signal.SIGKILL  # then the group was killed
    assert survivors(tree) == []  # the escaped grandchild too
    assert registry.live() == []
    server.stop(grace_s=0.5)  # idempotent
    assert not server.alive() and server.poll() == -signal.SIGKILL


def test_polite_server_stops_without_waiting_for_grace(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    server = ServerProcess([sys.executable, "-c", POLITE], dict(os.environ), log,
                           registry=LiveServers())
    server.launch()
    _wait_for("the server logged that it serves", lambda: "serving" in server.log_tail())
    assert server.alive()
    # A grace of an hour: stop returns as soon as SIGTERM has ended the group, so the
    # stopping thread ends long before this give-up deadline unless stop waits out the grace.
    stopper = threading.Thread(target=server.stop, args=(3600.0,), daemon=True)
    stopper.start()
    stopper.join(timeout=120.0)
    assert not stopper.is_alive(), "stop waited for the grace period"
    assert server.poll() == -signal.SIGTERM  # SIGTERM did it; SIGKILL was never needed
    assert server.log_tail() == "serving"


def test_registry_stop_all(tmp_path: Path) -> None:
    registry = LiveServers(grace_s=2.0)
    servers = [ServerProcess([sys.executable, "-c", POLITE], dict(os.environ),
                             tmp_path / f"s{i}.log", registry=registry) for i in range(2)]
    for s in servers:
        s.launch()
    trees = [process_tree(s.pid or 0) for s in servers]
    assert registry.live() == servers
    assert registry.stop_all() == 2
    assert registry.live() == [] and registry.stop_all() == 0
    assert all(survivors(t) == [] for t in trees)
    assert [s.poll() for s in servers] == [-signal.SIGTERM] * 2


def test_launch_failure_is_an_oserror_and_leaves_nothing(tmp_path: Path) -> None:
    registry = LiveServers()
    server = ServerProcess([str(tmp_path / "no-such-binary")], {}, tmp_path / "x.log",
                           registry=registry)
    with pytest.raises(OSError, match="no-such-binary"):
        server.launch()
    assert registry.live() == []
    server.stop()  # nothing to stop: a no-op
    assert server.pid is None and not server.alive()


def test_free_port_is_bindable() -> None:
    import socket

    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # raises OSError if the port were taken
        assert sock.getsockname()[1] == port


DRIVER = r"""
import os, sys, time
from pathlib import Path
from autotune.backends.vllm._process import ServerProcess, reap_servers_on_signals

mode = sys.argv[2]
def run():
    s = ServerProcess([sys.executable, "-c", "import time; time.sleep(120)"], dict(os.environ),
                      Path(sys.argv[1]))
    s.launch()
    print(s.pid, flush=True)
    time.sleep(120)
if mode == "reap":
    with reap_servers_on_signals():
        run()
else:
    run()
"""


def _driver(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[str], int, dict[int, str]]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path / "s.log"), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    server_pid = int(proc.stdout.readline())
    return proc, server_pid, process_tree(server_pid)


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 128 + signal.SIGTERM),
                                       (signal.SIGHUP, 128 + signal.SIGHUP),
                                       (signal.SIGINT, -signal.SIGINT)])
def test_interrupted_owner_stops_its_servers(tmp_path: Path, sig: signal.Signals,
                                             code: int) -> None:
    proc, server_pid, tree = _driver(tmp_path, "reap")
    assert survivors(tree) == [server_pid]
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == code
    # the owner stopped the server before exiting: it is gone already, no wait needed
    assert survivors(tree) == [] and group_members(server_pid) == []


def test_killed_owner_takes_its_server_along(tmp_path: Path) -> None:
    proc, server_pid, tree = _driver(tmp_path, "plain")
    assert survivors(tree) == [server_pid]
    proc.kill()  # no chance to clean up: the kernel's parent-death signal does it
    proc.wait(timeout=60)
    assert wait_gone(tree, 60.0) == []
