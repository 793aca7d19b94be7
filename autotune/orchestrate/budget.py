"""The budget of a pass, kept in replica time so that it binds the same on every backend.

The policy's ``budget`` bounds a pass three ways: trials per workload (each search counts its
own), GPU-hours (``budget.gpu_hours``: every trial's server start and replayed traffic times
the GPUs of a replica, :mod:`autotune.cost`) and time (``budget.wall_clock``). Time is
replica time: the busiest replica's summed trial costs, which on the simulator are simulated
seconds, so a simulated pass stops where real replicas would have to; real time elapsed
counts too when it is more (a real engine's own overheads, a slow simulator).

:class:`Ledger` is charged with every finished trial's cost and says, before a trial starts,
why it must not (:meth:`Ledger.refusal`): the budget is spent, or the trial is predicted to
overrun it. The prediction is the mean replay time of the workload's finished trials (of the
pass's, before the workload has one) plus one server start, with the trials in flight counted
at their prediction too: a
pass stops one trial early rather than one trial late, and it can overrun its budget only by
how much the trials in flight cost more than predicted.

Readings the pass makes after its searches (the mixed sample's, for the capacity plan:
:mod:`~autotune.orchestrate.mixed`) are kept room for: ``kept_readings`` of them, each
predicted at a trial of the pass's (:meth:`Ledger.kept`), are counted as spent when a search
trial is refused, so the searches leave the budget those readings need. When the searches
end, the room is released and each of those readings asks :meth:`Ledger.refusal` itself, like
a trial, predicted at the readings of its kind already made.

A failed trial costs nothing here (its replica time is not measured); on real replicas the
real time it took still counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from autotune.cost import CostTotal, TrialCost

__all__ = ["Ledger"]


@dataclass
class Ledger:
    """What a pass has spent, against ``gpu_hours`` (None: no limit) and ``wall_clock_s``, on
    a pool of ``replicas`` replicas of ``gpus`` GPUs each. ``wall_clock`` is the budget as
    the policy wrote it (for messages)."""

    gpu_hours: float | None
    wall_clock_s: float
    replicas: int
    gpus: int
    wall_clock: str = ""
    kept_readings: int = 0
    clock: Callable[[], float] = time.monotonic
    spent: CostTotal = field(default_factory=CostTotal)
    _t0: float = field(init=False)
    _replica_s: dict[str, float] = field(init=False, default_factory=dict)
    _by_workload: dict[str, CostTotal] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._t0 = self.clock()

    def charge(self, workload: str, replica: str | None, cost: TrialCost | None) -> None:
        """Count a finished trial (``cost`` None: failed or unknown, counted as 0)."""
        self.spent = self.spent.add(cost)
        self._by_workload[workload] = self._by_workload.get(workload, CostTotal()).add(cost)
        if cost is not None:
            key = replica or "?"
            self._replica_s[key] = self._replica_s.get(key, 0.0) + cost.replica_s

    def elapsed_s(self) -> float:
        """The pass's time so far: the busiest replica's replica time, or the real time
        elapsed when that is more."""
        return max(self.clock() - self._t0, max(self._replica_s.values(), default=0.0))

    def _free_replica_s(self) -> float:
        """When the next trial can start, in replica time: the least busy replica's clock
        (0 while a replica has run nothing)."""
        clocks = sorted(self._replica_s.values())
        free = 0.0 if len(clocks) < self.replicas else clocks[0]
        return max(free, self.clock() - self._t0)

    def predicted(self, workload: str) -> TrialCost | None:
        """The cost the next trial of ``workload`` is expected to have (None: no trial has
        finished yet to predict it from): the mean replay time of the workload's trials (of
        the pass's, before it has one) and a server start as the pass's starts cost (a trial
        that reuses a server pays none, but the next config is rarely the one running)."""
        done = self._by_workload.get(workload)
        base = done if done is not None and done.trials else self.spent
        if not base.trials:
            return None
        start = self.spent.start_s / self.spent.starts if self.spent.starts else 0.0
        return TrialCost(start, base.replay_s / base.trials, self.gpus)

    def kept(self) -> TrialCost | None:
        """The cost kept for the readings after the searches: ``kept_readings`` trials of the
        pass's mean (a server start and the mean replay of every trial so far), one replica
        each (None: nothing kept, or no trial has finished to predict it from)."""
        if self.kept_readings <= 0 or not self.spent.trials:
            return None
        start = self.spent.start_s / self.spent.starts if self.spent.starts else 0.0
        n = self.kept_readings
        return TrialCost(n * start, n * self.spent.replay_s / self.spent.trials, self.gpus)

    def refusal_spent(self) -> str | None:
        """Why nothing more may start because the budget is spent (None: some is left)."""
        if self.elapsed_s() >= self.wall_clock_s:
            return (f"budget.wall_clock ({self.wall_clock}) spent: {_hours(self.elapsed_s())} "
                    "of replica time")
        if self.gpu_hours is not None and self.spent.gpu_h >= self.gpu_hours:
            return (f"budget.gpu_hours ({self.gpu_hours:g}) spent: "
                    f"{self.spent.gpu_h:.3g} GPU-h after {self.spent.trials} trials")
        return None

    def refusal(self, workload: str, in_flight: Iterable[str] = (),
                what: str | None = None) -> str | None:
        """Why the next trial of ``workload`` must not start (None: it may). ``in_flight``:
        the workloads of the trials running now, counted at their predicted cost; the readings
        kept for after the searches count as spent (:meth:`kept`). ``what``: the trial's name
        in the reason (default "a trial of <workload>")."""
        what = what or f"a trial of {workload}"
        spent = self.refusal_spent()
        if spent is not None:
            return spent
        nxt = self.predicted(workload)
        if nxt is None:
            return None
        pending = sum((c.gpu_h for c in map(self.predicted, in_flight) if c is not None), 0.0)
        kept = self.kept()
        kept_gpu_h, kept_s = (kept.gpu_h, kept.replica_s / self.replicas) if kept else (0.0, 0.0)
        also = (f" and {kept_gpu_h:.3g} GPU-h kept for the {self.kept_readings} readings of the "
                "mixed sample after the searches" if kept else "")
        if self.gpu_hours is not None and \
                self.spent.gpu_h + pending + kept_gpu_h + nxt.gpu_h > self.gpu_hours:
            return (f"budget.gpu_hours ({self.gpu_hours:g}) would be overrun: "
                    f"{self.spent.gpu_h:.3g} GPU-h spent"
                    + (f", {pending:.3g} in flight" if pending else "") + also
                    + f", and {what} costs about {nxt.gpu_h:.3g} GPU-h "
                    "(a server start and the mean replay of those so far)")
        if self._free_replica_s() + kept_s + nxt.replica_s > self.wall_clock_s:
            return (f"budget.wall_clock ({self.wall_clock}) would be overrun: a replica is free "
                    f"after {_hours(self._free_replica_s())} of replica time"
                    + (f", {_hours(kept_s)} more kept for the mixed sample's readings"
                       if kept else "")
                    + f", and {what} takes about {_hours(nxt.replica_s)}")
        return None


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.3g} h" if seconds >= 3600 else f"{seconds / 60:.3g} min"
