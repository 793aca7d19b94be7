"""Where trials run: a pool of replicas behind a narrow submit/wait interface.

The tuning driver keeps up to ``capacity`` trials in flight: it ``submit``s tasks and ``wait``s
for whichever finishes first. :class:`SerialPool` runs one trial at a time in this process (the
default for the simulator); the Ray pool (``autotune.orchestrate.ray_pool``) runs one per replica
actor. A pool turns a trial's expected failures (``TrialFailed``, ``BackendError``) into a
failed :class:`TrialResult`; anything else is a bug and propagates. Pools announce the moments
of a pass they reach (``trial``, ``replaying``, ``recommending``;
:mod:`~autotune.orchestrate.moments`).
"""

from __future__ import annotations

import logging
import socket
import time
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, replace
from typing import Protocol

from autotune.backends import Backend, GreedyDecoder
from autotune.errors import AutotuneError, BackendError
from autotune.orchestrate.capacity import replay_at_capacity
from autotune.orchestrate.moments import announce_moment
from autotune.types import Measurement, Progress, ReplaySchedule, TrialConfig

__all__ = ["Pool", "SerialPool", "TrialResult", "TrialTask", "run_trial"]

log = logging.getLogger(__name__)


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
    """Start a replica, replay (at capacity when the schedule asks), decode the schedule's
    output check greedily when the replica returns tokens, always stop it."""
    replica = backend.start(config)
    try:
        announce_moment("replaying")
        if schedule.capacity_slo is not None and schedule.mode == "trace":
            m = replay_at_capacity(replica, schedule, schedule.capacity_slo, progress)
        else:
            m = replica.replay(schedule, progress)
        if schedule.output_check is not None and isinstance(replica, GreedyDecoder):
            m = replace(m, outputs=replica.decode_greedily(schedule.output_check))
        return m
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
        announce_moment("trial")
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
        announce_moment("recommending")

