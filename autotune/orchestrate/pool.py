"""Where trials run: a pool of replicas behind a narrow submit/wait interface.

The tuning driver keeps up to ``capacity`` trials in flight: it ``submit``s tasks and ``wait``s
for whichever finishes first. :class:`SerialPool` runs one trial at a time in this process (the
default for the simulator); the Ray pool (``autotune.orchestrate.ray_pool``) runs one per replica
actor. A pool turns a trial's expected failures (``TrialFailed``, ``BackendError``) into a
failed :class:`TrialResult`; anything else is a bug and propagates.

:func:`signals_held` keeps stop signals from cutting Ray's start or stop in half (and Ray
from replacing their handlers). :func:`hold_point` marks the moments of a pass (loading, a pool
starting, a trial, a pool stopping, recommending, sleeping) where tests of signals hold the
process: it does nothing unless ``AUTOTUNE_HOLD_AT`` is set.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from autotune.backends import Backend
from autotune.errors import AutotuneError, BackendError
from autotune.orchestrate.capacity import replay_at_capacity
from autotune.types import Measurement, Progress, ReplaySchedule, TrialConfig

__all__ = ["HOLD_ENV", "HOLD_FILE_ENV", "Pool", "SerialPool", "TrialResult", "TrialTask",
           "hold_point", "process_running", "run_trial", "signals_held"]

log = logging.getLogger(__name__)

#: ``moment[@pass]``: hold the process at the first time ``moment`` is reached in pass number
#: ``pass`` (default 1) of this process; passes are counted by their ``loading`` moment.
HOLD_ENV = "AUTOTUNE_HOLD_AT"
#: The file a held process writes (``moment@pass pid``); it holds until the file is removed.
HOLD_FILE_ENV = "AUTOTUNE_HOLD_FILE"
HOLD_MAX_S = 60.0
_moments = {"passes": 0, "held": 0}


def hold_point(moment: str) -> None:
    """A named moment of a pass, where a test may hold this process (see ``HOLD_ENV``).

    Without ``$AUTOTUNE_HOLD_AT`` this returns at once. When it names this moment, the process
    writes ``$AUTOTUNE_HOLD_FILE`` and sleeps until a test removes it (at most a minute): a
    signal sent meanwhile arrives at exactly this moment. Sleeping, not spinning; a signal
    handler that raises ends the hold.
    """
    spec = os.environ.get(HOLD_ENV)
    if not spec:
        return
    if moment == "loading":
        _moments["passes"] += 1
    name, _, number = spec.partition("@")
    if name != moment or _moments["held"] or int(number or 1) != _moments["passes"]:
        return
    _moments["held"] = 1
    path = Path(os.environ.get(HOLD_FILE_ENV, "autotune-hold"))
    path.write_text(f"{moment}@{_moments['passes']} {os.getpid()}\n")
    deadline = time.monotonic() + HOLD_MAX_S
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


@dataclass(frozen=True)
class TrialTask:
    key: Hashable
    config: TrialConfig
    schedule: ReplaySchedule


@dataclass(frozen=True)
class TrialResult:
    key: Hashable
    measurement: Measurement | None
    error: str | None = None
    replica: str | None = None
    node: str | None = None
    attempts: int = 1
    seconds: float = 0.0


class Pool(Protocol):
    """Runs trials; ``capacity`` of them at once."""

    @property
    def capacity(self) -> int: ...

    def submit(self, task: TrialTask) -> None: ...

    def wait(self) -> TrialResult:
        """Block until a submitted trial finishes and return it."""
        ...

    def gpu_kind(self) -> str | None:
        """The kind of GPU the replicas run on as the cluster reports it, or None (unknown,
        no GPUs, or replicas on different kinds)."""
        ...

    def close(self) -> None: ...


def run_trial(backend: Backend, config: TrialConfig, schedule: ReplaySchedule,
              progress: Progress | None = None) -> Measurement:
    """Start a replica, replay (at capacity when the schedule asks), always stop it."""
    replica = backend.start(config)
    try:
        if schedule.capacity_slo is not None and schedule.mode == "trace":
            return replay_at_capacity(replica, schedule, schedule.capacity_slo, progress)
        return replica.replay(schedule, progress)
    finally:
        replica.stop()


class SerialPool:
    """One trial at a time, in this process."""

    def __init__(self, backend: Backend, progress: Progress | None = None) -> None:
        self.backend = backend
        self.progress = progress
        self._queue: deque[TrialTask] = deque()

    @property
    def capacity(self) -> int:
        return 1

    def gpu_kind(self) -> str | None:
        return None  # this process does not look at its machine's GPUs

    def submit(self, task: TrialTask) -> None:
        self._queue.append(task)

    def wait(self) -> TrialResult:
        if not self._queue:
            raise BackendError("wait() called with no trial submitted")
        hold_point("trial")
        task = self._queue.popleft()
        t0 = time.monotonic()
        node = socket.gethostname()
        try:
            m = run_trial(self.backend, task.config, task.schedule, self.progress)
        except AutotuneError as e:
            log.warning("trial %s failed: %s", task.key, e)
            return TrialResult(task.key, None, error=str(e), replica="local-0", node=node,
                               seconds=time.monotonic() - t0)
        return TrialResult(task.key, m, replica="local-0", node=node,
                           seconds=time.monotonic() - t0)

    def close(self) -> None:
        self._queue.clear()
        hold_point("recommending")


#: The signals that stop a pass (the daemon turns them into KeyboardInterrupt).
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@contextmanager
def signals_held() -> Iterator[None]:
    """Start or stop Ray with the process's stop signals held, then deliver them.

    Ray's driver installs its own SIGTERM handler (``sys.exit(15)``, which would mark the run
    failed and skip autotune's clean stop) on ``ray.init`` and ``ray.shutdown``, and a stop
    raised half-way through starting Ray would leave its processes behind. Inside the block
    Ray cannot replace the handlers (``signal.signal`` answers with the current one for these
    signals), a stop signal is recorded instead of handled, and on leaving the block the
    handlers in place before are re-installed (which also re-registers them with the OS, over
    anything Ray's C++ core set) and the first recorded signal is handed to its handler.
    Outside the main thread (where no signal is handled) the block just runs.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    original = signal.signal
    previous = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
    received: list[int] = []

    def hold(signum: int, _frame: Any) -> None:
        received.append(signum)

    def guarded(signum: Any, handler: Any) -> Any:
        if signum in previous:
            return previous[signum]
        return original(signum, handler)

    for sig in _STOP_SIGNALS:
        original(sig, hold)
    signal.signal = guarded  # type: ignore[assignment]
    try:
        yield
    finally:
        signal.signal = original
        for sig, handler in previous.items():
            original(sig, handler if handler is not None else signal.SIG_DFL)
        if received:
            _deliver(received[0], previous.get(signal.Signals(received[0])))


def _deliver(signum: int, handler: Any) -> None:
    """Hand a held signal to the handler that was in place."""
    if callable(handler):
        handler(signum, None)
    elif handler in (signal.SIG_DFL, None):
        signal.raise_signal(signum)


def process_running(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie (a pid <= 0 never runs)."""
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:  # no /proc (not Linux), or the process is gone
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
