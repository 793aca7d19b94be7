"""Stage 1 of a pass: the sample, validated whole, split into the workloads to tune.

Requests are split by their ``workload`` label (unlabelled ones grouped automatically); with
``drift_check`` (daemon and nightly passes) a workload whose traffic has not drifted since it
was last tuned is skipped, with the reason. Nothing is written here: a bad line stops the pass
before the database sees anything. The sample is held as columns, and only the requests a
trial replays are read back as objects (:func:`autotune.traffic.load.read_workloads`), so a
million-request sample fits in a few hundred MB.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.orchestrate.capacity_window import check_window
from autotune.orchestrate.options import TuneOptions
from autotune.plan.rates import check_peak_window
from autotune.store import Store
from autotune.traffic.drift import compare, reference
from autotune.traffic.load import SampleWorkloads, WorkloadTraffic, read_workloads

__all__ = ["LoadedWorkloads", "load_traffic", "load_workloads"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedWorkloads:
    sample: SampleWorkloads
    groups: dict[str, WorkloadTraffic]          # the workloads to tune
    summaries: Mapping[str, Mapping[str, Any]]  # every workload's summary and drift reference
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (workload, why)


def load_traffic(options: TuneOptions) -> SampleWorkloads:
    """The pass's sample, validated against the policy (draft block size, max_model_len, a
    capacity reading's window holding a request, a plan's peak window within each workload's
    replayed span) and split into workloads."""
    policy = options.policy
    sample = read_workloads(options.traffic, max_requests=policy.replay.max_requests,
                            skip_invalid=options.skip_invalid,
                            max_acceptance=policy.serve.draft_block_size,
                            max_model_len=policy.serve.max_model_len, seed=options.seed)
    replay = policy.replay
    if replay.find_capacity and replay.mode == "trace":
        for name, w in sample.workloads.items():
            check_window(replay.window_s, replay.time_scale, name, w.replay)
    for name, w in sample.workloads.items():
        check_peak_window(policy.plan.peak_window_s, [r.arrival_s for r in w.replay],
                          what=f"workload {name!r}")
    return sample


def load_workloads(options: TuneOptions, store: Store,
                   sample: SampleWorkloads | None = None) -> LoadedWorkloads:
    """Choose the workloads this pass tunes from the sample (``sample``: already loaded with
    :func:`load_traffic`, e.g. to validate it before the database is opened)."""
    if sample is None:
        sample = load_traffic(options)
    groups = dict(sample.workloads)
    summaries = {name: {**w.summary, "drift_reference": reference(w.features,
                                                                  seed=options.seed)}
                 for name, w in groups.items()}
    if options.workloads is not None:
        groups = {k: v for k, v in groups.items() if k in set(options.workloads)}
    skipped: list[tuple[str, str]] = []
    if options.drift_check:
        groups, skipped = _drift_filter(store, groups)
    return LoadedWorkloads(sample, groups, summaries, skipped)


def _drift_filter(store: Store, groups: dict[str, WorkloadTraffic]
                  ) -> tuple[dict[str, WorkloadTraffic], list[tuple[str, str]]]:
    """Workloads to re-tune (drifted first, then new ones) and those skipped, with why.

    A workload is compared with the sample it was last tuned on: the newest finished run that
    has trials for it (its active recommendation came from that run, or was re-measured there
    and kept).
    """
    drifted: dict[str, WorkloadTraffic] = {}
    new: dict[str, WorkloadTraffic] = {}
    skipped: list[tuple[str, str]] = []
    finished = [r for r in store.runs() if r.status == "finished"]
    for name, reqs in groups.items():
        if store.active_recommendation(name) is None:
            new[name] = reqs
            continue
        last = next((r for r in finished if store.trials(r.id, name)), None)
        ref = (store.sample(last.sample_id).workloads.get(name, {}).get("drift_reference")
               if last is not None else None)
        if not ref:
            new[name] = reqs
            continue
        verdict = compare(name, reqs.features, ref)
        if verdict.drifted:
            drifted[name] = reqs
            log.info("%s: %s", name, verdict.explain())
        else:
            skipped.append((name, verdict.explain()))
    return {**drifted, **new}, skipped
