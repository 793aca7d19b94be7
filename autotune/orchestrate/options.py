"""What one tuning pass needs besides the store, and the hooks it reports progress through."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.policy import Policy

if TYPE_CHECKING:
    from autotune.objective import Outcome
    from autotune.recommend import WorkloadResult
    from autotune.search import Suggestion
    from autotune.traffic.load import SampleWorkloads

__all__ = ["Reporter", "TuneOptions"]


@dataclass(frozen=True)
class TuneOptions:
    """Everything one pass needs besides the store."""

    traffic: Path
    policy: Policy
    backend: str = "sim"
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    skip_invalid: bool = False
    export_dir: Path = Path("storage/exports")
    workloads: Sequence[str] | None = None  # restrict to these workloads
    resume: bool = True
    drift_check: bool = False  # skip workloads whose traffic has not drifted since tuned
    replicas: int | None = None  # None: sim → local cores, vllm → as many as the cluster holds
    ray_address: str | None = None  # None: $RAY_ADDRESS, else a local Ray (or none for 1 sim)

    def merged_backend_options(self) -> dict[str, Any]:
        """The backend's options: the policy's ``sim`` section for the simulator, then the
        options given explicitly."""
        merged: dict[str, Any] = {}
        if self.backend == "sim":
            merged.update(self.policy.sim.model_dump())
        merged.update(self.backend_options)
        return merged


class Reporter:
    """Hooks the pass calls as it goes; every hook defaults to doing nothing.

    A reporter is also a context manager (entered around a pass) so a live display can start
    and stop with it.
    """

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def sample_loaded(self, sample: SampleWorkloads, workloads: Mapping[str, int]) -> None: ...

    def run_started(self, run_id: str, resumed: bool, finished_trials: int) -> None: ...

    def trial_started(self, workload: str, s: Suggestion, budget: int,
                      finished: int) -> None:
        """Trial ``s`` started; ``finished`` trials of the workload's ``budget`` are done."""

    def trial_finished(self, workload: str, s: Suggestion, outcome: Outcome | None,
                       error: str | None) -> None: ...

    def replay_progress(self, done: int, total: int | None) -> None: ...

    def workload_finished(self, result: WorkloadResult) -> None: ...

    def workload_skipped(self, workload: str, why: str) -> None: ...
