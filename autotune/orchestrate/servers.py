"""The server a replica slot keeps between trials, so that readings of one config share a start.

On a 1T-parameter model a server start (weights, graph capture) costs minutes of an 8-GPU
node: the dearest part of a trial. Every workload of a pass starts with the same baseline
config, and searches often reach the same configs, so a slot of the pool (the in-process pool,
or one Ray replica actor) keeps its server running after a trial and serves the next trial on
it when that trial's config is the same: the start is charged once, to the trial that paid it
(``cost_start_s``; the reusing trial records 0 and says so in ``cost_start_source``).
Replays on one replica are independent measurements (each is its own schedule of requests), so
a reused server measures what a fresh one would.

:class:`Servers` holds at most one running replica. A trial whose replay raised stops its
server (its state is unknown); ``close`` stops what is left. ``reuse=False`` stops the server
after every trial (paced pools, whose trials must each last a given time).
:class:`MeteredReplica` sums the replica time of every reading a trial replays.
"""

from __future__ import annotations

import math
from dataclasses import replace

from autotune.backends import Backend, Replica
from autotune.cost import REPLAY, START
from autotune.types import Measurement, Progress, ReplaySchedule, TrialConfig

__all__ = ["REUSED", "MeteredReplica", "Servers", "charged"]

#: The start source of a trial served by a server another trial started.
REUSED = "reused: the server was already serving this config (its start was charged once)"


class MeteredReplica:
    """A replica that adds up the replica time of its replays (``busy_s``; a backend that does
    not say counts the measured window, ``duration_s``)."""

    def __init__(self, inner: Replica) -> None:
        self.inner = inner
        self.config = inner.config
        self.start_s = inner.start_s
        self.start_source = inner.start_source
        self.busy_s = 0.0

    def replay(self, schedule: ReplaySchedule, progress: Progress | None = None) -> Measurement:
        m = self.inner.replay(schedule, progress)
        self.busy_s += m.busy_s if math.isfinite(m.busy_s) else max(m.duration_s, 0.0)
        return m

    def stop(self) -> None:
        self.inner.stop()


class Servers:
    """At most one running replica of ``backend``, kept between trials of the same config."""

    def __init__(self, backend: Backend, reuse: bool = True) -> None:
        self.backend = backend
        self.reuse = reuse
        self._replica: Replica | None = None
        #: where the start charged to the last trial comes from (autotune.cost.SOURCE)
        self.last_source: str | None = None

    @property
    def serving(self) -> TrialConfig | None:
        """The config of the server kept running, if any."""
        return self._replica.config if self._replica is not None else None

    def acquire(self, config: TrialConfig) -> tuple[Replica, float]:
        """A replica serving ``config`` and the start seconds charged to this trial: the kept
        server (0 s, :data:`REUSED`) or a new one (its ``start_s``); ``last_source`` says
        which."""
        self.last_source = None
        if self._replica is not None:
            if self._replica.config == config:
                self.last_source = REUSED
                return self._replica, 0.0
            self.discard()
        replica = self.backend.start(config)
        self._replica = replica
        self.last_source = str(replica.start_source)
        return replica, float(replica.start_s)

    def release(self) -> None:
        """The trial ended well: keep its server for the next trial (or stop it)."""
        if not self.reuse:
            self.discard()

    def discard(self) -> None:
        """Stop the server kept, if any."""
        replica, self._replica = self._replica, None
        if replica is not None:
            replica.stop()

    def close(self) -> None:
        self.discard()


def charged(m: Measurement, start_s: float, replay_s: float) -> Measurement:
    """``m`` with the trial's replica time in its extras (:data:`START`, :data:`REPLAY`)."""
    return replace(m, extra={**m.extra, START: start_s, REPLAY: replay_s})

