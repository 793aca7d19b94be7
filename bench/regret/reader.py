"""What the methods and the oracle read a world through: one :class:`Reader` per
(world, workload), implemented by the simulator's reader (bench/regret/sim_reader.py) and the
real engine's (bench/regret/engine_reader.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from autotune.policy import Policy
    from autotune.types import TrialConfig
    from bench.regret.oracle import Table
    from bench.regret.reading import Reading
    from bench.regret.workloads import Workload
    from bench.regret.worlds import World


class Reader(Protocol):
    """Readings of one (world, workload), each measured once per replay seed and cached."""

    @property
    def world(self) -> World: ...

    @property
    def wl(self) -> Workload:
        """The workload as the world is held to it (its SLO, its arrivals)."""
        ...

    @property
    def policy(self) -> Policy:
        """The policy of the world and workload: its space and its baseline (the default)."""
        ...

    @property
    def dilation(self) -> tuple[float, float, float]:
        """How much the workload's p99 TTFT and ITL bounds and its arrival times were scaled
        to hold this world to them in its own time (1, 1, 1: as written)."""
        ...

    @property
    def long_run(self) -> int:
        """How far tpe and random run on to find when they first come within 2%."""
        ...

    @property
    def grid_runs(self) -> int | None:
        """How many configs grid reads (None: every config of the space)."""
        ...

    @property
    def measured(self) -> int:
        """Readings measured (not found in the cache) so far."""
        ...

    def search_policy(self, strategy: str, budget: int) -> Policy:
        """The policy a method searches with (``strategy``, ``budget`` trials)."""
        ...

    def tables(self, seeds: int) -> list[Table[TrialConfig]]:
        """The oracle each of ``seeds`` seeds is scored against."""
        ...

    def read(self, config: TrialConfig, replay_seed: int) -> Reading:
        """The reading of ``config`` on ``replay_seed`` (measured once, then cached)."""
        ...
