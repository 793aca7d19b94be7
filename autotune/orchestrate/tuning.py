"""One tuning pass: sample → workloads → search per workload on a pool → store → exports.

The pass validates the whole sample before it writes anything, records the sample and the run,
then keeps the pool busy with trials asked from each workload's searcher, persisting every
trial in its own transaction as it finishes. A run interrupted (Ctrl-C, SIGTERM, a crash) is
resumed by the next pass with the same sample, policy, backend and seed: finished trials are
loaded back and not repeated.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from autotune.acceptance import curve_from_predictions
from autotune.backends import Backend, create_backend
from autotune.errors import AutotuneError, SearchError
from autotune.export import render, window_schedule, write_atomic
from autotune.objective import Outcome, Scored, score_measurement, select_best
from autotune.orchestrate.pool import Pool, TrialResult, TrialTask
from autotune.policy import Policy
from autotune.search import PastTrial, Searcher, Suggestion
from autotune.search.guided import Guide, make_guide
from autotune.search.significance import Decision, RequestRates, decide, request_rates
from autotune.store import Store
from autotune.traffic.drift import compare, reference
from autotune.traffic.load import LoadedSample, load_sample, split_workloads, workload_requests
from autotune.traffic.summary import summarize
from autotune.types import Measurement, Request, TrialConfig

__all__ = ["Reporter", "TuneOptions", "TuneResult", "WorkloadResult", "tune"]

log = logging.getLogger(__name__)

#: Per-request columns kept with each trial (for bootstrap confidence intervals later).
_PER_REQUEST = ("ttft_s", "tpot_s", "e2e_s", "output_tokens", "ok")


class Reporter:
    """Hooks the pass calls as it goes; every hook defaults to doing nothing.

    A reporter is also a context manager (entered around a pass) so a live display can start
    and stop with it.
    """

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def sample_loaded(self, sample: LoadedSample, workloads: Mapping[str, int]) -> None: ...

    def run_started(self, run_id: str, resumed: bool, finished_trials: int) -> None: ...

    def trial_started(self, workload: str, s: Suggestion, budget: int) -> None: ...

    def trial_finished(self, workload: str, s: Suggestion, outcome: Outcome | None,
                       error: str | None) -> None: ...

    def replay_progress(self, done: int, total: int | None) -> None: ...

    def workload_finished(self, result: WorkloadResult) -> None: ...

    def workload_skipped(self, workload: str, why: str) -> None: ...


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


@dataclass(frozen=True)
class WorkloadResult:
    workload: str
    trials: int
    failed: int
    recommendation: dict[str, Any] | None
    best: Outcome | None
    baseline: Outcome | None
    export_path: Path | None
    promoted: bool
    reason: str


@dataclass(frozen=True)
class TuneResult:
    run_id: str | None  # None when every workload was skipped (no drift)
    status: str  # finished | skipped
    resumed: bool
    workloads: list[WorkloadResult]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (workload, why)


@dataclass
class _Workload:
    name: str
    requests: list[Request]
    searcher: Searcher
    incumbent: TrialConfig | None = None
    scored: list[Scored] = field(default_factory=list)
    trial_ids: dict[int, int] = field(default_factory=dict)
    failed: int = 0


def _per_request(m: Measurement) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for name in _PER_REQUEST:
        arr = getattr(m, name)
        out[name] = [round(float(x), 6) for x in arr] if arr.dtype.kind == "f" else \
            [int(x) if arr.dtype.kind in "iu" else bool(x) for x in arr]
    return out


def _past_trials(store: Store, run_id: str, workload: str) -> list[tuple[PastTrial, int]]:
    out = []
    for t in store.trials(run_id, workload):
        if t["state"] not in ("complete", "failed"):
            continue
        outcome = None
        if t["state"] == "complete" and t["value"] is not None:
            m = t["metrics"]
            outcome = Outcome(value=float(t["value"]),
                              constraints=dict(m.get("constraints", {})), summary=m)
        config = TrialConfig.from_dict(t["params"])
        out.append((PastTrial(t["number"], config, bool(t["baseline"]), outcome), t["id"]))
    return out


def tune(options: TuneOptions, store: Store, reporter: Reporter | None = None,
         pool_factory: Callable[[Backend, Reporter], Pool] | None = None) -> TuneResult:
    """Run one tuning pass; see the module docstring."""
    rep = reporter or Reporter()
    policy = options.policy
    block = policy.serve.draft_block_size
    sample = load_sample(options.traffic, skip_invalid=options.skip_invalid,
                         max_acceptance=block)
    groups = split_workloads(sample.requests, seed=options.seed)
    summaries = {name: {**summarize(reqs, total=False)[0].as_dict(),
                        "drift_reference": reference(reqs, seed=options.seed)}
                 for name, reqs in groups.items()}
    if options.workloads is not None:
        groups = {k: v for k, v in groups.items() if k in set(options.workloads)}
    skipped: list[tuple[str, str]] = []
    if options.drift_check:
        groups, skipped = _drift_filter(store, groups)
    rep.sample_loaded(sample, {k: len(v) for k, v in groups.items()})
    for name, why in skipped:
        rep.workload_skipped(name, why)

    backend = create_backend(options.backend, policy.serve.spec(), _backend_options(options),
                             options.seed)
    sample_id = store.record_sample(path=str(sample.path), sha256=sample.sha256,
                                    size_bytes=sample.size_bytes,
                                    requests=len(sample.requests), skipped_lines=sample.skipped,
                                    workloads=summaries)
    if not groups:
        return TuneResult(run_id=None, status="skipped", resumed=False, workloads=[],
                          skipped=skipped)
    found = store.resumable_run(backend=options.backend, policy_sha256=policy.sha256(),
                                sample_id=sample_id, seed=options.seed) \
        if options.resume else None
    resumed = found is not None
    if found is not None:
        run_id = found
        store.set_run_status(run_id, "running")
    else:
        run_id = store.create_run(backend=options.backend, policy_name=policy.name,
                                  policy_sha256=policy.sha256(),
                                  policy=policy.model_dump(mode="json"), sample_id=sample_id,
                                  seed=options.seed,
                                  options={"backend_options": dict(options.backend_options)})

    workloads: list[_Workload] = []
    finished_before = 0
    for name, reqs in groups.items():
        past = _past_trials(store, run_id, name)
        finished_before += len(past)
        active = store.active_recommendation(name)
        incumbent = TrialConfig.from_dict(active["config"]) if active else None
        requests = workload_requests(reqs, policy.replay.max_requests)
        searcher = Searcher(policy=policy, run_id=run_id, workload=name,
                            storage_url=store.optuna_url,
                            seed=options.seed + zlib.crc32(name.encode()) % 10_000,
                            past=[p for p, _ in past], incumbent=incumbent,
                            guide=_guide(policy, requests))
        w = _Workload(name, requests, searcher, incumbent=incumbent)
        for p, trial_id in past:
            w.scored.append(Scored(p.number, p.config, p.outcome, p.is_baseline))
            w.trial_ids[p.number] = trial_id
            w.failed += p.outcome is None
        workloads.append(w)
    rep.run_started(run_id, resumed, finished_before)

    pool: Pool | None = None
    try:
        pool = (pool_factory or _default_pool(options))(backend, rep)
        _drive(options, store, run_id, workloads, pool, rep)
    except KeyboardInterrupt:
        store.set_run_status(run_id, "interrupted", "interrupted by the user (SIGINT/SIGTERM)")
        raise
    except BaseException as e:
        store.set_run_status(run_id, "failed", f"{type(e).__name__}: {e}")
        raise
    finally:
        if pool is not None:
            pool.close()

    provenance_base = _provenance(options, sample, sample_id, run_id, backend)
    for w in workloads:
        _record_calibration(store, run_id, w)
    results = [_recommend(options, store, run_id, w, provenance_base) for w in workloads]
    for r in results:
        rep.workload_finished(r)
    store.set_run_status(run_id, "finished")
    return TuneResult(run_id=run_id, status="finished", resumed=resumed, workloads=results,
                      skipped=skipped)


def _drift_filter(store: Store, groups: dict[str, list[Request]]
                  ) -> tuple[dict[str, list[Request]], list[tuple[str, str]]]:
    """Workloads to re-tune (drifted first, then new ones) and those skipped, with why.

    A workload is compared with the sample it was last tuned on: the newest finished run that
    has trials for it (its active recommendation came from that run, or was re-measured there
    and kept).
    """
    drifted: dict[str, list[Request]] = {}
    new: dict[str, list[Request]] = {}
    skipped: list[tuple[str, str]] = []
    finished = [r for r in store.runs() if r["status"] == "finished"]
    for name, reqs in groups.items():
        if store.active_recommendation(name) is None:
            new[name] = reqs
            continue
        last = next((r for r in finished if store.trials(r["run"], name)), None)
        sample_id = (last or {}).get("traffic", {}).get("sample_id")
        ref = (store.sample(int(sample_id))["workloads"].get(name, {}).get("drift_reference")
               if sample_id is not None else None)
        if not ref:
            new[name] = reqs
            continue
        verdict = compare(name, reqs, ref)
        if verdict.drifted:
            drifted[name] = reqs
            log.info("%s: %s", name, verdict.explain())
        else:
            skipped.append((name, verdict.explain()))
    return {**drifted, **new}, skipped


def _backend_options(options: TuneOptions) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    if options.backend == "sim":
        merged.update(options.policy.sim.model_dump())
    merged.update(options.backend_options)
    return merged


def _default_pool(options: TuneOptions) -> Callable[[Backend, Reporter], Pool]:
    """SerialPool for one sim replica without a Ray address, else the Ray replica pool."""
    def make(backend: Backend, rep: Reporter) -> Pool:
        from autotune.orchestrate.ray_pool import RaySettings, open_pool

        settings = RaySettings(
            kind=options.backend, serve=options.policy.serve.spec(),
            backend_options=_backend_options(options), seed=options.seed,
            replicas=options.replicas, address=options.ray_address,
            max_retries=options.policy.budget.max_retries)
        return open_pool(settings, backend, progress=rep.replay_progress)
    return make


def _drive(options: TuneOptions, store: Store, run_id: str, workloads: list[_Workload],
           pool: Pool, rep: Reporter) -> None:
    """Keep the pool full until every searcher is done or the wall-clock budget is spent."""
    policy = options.policy
    deadline = time.monotonic() + policy.budget.wall_clock_s
    in_flight: dict[Hashable, tuple[_Workload, Suggestion]] = {}
    while True:
        if time.monotonic() < deadline:
            for w in workloads:
                while len(in_flight) < pool.capacity:
                    s = w.searcher.ask()
                    if s is None:
                        break
                    key = (w.name, s.number)
                    store.record_trial(run_id=run_id, workload=w.name, number=s.number,
                                       state="running", params=s.config.as_dict(),
                                       is_baseline=s.is_baseline)
                    rep.trial_started(w.name, s, w.searcher.budget)
                    schedule = policy.replay.schedule(w.requests, seed=options.seed + s.number,
                                                      label=f"{run_id}:{w.name}:{s.number}",
                                                      slo=policy.objective.slo.slo())
                    if any(r.arrival_s is None for r in w.requests):
                        schedule = replace(schedule, mode="closed")  # no arrival times
                    pool.submit(TrialTask(key, s.config, schedule))
                    in_flight[key] = (w, s)
        if not in_flight:
            return
        result = pool.wait()
        w, s = in_flight.pop(result.key)
        _finish_trial(options, store, run_id, w, s, result, rep)


def _finish_trial(options: TuneOptions, store: Store, run_id: str, w: _Workload,
                  s: Suggestion, result: TrialResult, rep: Reporter) -> None:
    policy = options.policy
    outcome = None
    error = result.error
    if result.measurement is not None:
        outcome = score_measurement(result.measurement, policy.objective.maximize,
                           policy.objective.slo.slo())
        if not result.measurement.ok.any():
            error = "no request completed: " + "; ".join(result.measurement.errors[:3])
            outcome = None
    metrics = dict(outcome.summary) if outcome else {}
    if outcome:
        metrics["constraints"] = outcome.constraints
    if s.is_incumbent:
        metrics["role"] = "incumbent"  # the active recommendation, re-measured
    trial_id = store.record_trial(
        run_id=run_id, workload=w.name, number=s.number,
        state="complete" if outcome else "failed", params=s.config.as_dict(),
        is_baseline=s.is_baseline, value=outcome.value if outcome else None,
        feasible=outcome.feasible if outcome else None, metrics=metrics,
        acceptance_rate=(result.measurement.acceptance.rate
                         if outcome and result.measurement and result.measurement.acceptance
                         else None),
        per_request=_per_request(result.measurement) if outcome and result.measurement else None,
        error=error, replica=result.replica, node=result.node, attempts=result.attempts)
    w.searcher.tell(s, outcome, result.measurement if outcome else None)
    w.scored.append(Scored(s.number, s.config, outcome, s.is_baseline))
    w.trial_ids[s.number] = trial_id
    w.failed += outcome is None
    rep.trial_finished(w.name, s, outcome, error)


def _provenance(options: TuneOptions, sample: LoadedSample, sample_id: int, run_id: str,
                backend: Backend) -> dict[str, Any]:
    policy = options.policy
    described = backend.describe()
    return {
        "backend": options.backend,
        "backend_details": described,
        "model": policy.serve.model,
        "draft_model": policy.serve.draft_model,
        "method": policy.serve.method,
        "vllm_version": described.get("vllm_version"),
        "hardware": described.get("hardware") or described.get("profile"),
        "traffic": {"path": str(sample.path), "sha256": sample.sha256, "sample_id": sample_id,
                    "size_bytes": sample.size_bytes, "requests": len(sample.requests)},
        "policy": {"name": policy.name, "sha256": policy.sha256()},
        "run": run_id,
        "seed": options.seed,
    }


def _guide(policy: Policy, requests: Sequence[Request]) -> Guide | None:
    """The acceptance-guided planner of a workload when the policy asks for ``guided``."""
    if policy.search.strategy != "guided" or not requests:
        return None
    return make_guide(requests, policy.space.configs(), policy)


def _record_calibration(store: Store, run_id: str, w: _Workload) -> None:
    """Store the confidence-head calibration a guided search fitted (with its ECE)."""
    guide = w.searcher.guide
    if guide is None:
        return
    cal = guide.predictor.calibration
    if cal.ece_before is None:
        return  # no usable acceptance counters were measured
    store.record_calibration(workload=w.name, run_id=run_id, method=cal.method,
                             params=cal.params(), ece_before=cal.ece_before,
                             ece_after=cal.ece_after)


def _recommend(options: TuneOptions, store: Store, run_id: str, w: _Workload,
               provenance_base: Mapping[str, Any]) -> WorkloadResult:
    policy = options.policy
    best = select_best(w.scored)
    baseline = next((t for t in w.scored if t.is_baseline), None)
    if best is None or best.outcome is None:
        return WorkloadResult(w.name, len(w.scored), w.failed, None, None,
                              baseline.outcome if baseline else None, None, False,
                              "every trial failed; see `autotune trials --run " + run_id + "`")
    config: TrialConfig = best.config
    curve = curve_from_predictions(w.requests, policy.serve.draft_block_size)
    measured_pos = best.outcome.summary.get("per_position_acceptance")
    provenance = dict(provenance_base)
    provenance["acceptance"] = {
        "predicted_per_position": (list(curve.survival[: config.num_speculative_tokens])
                                   if curve else None),
        "measured_per_position": measured_pos,
        "predicted_tokens_per_step": (curve.expected_tokens(config.num_speculative_tokens)
                                      if curve else None),
        "measured_tokens_per_step": best.outcome.summary.get("mean_accepted_length"),
    }
    provenance["profile"] = (provenance_base.get("backend_details") or {}).get("profile")
    provenance["trials"] = len(w.scored)
    provenance["feasible"] = best.outcome.feasible
    rows, by_level = window_schedule(
        ((t.config.max_num_seqs, t.config.num_speculative_tokens, t.outcome.value,
          t.outcome.feasible) for t in w.scored if t.outcome is not None), config.max_num_seqs)
    provenance["window_schedule"] = rows
    provenance["window_by_max_num_seqs"] = {str(k): v for k, v in by_level.items()}
    trial_id = w.trial_ids.get(best.number)
    active = store.active_recommendation(w.name)
    # The active config re-measured in this run, on this traffic, is what the best trial must
    # beat significantly (a measurement on older traffic is not comparable).
    remeasured = next((t for t in w.scored if w.incumbent is not None
                       and t.config == w.incumbent and t.outcome is not None), None)
    against = w.trial_ids.get(remeasured.number) if remeasured else None
    decision = _should_promote(options, store, best.outcome, trial_id, active, against)
    rec = store.add_recommendation(
        workload=w.name, config=config.as_dict(),
        speculative_config=policy.serve.spec().speculative_config(config),
        serve=policy.serve.model_dump(mode="json"), objective=policy.objective.maximize,
        value=best.outcome.value,
        baseline_value=baseline.outcome.value if baseline and baseline.outcome else None,
        run_id=run_id, trial_id=trial_id, backend=options.backend, provenance=provenance,
        value_ci=decision.value_ci, promote=decision.promote, reason=decision.reason,
        gain=decision.gain, gain_ci=decision.gain_ci, compared_with=decision.compared_with,
        check_active=True)
    promote, reason = rec["status"] == "active", str(rec["reason"])
    export_path = None
    if promote:
        export_path = _export(options.export_dir, rec)
    return WorkloadResult(w.name, len(w.scored), w.failed, rec, best.outcome,
                          baseline.outcome if baseline else None, export_path, promote, reason)


def _should_promote(options: TuneOptions, store: Store, outcome: Outcome, trial_id: int | None,
                    active: Mapping[str, Any] | None,
                    remeasured_id: int | None = None) -> Decision:
    """Promote only a result meeting the SLOs whose gain over the active one is significant
    (bootstrap over the two trials' requests, :mod:`autotune.search.significance`).

    The active one is compared as re-measured in this run on the same traffic
    (``remeasured_id``) when it was; its original trial otherwise.
    """
    objective = options.policy.objective.maximize
    slo = options.policy.objective.slo.slo()

    def rates(tid: int | None) -> RequestRates | None:
        trial = store.trial(tid) if tid is not None else None
        if not trial or not trial.get("per_request"):
            return None
        try:
            return request_rates(trial["per_request"], (trial["metrics"] or {}).get("duration_s"),
                                 objective, slo)
        except SearchError as e:
            log.warning("trial %s: %s", tid, e)
            return None

    return decide(objective=objective, feasible=outcome.feasible,
                  constraints=outcome.constraints, new=rates(trial_id),
                  active_id=active["id"] if active else None,
                  active=(rates(remeasured_id or active.get("trial_id")) if active else None),
                  seed=options.seed)


def _export(export_dir: Path, rec: Mapping[str, Any]) -> Path | None:
    fmt = "speculative-config" if rec.get("speculative_config") else "vllm-args"
    suffix = "json" if fmt == "speculative-config" else "sh"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in rec["workload"])
    try:
        return write_atomic(export_dir / f"{safe}.{fmt}.{suffix}", render(rec, fmt))
    except AutotuneError as e:
        log.warning("export of %s failed: %s", rec["workload"], e)
        return None

