"""Where trials run: a pool of replicas behind a narrow submit/wait interface.

The tuning driver keeps up to ``capacity`` trials in flight: it ``submit``s tasks and ``wait``s
for whichever finishes first. :class:`SerialPool` runs one trial at a time in this process (the
default for the simulator); the Ray pool (``autotune.orchestrate.ray_pool``) runs one per replica
actor. A pool turns a trial's expected failures (``TrialFailed``, ``BackendError``) into a
failed :class:`TrialResult`; anything else is a bug and propagates. Pools announce the moments
of a pass they reach (``trial``, ``replaying``, ``recommending``;
:mod:`~autotune.orchestrate.moments`). A pool keeps a trial's server running for the next
trial of the same config (:mod:`~autotune.orchestrate.servers`), so a config several
workloads read in one pass starts once; every trial's measurement carries its cost
(:mod:`autotune.cost`).
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
from autotune.orchestrate.servers import MeteredReplica, Servers, charged
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
    #: where the server start charged to the trial comes from (autotune.cost.SOURCE)
    start_source: str | None = None


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


def run_trial(servers: Backend | Servers, config: TrialConfig, schedule: ReplaySchedule,
              progress: Progress | None = None) -> Measurement:
    """Replay ``schedule`` (at capacity when it asks) and decode its output check greedily when
    the replica returns tokens, on a server serving ``config``: the one
    ``servers`` kept when it serves that config, else a new one (from a bare backend: a new one,
    stopped after the trial). Returns the measurement, its extras charged with the trial's
    replica time (:func:`~autotune.orchestrate.servers.charged`; the start's source is
    ``servers.last_source``). A replay that raises stops its server."""
    owned = not isinstance(servers, Servers)
    held = Servers(servers, reuse=False) if not isinstance(servers, Servers) else servers
    replica, start_s = held.acquire(config)
    metered = MeteredReplica(replica)
    try:
        announce_moment("replaying")
        if schedule.capacity_slo is not None and schedule.mode == "trace":
            m = replay_at_capacity(metered, schedule, schedule.capacity_slo, progress)
        else:
            m = metered.replay(schedule, progress)
        if schedule.output_check is not None and isinstance(replica, GreedyDecoder):
            t0 = time.monotonic()  # only real engines decode: their time is wall time
            m = replace(m, outputs=replica.decode_greedily(schedule.output_check))
            metered.busy_s += time.monotonic() - t0  # the check holds the replica too
    except BaseException:
        held.discard()
        raise
    if owned:
        held.close()
    else:
        held.release()
    return charged(m, start_s, metered.busy_s)


class SerialPool:
    """One trial at a time, in this process."""

    def __init__(self, backend: Backend, progress: Progress | None = None,
                 reuse: bool = True) -> None:
        self.backend = backend
        self.progress = progress
        self._servers = Servers(backend, reuse)
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
            m = run_trial(self._servers, task.config, task.schedule, self.progress)
        except AutotuneError as e:
            log.warning("trial %s failed: %s", task.key, e)
            return TrialResult(task.key, None, error=str(e), replica="local-0", node=node,
                               seconds=time.monotonic() - t0)
        return TrialResult(task.key, m, replica="local-0", node=node,
                           seconds=time.monotonic() - t0,
                           start_source=self._servers.last_source)

    def close(self) -> None:
        self._queue.clear()
        self._servers.close()
        announce_moment("recommending")

