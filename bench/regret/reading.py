"""One reading of a config (what a trial of autotune reads of it) and the cache that keeps every
reading once: a run resumes, and methods with the same seed share a fresh replay's reading.
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.regret.records import Json

if TYPE_CHECKING:
    from autotune.orchestrate.servers import MeteredReplica

#: In the key of every reading that carries its cost (a cache from before cost was recorded
#: holds none under it).
COST_KEYED = "cost1"


@dataclass(frozen=True)
class Reading:
    """A config's objective value, whether it met the SLO, the SLO constraints (Optuna's
    convention: feasible when every value is <= 0) and the measurement's summary (its scalars
    and, from a real engine, the acceptance counters), as a trial's search sees them."""

    value: float
    feasible: bool
    constraints: dict[str, float]
    summary: dict[str, Json]


class ReadingCache:
    """Readings keyed by ``prefix|...``, loaded from the ``path`` JSON-lines file (if any) and
    appended to it as they are measured (under a lock: ``--jobs`` processes append too)."""

    def __init__(self, path: str | None, prefix: str) -> None:
        self.path, self.measured = path, 0
        self.readings: dict[str, Reading] = {}
        if path and Path(path).exists():
            for line in Path(path).read_text().splitlines():
                row = json.loads(line)  # a line this class wrote (below)
                if row["key"].startswith(prefix + "|"):
                    self.readings[row["key"]] = Reading(row["value"], row["feasible"],
                                                        row["constraints"], row["summary"])

    def read(self, key: str, measure: Callable[[], Reading]) -> tuple[Reading, bool]:
        """The reading of ``key``, measured (and appended) when not cached; and whether it
        was measured now."""
        if key in self.readings:
            return self.readings[key], False
        r = self.readings[key] = measure()
        self.measured += 1
        if self.path:
            line = json.dumps({"key": key, "value": r.value, "feasible": r.feasible,
                               "constraints": r.constraints, "summary": r.summary})
            with Path(self.path).open("a") as sink:
                fcntl.flock(sink, fcntl.LOCK_EX)
                sink.write(line + "\n")
        return r, True


def reading_cost(replica: MeteredReplica, gpus: int) -> dict[str, Json]:
    """What the reading cost on a real replica of ``gpus`` GPUs, as a trial of autotune records
    it (:mod:`autotune.cost`): the server's start (``replica.start_s``) and the replica time of
    every replay (``replica.busy_s``), under the ``cost_*`` keys, with the start's source."""
    from autotune.cost import SOURCE, TrialCost

    cost = TrialCost(replica.start_s, replica.busy_s, gpus)
    return {**cost.metrics(), SOURCE: replica.start_source}
