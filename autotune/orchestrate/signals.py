"""The signals that stop autotune, and how they stop it cleanly.

SIGTERM (systemd, ``timeout``), SIGINT (Ctrl-C) and SIGHUP (a closed terminal) stop a pass at
any moment, sent to the process or to its whole process group:

- :func:`stop_signals` turns the first of them into KeyboardInterrupt, so every replica is
  stopped and the run marked interrupted on the way out; later ones are logged and ignored
  while stopping;
- :func:`signals_held` holds them while Ray starts or stops, so that a stop neither cuts Ray's
  start or stop in half nor lets Ray replace their handlers, and delivers the first one held
  when the block ends.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["STOP_SIGNALS", "signals_held", "stop_signals"]

log = logging.getLogger(__name__)

#: The signals that stop autotune cleanly: systemd and `timeout` send SIGTERM, a terminal
#: Ctrl-C SIGINT, a closed terminal or `kill -HUP` SIGHUP.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@contextmanager
def stop_signals() -> Iterator[None]:
    """Make SIGTERM, SIGINT and SIGHUP raise KeyboardInterrupt while the block runs, so every
    replica is stopped and the run marked interrupted on the way out.

    Only the first signal raises: the same stop often arrives twice (``timeout`` signals its
    child and then the child's process group), and a second KeyboardInterrupt would cut the
    clean stop short (the run left ``running``, the state file not written). Later ones are
    logged and ignored; SIGKILL remains for a stop that hangs.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping: list[str] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if stopping:
            log.warning("%s: already stopping (on %s)", name, stopping[0])
            return
        stopping.append(name)
        raise KeyboardInterrupt(name)

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


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
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    received: list[int] = []

    def hold(signum: int, _frame: Any) -> None:
        received.append(signum)

    def guarded(signum: Any, handler: Any) -> Any:
        if signum in previous:
            return previous[signum]
        return original(signum, handler)

    for sig in STOP_SIGNALS:
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
