"""Pacing: make every trial of a backend take at least a given wall-clock time.

The simulator replays an hour of traffic in well under a second, so running its trials on
several replicas saves little; a paced backend makes each trial (from ``start`` to ``stop`` of
its replica, however many replays it runs) last at least as long as a short real one would,
which is what the parallel benchmark and the fault tests need: trials that take real time, so
parallelism matters and a replica can be killed mid-trial. The measurements are unchanged.
"""

from __future__ import annotations

import time
from typing import Any

from autotune.backends import Backend, Replica
from autotune.errors import ConfigError
from autotune.types import Measurement, Progress, ReplaySchedule, TrialConfig

__all__ = ["PacedBackend", "paced"]


class _PacedReplica:
    def __init__(self, inner: Replica, until: float) -> None:
        self.inner = inner
        self.config = inner.config
        self.start_s = inner.start_s
        self.start_source = inner.start_source
        self._until = until
        self._stopped = False

    def replay(self, schedule: ReplaySchedule, progress: Progress | None = None) -> Measurement:
        return self.inner.replay(schedule, progress)

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            left = self._until - time.monotonic()
            if left > 0:
                time.sleep(left)
        self.inner.stop()


class PacedBackend:
    """Wraps a backend so that each replica lives at least ``min_trial_s`` seconds: ``stop``
    waits out the rest of that time."""

    def __init__(self, inner: Backend, min_trial_s: float) -> None:
        if not min_trial_s >= 0:
            raise ConfigError(f"min_trial_s must be >= 0 seconds, got {min_trial_s}")
        self.inner = inner
        self.kind = inner.kind
        self.min_trial_s = min_trial_s

    def start(self, config: TrialConfig) -> Replica:
        until = time.monotonic() + self.min_trial_s
        return _PacedReplica(self.inner.start(config), until)

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "paced_min_trial_s": self.min_trial_s}


def paced(backend: Backend, min_trial_s: float) -> Backend:
    """``backend`` itself when ``min_trial_s`` is 0, else a :class:`PacedBackend`."""
    return PacedBackend(backend, min_trial_s) if min_trial_s > 0 else backend
