"""Whether a process runs, read from ``/proc`` (with ``kill(pid, 0)`` where there is none).

The daemon's state file names its pid (``autotune status`` says whether that daemon is alive)
and a Ray pool waits for its replica processes to exit after stopping Ray: both ask
:func:`process_running`. A zombie (exited, not yet reaped by its parent) does not run.
"""

from __future__ import annotations

import os

__all__ = ["process_running"]


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
