"""Server processes: launch in an own process group, stop and reap, and never leave orphans.

A :class:`ServerProcess` runs one argument list (never a shell) in a new session, so its process
group holds the server and every worker it forks; :meth:`ServerProcess.stop` sends SIGTERM to the
group, SIGKILL after a grace period, and waits until the group is gone. Every launched process is
listed in :data:`LIVE_SERVERS` until it is stopped, so whoever owns the process can reap them all
at exit: :func:`stop_all_servers` (also registered with ``atexit``) and the
:func:`reap_servers_on_signals` context manager, which turns SIGTERM/SIGHUP into ``SystemExit``
so ``finally`` blocks run. On Linux a server launched from the main thread also gets SIGTERM
from the kernel if its parent dies without cleaning up (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = [
    "LIVE_SERVERS",
    "LiveServers",
    "ServerProcess",
    "free_port",
    "reap_servers_on_signals",
    "stop_all_servers",
]

_PR_SET_PDEATHSIG = 1


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _pdeathsig_preexec() -> Callable[[], None] | None:
    """A preexec hook asking the kernel to SIGTERM the child when its parent dies (Linux only).

    The kernel ties the signal to the *thread* that forked, so it is only used from the main
    thread (whose end is the process's end).
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not \
            threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return hook


def _proc_start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (start time), to tell a process from a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _descendants(root: int) -> list[tuple[int, str]]:
    """(pid, start time) of every descendant of ``root`` (empty where /proc is missing)."""
    children: dict[int, list[int]] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out: list[tuple[int, str]] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        start = _proc_start_time(pid)
        if start is not None:
            out.append((pid, start))
        todo.extend(children.get(pid, []))
    return out


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ServerProcess:
    """One server command in its own process group with its output in a log file.

    Constructing it starts nothing; :meth:`launch` does. :meth:`stop` is idempotent and
    thread-safe; after it returns no process of the group (nor a descendant that left the group)
    is still running.
    """

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path,
                 registry: LiveServers | None = None) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = log_path
        self._registry = registry if registry is not None else LIVE_SERVERS
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._lock = threading.RLock()
        self._stopped = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def launch(self) -> None:
        """Start the command; raises ``OSError`` when it cannot be executed."""
        with self._lock:
            if self._proc is not None:
                raise RuntimeError("ServerProcess.launch called twice")
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = self.log_path.open("ab")
            try:
                self._proc = subprocess.Popen(  # an argument list, never a shell
                    self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=self._log,
                    stderr=subprocess.STDOUT, start_new_session=True,
                    preexec_fn=_pdeathsig_preexec(), close_fds=True)
            except OSError:
                self._log.close()
                self._log = None
                self._stopped = True
                raise
            self._registry.add(self)

    def poll(self) -> int | None:
        """The exit code once the server process has exited, else None."""
        return self._proc.poll() if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM the process group, SIGKILL whatever is left after ``grace_s``; reap it."""
        with self._lock:
            if self._proc is None or self._stopped:
                return
            try:
                self._terminate(self._proc, grace_s)
            finally:
                self._stopped = True
                if self._log is not None:
                    self._log.close()
                    self._log = None
                self._registry.discard(self)

    def _terminate(self, proc: subprocess.Popen[bytes], grace_s: float) -> None:
        pgid = proc.pid  # start_new_session: the server leads its own group
        strays = [d for d in _descendants(proc.pid) if _pgid(d[0]) != pgid]
        _signal_group(pgid, signal.SIGTERM)
        _signal_each(strays, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        _signal_group(pgid, signal.SIGKILL)
        _signal_each(strays, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10.0
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def log_tail(self, lines: int = 40, max_chars: int = 8000) -> str:
        """The last ``lines`` lines of the server log (at most ``max_chars`` characters)."""
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - 64 * 1024))
                data = fh.read()
        except OSError:
            return ""
        text = data.decode("utf-8", errors="replace")
        tail = "\n".join(text.splitlines()[-lines:])
        return tail[-max_chars:]


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal_each(procs: list[tuple[int, str]], sig: signal.Signals) -> None:
    for pid, start in procs:
        if _proc_start_time(pid) == start:  # still the same process, not a reused pid
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


class LiveServers:
    """Every launched, not yet stopped :class:`ServerProcess` of this process.

    The one deliberate piece of process-wide state of the backend: it exists so that an exit
    path (``atexit``, a signal handler, the CLI's ``finally``) can stop servers that a replica
    owner had no chance to stop. Reentrant, so a signal handler may call it at any point.
    """

    def __init__(self, grace_s: float = 30.0) -> None:
        self.grace_s = grace_s
        self._lock = threading.RLock()
        self._servers: dict[int, ServerProcess] = {}
        self._atexit_registered = False

    def add(self, server: ServerProcess) -> None:
        with self._lock:
            self._servers[id(server)] = server
            if not self._atexit_registered:
                atexit.register(self.stop_all)
                self._atexit_registered = True

    def discard(self, server: ServerProcess) -> None:
        with self._lock:
            self._servers.pop(id(server), None)

    def live(self) -> list[ServerProcess]:
        with self._lock:
            return list(self._servers.values())

    def stop_all(self, grace_s: float | None = None) -> int:
        """Stop every live server; returns how many there were."""
        servers = self.live()
        for server in servers:
            server.stop(self.grace_s if grace_s is None else grace_s)
        return len(servers)


#: The registry every :class:`ServerProcess` joins by default.
LIVE_SERVERS = LiveServers()


def stop_all_servers(grace_s: float | None = None) -> int:
    """Stop every vLLM server this process launched and has not stopped yet; returns the count.

    Safe to call at any time, repeatedly, from a ``finally`` block or a signal handler.
    """
    return LIVE_SERVERS.stop_all(grace_s)


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def reap_servers_on_signals(
    signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGHUP),
) -> Iterator[None]:
    """Run a block so that no launched server outlives it, however it ends.

    In the main thread, ``signals`` raise ``SystemExit(128 + signum)`` inside the block (Ctrl-C
    already raises ``KeyboardInterrupt``), so every ``try/finally`` on the way out runs and each
    replica stops its own server; on leaving, every server still live is stopped. The previous
    signal handlers are restored afterwards.
    """
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in signals:
            previous[sig] = signal.signal(sig, _exit_on_signal)
    try:
        yield
    finally:
        try:
            stop_all_servers()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
