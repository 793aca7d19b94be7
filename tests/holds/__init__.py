"""Holding processes at moments of a tuning pass: the test's side (see ``holding`` for the
held process's side and the files they share).

A test makes a :class:`Holds` on a fresh folder, says where to hold (:meth:`Holds.hold_at`),
starts the process with :meth:`Holds.env`, waits until it is held (:meth:`Holds.wait`), does
what must happen at that moment (a signal, a kill, a look at the database) and releases it
(:meth:`Holds.release`).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from holds.holding import AT, CLAIMED, HELD, HOLDS_ENV

__all__ = ["FOLDER", "Held", "Holds"]

#: The folder a held process needs first on its PYTHONPATH (its sitecustomize installs the
#: hook).
FOLDER = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Held:
    """A process held at a moment: the moment, the pass (0: the process counts none) and pid."""

    moment: str
    pass_number: int
    pid: int


@dataclass(frozen=True)
class Holds:
    """Holds through the files of ``folder``."""

    folder: Path

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` with what a process needs to be held: this folder first on its PYTHONPATH
        and ``$AUTOTUNE_HOLDS``."""
        path = [str(FOLDER), *filter(None, [base.get("PYTHONPATH", "")])]
        return {**base, "PYTHONPATH": os.pathsep.join(path), HOLDS_ENV: str(self.folder)}

    def hold_at(self, spec: str) -> None:
        """Hold the next process that reaches ``spec`` (``moment[@pass]``), once."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for name in (CLAIMED, HELD):
            (self.folder / name).unlink(missing_ok=True)
        (self.folder / AT).write_text(spec + "\n")

    def wait(self, proc: subprocess.Popen[Any] | None = None,
             timeout_s: float = 240.0) -> Held:
        """Block until a process is held; fail when ``proc`` exits first or after
        ``timeout_s`` (a give-up: a process normally gets there in seconds)."""
        held = self.folder / HELD
        deadline = time.monotonic() + timeout_s
        while not held.exists():
            if proc is not None and proc.poll() is not None:
                raise AssertionError(f"the process exited ({proc.returncode}) before the hold "
                                     f"at {self.spec()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no process reached the hold at {self.spec()} within "
                                     f"{timeout_s:g} s")
            time.sleep(0.02)
        where, pid = held.read_text().split()
        moment, _, number = where.partition("@")
        return Held(moment, int(number), int(pid))

    def release(self) -> None:
        """Let the held process go on (a dead one needs no release)."""
        (self.folder / HELD).unlink(missing_ok=True)

    def clear(self) -> None:
        """Hold nothing more, and release a process still held."""
        for name in (AT, CLAIMED, HELD):
            (self.folder / name).unlink(missing_ok=True)

    def spec(self) -> str:
        try:
            return (self.folder / AT).read_text().strip()
        except OSError:
            return "(nothing)"
