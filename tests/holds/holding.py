"""Holding a process at a moment of a tuning pass: the side that runs in the held process.

autotune announces the moments of a pass as the audit event ``autotune.moment``
(``autotune.orchestrate.moments``). A test that wants a process held at a moment puts this
folder first on the process's ``PYTHONPATH`` and names a folder in ``$AUTOTUNE_HOLDS``; the
folder's ``sitecustomize`` then calls :func:`install_from_env` as the interpreter starts
(processes that process starts, a local Ray's replica actors among them, inherit both). The
hook it installs reads, at each moment, the file ``at`` in that folder:

- ``at``: ``moment[@pass]``: hold at ``moment`` in pass number ``pass`` of the process (passes
  counted by their ``loading`` moment); without ``@pass``, the first time any process reaches
  ``moment`` (a Ray replica actor has no passes of its own);
- ``claimed``: created exclusively by the one process that holds, so one ``at`` holds once;
- ``held``: ``moment@pass pid``, written (whole, by a rename) by the held process, which then
  sleeps until the file is removed, at most :data:`HOLD_MAX_S` seconds. A signal sent
  meanwhile arrives at exactly that moment; a signal handler that raises ends the hold there.

Stdlib only: it is imported by every Python process started with the folder on its path.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

#: The audit event autotune raises at each moment (``MOMENT_EVENT`` in
#: ``autotune.orchestrate.moments``; tests/orchestrate/test_moments.py checks they agree).
EVENT = "autotune.moment"
#: The variable naming the folder a test holds processes through.
HOLDS_ENV = "AUTOTUNE_HOLDS"
AT, CLAIMED, HELD = "at", "claimed", "held"
#: The longest a process stays held when no test releases it.
HOLD_MAX_S = 60.0


def install_from_env() -> None:
    """Install the hook when ``$AUTOTUNE_HOLDS`` names a folder."""
    folder = os.environ.get(HOLDS_ENV)
    if folder:
        install(Path(folder))


def install(folder: Path) -> None:
    """Hold this process at the moment ``folder/at`` names (see the module docstring)."""
    passes = [0]

    def hook(event: str, args: tuple[object, ...]) -> None:
        if event != EVENT:
            return
        moment = str(args[0])
        if moment == "loading":
            passes[0] += 1
        if _wanted(folder, moment, passes[0]):
            _hold(folder, f"{moment}@{passes[0]}")

    sys.addaudithook(hook)


def _wanted(folder: Path, moment: str, passes: int) -> bool:
    """True when ``at`` names this moment (and pass), and this process claims the hold."""
    try:
        spec = (folder / AT).read_text().strip()
    except OSError:
        return False
    name, _, number = spec.partition("@")
    if name != moment or (number and int(number) != passes):
        return False
    try:
        os.close(os.open(folder / CLAIMED, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False  # held once already (by this process or another)
    return True


def _hold(folder: Path, where: str) -> None:
    """Say where and who in ``held``, then sleep until the file is removed."""
    held = folder / HELD
    partial = folder / f".{HELD}.{os.getpid()}"
    partial.write_text(f"{where} {os.getpid()}\n")
    partial.replace(held)
    deadline = time.monotonic() + HOLD_MAX_S
    while held.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
