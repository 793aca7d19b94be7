"""Pacing: make every replay of a backend take at least a given wall-clock time.

The simulator replays an hour of traffic in seconds, so running its trials on several replicas
saves little; a paced backend makes each replay last as long as a real server's would (a fixed
floor per trial), which is what the parallel benchmark and the fault tests need: trials that
take real time, so parallelism matters and a replica can be killed mid-trial. The measurement
itself is unchanged.
"""

from __future__ import annotations

import time
from typing import Any

from autotune.backends import Backend, Replica
from autotune.errors import ConfigError
from autotune.types import Measurement, Progress, ReplaySchedule, TrialConfig

__all__ = ["PacedBackend", "paced"]


class _PacedReplica:
    def __init__(self, inner: Replica, min_replay_s: float) -> None:
        self.inner = inner
        self.config = inner.config
        self.min_replay_s = min_replay_s

    def replay(self, schedule: ReplaySchedule, progress: Progress | None = None) -> Measurement:
        t0 = time.monotonic()
        m = self.inner.replay(schedule, progress)
        left = self.min_replay_s - (time.monotonic() - t0)
        if left > 0:
            time.sleep(left)
        return m

    def stop(self) -> None:
        self.inner.stop()


class PacedBackend:
    """Wraps a backend so that each ``replay`` takes at least ``min_replay_s`` seconds."""

    def __init__(self, inner: Backend, min_replay_s: float) -> None:
        if not min_replay_s >= 0:
            raise ConfigError(f"min_replay_s must be >= 0 seconds, got {min_replay_s}")
        self.inner = inner
        self.kind = inner.kind
        self.min_replay_s = min_replay_s

    def start(self, config: TrialConfig) -> Replica:
        return _PacedReplica(self.inner.start(config), self.min_replay_s)

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "paced_min_replay_s": self.min_replay_s}


def paced(backend: Backend, min_replay_s: float) -> Backend:
    """``backend`` itself when ``min_replay_s`` is 0, else a :class:`PacedBackend`."""
    return PacedBackend(backend, min_replay_s) if min_replay_s > 0 else backend
