"""Stage 2 of a pass: open a new run, or resume the interrupted one with the same inputs.

A run is resumable when it is ``running`` or ``interrupted`` and has the same backend, policy
(by hash), sample (by hash) and seed. Its finished trials are loaded back: each workload's
search (:func:`autotune.search.open_search`) starts from them and never repeats one.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from autotune.objective import Outcome
from autotune.orchestrate.options import TuneOptions
from autotune.recommend import Scored
from autotune.search import PastTrial, Searcher, open_search
from autotune.store import Store
from autotune.traffic.load import WorkloadTraffic
from autotune.types import Request, TrialConfig

__all__ = ["OpenedRun", "WorkloadSearch", "open_run"]


@dataclass
class WorkloadSearch:
    """One workload during a pass: its requests, its search, and its finished trials."""

    name: str
    requests: list[Request]
    searcher: Searcher
    incumbent: TrialConfig | None = None
    scored: list[Scored] = field(default_factory=list)


@dataclass(frozen=True)
class OpenedRun:
    run_id: str
    resumed: bool
    searches: list[WorkloadSearch]

    @property
    def finished_before(self) -> int:
        return sum(len(w.scored) for w in self.searches)


def _past_trials(store: Store, run_id: str, workload: str) -> list[Scored]:
    out = []
    for t in store.trials(run_id, workload):
        if t.state not in ("complete", "failed"):
            continue
        outcome = None
        if t.state == "complete" and t.value is not None:
            outcome = Outcome(value=float(t.value),
                              constraints=dict(t.metrics.get("constraints", {})),
                              summary=dict(t.metrics))
        out.append(Scored(t.number, t.config, outcome, t.baseline, t.id))
    return out


def open_run(options: TuneOptions, store: Store, sample_id: int,
             groups: Mapping[str, WorkloadTraffic]) -> OpenedRun:
    """The run this pass tunes ``groups`` in, with every workload's search ready to ask."""
    policy = options.policy
    found = store.resumable_run(backend=options.backend, policy_sha256=policy.sha256(),
                                sample_id=sample_id, seed=options.seed) \
        if options.resume else None
    if found is not None:
        run_id = found
        store.set_run_status(run_id, "running")
    else:
        run_id = store.create_run(backend=options.backend, policy_name=policy.name,
                                  policy_sha256=policy.sha256(),
                                  policy=policy.model_dump(mode="json"), sample_id=sample_id,
                                  seed=options.seed,
                                  options={"backend_options": dict(options.backend_options)})
    searches = [_open_search(options, store, run_id, name, traffic.replay)
                for name, traffic in groups.items()]
    return OpenedRun(run_id, found is not None, searches)


def _open_search(options: TuneOptions, store: Store, run_id: str, name: str,
                 requests: list[Request]) -> WorkloadSearch:
    """``requests``: what its trials replay (the first replay.max_requests in arrival order)."""
    policy = options.policy
    past = _past_trials(store, run_id, name)
    active = store.active_recommendation(name)
    incumbent = active.trial_config if active else None
    searcher = open_search(
        policy, run_id, name, store.optuna_url,
        seed=options.seed + zlib.crc32(name.encode()) % 10_000, requests=requests,
        past=[PastTrial(t.number, t.config, t.is_baseline, t.outcome) for t in past],
        incumbent=incumbent)
    return WorkloadSearch(name, requests, searcher, incumbent, past)
