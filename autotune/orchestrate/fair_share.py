"""How the replicas are shared between the workloads of a pass.

Each free replica goes to the workload with the fewest trials in flight, then the fewest
trials started, then the first in the pass's order: workloads take turns (round robin when
they are even), no workload waits for another's whole budget, and one whose search has
stopped frees its share for the others.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["FairShare"]


class FairShare:
    """The order in which workloads are offered the next free replica."""

    def __init__(self, workloads: Sequence[str]) -> None:
        self._rank = {name: i for i, name in enumerate(workloads)}
        self._running = dict.fromkeys(workloads, 0)
        self._started = dict.fromkeys(workloads, 0)

    def order(self) -> list[str]:
        """Workloads, the one owed the next replica first."""
        return sorted(self._rank, key=lambda w: (self._running[w], self._started[w],
                                                 self._rank[w]))

    def started(self, workload: str) -> None:
        self._running[workload] += 1
        self._started[workload] += 1

    def finished(self, workload: str) -> None:
        self._running[workload] -= 1
