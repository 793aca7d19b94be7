"""One tuning pass: sample → workloads → trials on replicas → recommendations → exports.

:func:`tune` reads as its stages, each a function of its own module:

1. :func:`~autotune.orchestrate.workloads.load_workloads`: the sample, validated whole before
   anything is written, split into the workloads to tune;
2. :func:`~autotune.orchestrate.runs.open_run`: the run (new, or the interrupted one with the
   same sample, policy, backend and seed, resumed without repeating a finished trial), with a
   search per workload;
3. :func:`~autotune.orchestrate.trials.drive_trials`: the pool of replicas kept busy with the
   searches' trials, each persisted in its own transaction as it finishes;
4. :func:`~autotune.orchestrate.mixed.measure_mixed`: before the replicas are released, the
   mixed sample (every workload together) read at capacity on the candidate shared configs;
5. :func:`~autotune.recommend.recommend_workload`: per workload, the best trial stored as a
   recommendation, promoted (and exported) only on a significant gain;
6. :func:`~autotune.orchestrate.mixed.make_plan`: the capacity plan, stored with the run.

A run interrupted (Ctrl-C, SIGTERM, a crash) is marked so and resumed by the next pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.backends import Backend, create_backend, decodes_tokens
from autotune.cost import pass_cost
from autotune.errors import ConfigError
from autotune.orchestrate.mixed import (
    make_plan,
    measure_mixed,
    mixed_readings_planned,
    record_arrivals,
)
from autotune.orchestrate.moments import announce_moment
from autotune.orchestrate.options import Reporter, TuneOptions
from autotune.orchestrate.pool import Pool
from autotune.orchestrate.runs import OpenedRun, WorkloadSearch, open_run
from autotune.orchestrate.trials import drive_trials, open_ledger
from autotune.orchestrate.workloads import LoadedWorkloads, load_traffic, load_workloads
from autotune.plan import MIXED, Plan, readings_made
from autotune.recommend import WorkloadResult, WorkloadTrials, recommend_workload, run_provenance
from autotune.recommend.outputs import unchecked_reason
from autotune.store import Store
from autotune.traffic.load import SampleWorkloads, WorkloadTraffic

if TYPE_CHECKING:
    from autotune.orchestrate.ray_pool import RaySettings

__all__ = ["Reporter", "TuneOptions", "TuneResult", "WorkloadResult", "check_output_subset",
           "load_traffic", "ray_settings", "tune"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TuneResult:
    run_id: str | None  # None when every workload was skipped (no drift)
    status: str  # finished | skipped
    resumed: bool
    workloads: list[WorkloadResult]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (workload, why)
    #: what the pass cost on real replicas (autotune.cost.pass_cost, with ``gpus_per_replica``
    #: and ``backend``); empty when nothing ran
    cost: Mapping[str, Any] = field(default_factory=dict)
    #: why the budget ended the pass (None: every search stopped on its own)
    budget_stop: str | None = None
    plan: Plan | None = None  # the capacity plan stored with the run
    plan_note: str = ""  # why there is no plan


PoolFactory = Callable[[Backend, Reporter], Pool]


def tune(options: TuneOptions, store: Store, reporter: Reporter | None = None,
         pool_factory: PoolFactory | None = None,
         sample: SampleWorkloads | None = None) -> TuneResult:
    """Run one tuning pass; see the module docstring. ``sample``: the pass's sample when the
    caller loaded it already (:func:`~autotune.orchestrate.workloads.load_traffic`)."""
    rep = reporter or Reporter()
    loaded = load_workloads(options, store, sample)
    rep.sample_loaded(loaded.sample, {k: w.requests for k, w in loaded.groups.items()})
    for name, why in loaded.skipped:
        rep.workload_skipped(name, why)
    backend = create_backend(options.backend, options.policy.serve.spec(),
                             options.merged_backend_options(), options.seed)
    check_output_subset(options, loaded.sample, backend)
    sample_id = _record_sample(store, loaded)
    if not loaded.groups:
        return TuneResult(run_id=None, status="skipped", resumed=False, workloads=[],
                          skipped=loaded.skipped)
    run = open_run(options, store, sample_id, loaded.groups)
    rep.run_started(run.run_id, run.resumed, run.finished_before)
    record_arrivals(store, run.run_id, loaded.groups)
    budget_stop = _drive(options, store, run, loaded.groups, backend, rep,
                         pool_factory or _default_pool(options))
    provenance = run_provenance(
        policy=options.policy, backend=options.backend, described=backend.describe(),
        sample={"path": str(loaded.sample.path), "sha256": loaded.sample.sha256,
                "sample_id": sample_id, "size_bytes": loaded.sample.size_bytes,
                "requests": loaded.sample.requests},
        run_id=run.run_id, seed=options.seed)
    cost = _record_cost(options, store, run.run_id, budget_stop)
    results = []
    for w in run.searches:
        _record_calibration(store, run.run_id, w)
        result = recommend_workload(store, options.policy, run.run_id,
                                    _finished(w, budget_stop), provenance,
                                    backend=options.backend, export_dir=options.export_dir,
                                    seed=options.seed, decodes_tokens=decodes_tokens(backend))
        rep.workload_finished(result)
        results.append(result)
        announce_moment("recommended")
    plan, plan_note = make_plan(store, run.run_id)
    store.set_run_status(run.run_id, "finished")
    return TuneResult(run_id=run.run_id, status="finished", resumed=run.resumed,
                      workloads=results, skipped=loaded.skipped, cost=cost,
                      budget_stop=budget_stop, plan=plan, plan_note=plan_note)


def _record_cost(options: TuneOptions, store: Store, run_id: str,
                 budget_stop: str | None) -> dict[str, Any]:
    """The pass's cost (every trial of the run, resumed ones included, and the mixed sample's
    readings) and why the budget ended it, stored in the run's options before any
    recommendation is written."""
    stored = store.plan(run_id)
    mixed = [(MIXED, r.get("metrics") or {}) for r in readings_made(stored.shared)] \
        if stored else []
    cost = pass_cost([*((t.workload, t.metrics) for t in store.trials(run_id)), *mixed])
    cost["gpus_per_replica"] = options.policy.gpus_per_replica
    cost["backend"] = options.backend
    if options.backend == "sim":
        cost["note"] = ("simulated: what this pass would cost on real replicas of the sim "
                        "profile's hardware")
    store.update_run_options(run_id, {"cost": cost, "budget_stop": budget_stop})
    return cost


def check_output_subset(options: TuneOptions, sample: SampleWorkloads,
                        backend: Backend | None = None) -> None:
    """The output check's prompts must come from the sample (checked before anything is
    written; ``autotune start --once`` checks before it opens the database): a subset set
    larger than the sample is refused on a backend that decodes tokens (the default takes what
    there is). ``backend``: the pass's, else the options' is built when it matters."""
    outputs = options.policy.outputs
    wanted, have = outputs.prompts, sample.requests
    if "prompts" not in outputs.model_fields_set or wanted <= have:
        return
    if backend is None:
        backend = create_backend(options.backend, options.policy.serve.spec(),
                                 options.merged_backend_options(), options.seed)
    if decodes_tokens(backend):
        raise ConfigError(
            f"policy key outputs.prompts = {wanted}: the output check's prompt subset is larger "
            f"than the sample ({have} requests in {sample.path}); set outputs.prompts "
            f"to at most {have}, or to 0 to skip the output check")


def _record_sample(store: Store, loaded: LoadedWorkloads) -> int:
    sample = loaded.sample
    return store.record_sample(path=str(sample.path), sha256=sample.sha256,
                               size_bytes=sample.size_bytes, requests=sample.requests,
                               skipped_lines=sample.skipped, workloads=loaded.summaries)


def _drive(options: TuneOptions, store: Store, run: OpenedRun,
           groups: dict[str, WorkloadTraffic], backend: Backend, rep: Reporter,
           pool_factory: PoolFactory) -> str | None:
    """Stages 3 and 4 with the run's status kept true: interrupted or failed when it ends
    early. Returns why the budget ended it (None: every search stopped on its own). The
    searches leave room in the budget for the mixed sample's readings; each is read only when
    the budget left holds it."""
    pool: Pool | None = None
    try:
        pool = pool_factory(backend, rep)
        _use_pool_hardware(pool, run)
        unchecked = unchecked_reason(options.backend, decodes_tokens(backend),
                                     options.policy.outputs.prompts)
        ledger = open_ledger(options, store, run.run_id, pool.capacity,
                             kept_readings=mixed_readings_planned(options, groups))
        budget_stop = drive_trials(options, store, run.run_id, run.searches, pool, rep,
                                   unchecked, ledger)
        measure_mixed(options, store, run.run_id, groups, run.searches, pool, ledger)
        return budget_stop
    except KeyboardInterrupt:
        store.set_run_status(run.run_id, "interrupted",
                             "interrupted by the user (SIGINT/SIGTERM)")
        raise
    except BaseException as e:
        store.set_run_status(run.run_id, "failed", f"{type(e).__name__}: {e}")
        raise
    finally:
        if pool is not None:
            pool.close()


def _use_pool_hardware(pool: Pool, run: OpenedRun) -> None:
    """Tell every search the kind of GPU the pool's replicas run on, when the cluster says
    (a guided search takes it where the policy names no ``hardware.gpu``)."""
    gpu = pool.gpu_kind()
    if not gpu:
        return
    for w in run.searches:
        note = w.searcher.strategy.use_hardware(gpu)
        if note:
            log.info("%s: guided search: %s", w.name, note)


def _finished(w: WorkloadSearch, budget_stop: str | None) -> WorkloadTrials:
    """The workload's trials; a search the budget cut short says so as its stop reason."""
    why = w.searcher.stop_reason or (f"the pass's budget ended it: {budget_stop}"
                                     if budget_stop else "")
    return WorkloadTrials(w.name, w.requests, list(w.scored), w.incumbent, why)


def ray_settings(options: TuneOptions) -> RaySettings:
    """How the pass's replicas run (:mod:`~autotune.orchestrate.ray_pool`)."""
    from autotune.orchestrate.ray_pool import RaySettings

    return RaySettings(
        kind=options.backend, serve=options.policy.serve.spec(),
        backend_options=options.merged_backend_options(), seed=options.seed,
        replicas=options.replicas, address=options.ray_address,
        sim_reserves_gpus=options.policy.sim.reserve_gpus,
        max_retries=options.policy.budget.max_retries)


def _default_pool(options: TuneOptions) -> PoolFactory:
    """SerialPool for one sim replica without a Ray address, else the Ray replica pool."""
    def make(backend: Backend, rep: Reporter) -> Pool:
        from autotune.orchestrate.ray_pool import open_pool

        return open_pool(ray_settings(options), backend, progress=rep.replay_progress)
    return make


def _record_calibration(store: Store, run_id: str, w: WorkloadSearch) -> None:
    """Store the confidence-head calibration a guided search fitted (with its ECE)."""
    cal = w.searcher.strategy.calibration()
    if cal is None:
        return  # not a guided search, or no usable acceptance counters were measured
    store.record_calibration(workload=w.name, run_id=run_id, method=cal.method,
                             params=cal.params(), ece_before=cal.ece_before,
                             ece_after=cal.ece_after)
