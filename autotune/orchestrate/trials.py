"""Stage 3 of a pass: keep the pool of replicas busy with the workloads' trials.

Free replicas are offered to the workloads in :class:`~autotune.orchestrate.fair_share.FairShare`
order; each workload's search says what to run next. Every trial is recorded as ``running``
before it is submitted and in its own transaction when it finishes, with its measurement
summary, SLO constraints and per-request columns (for the significance test), so a crash
loses at most the trials in flight. Every trial's cost (its server start and the replica time
of its readings, :mod:`autotune.cost`) is stored with it and charged to the pass's
:class:`~autotune.orchestrate.budget.Ledger`. The loop ends when every search has stopped, or
when the budget (GPU-hours, replica time) is spent or the next trial would overrun it: no new
trial starts, the trials in flight finish, and the reason is returned.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any

from autotune.cost import SOURCE, TrialCost, trial_cost
from autotune.objective import score_measurement
from autotune.orchestrate.budget import Ledger
from autotune.orchestrate.fair_share import FairShare
from autotune.orchestrate.options import Reporter, TuneOptions
from autotune.orchestrate.pool import Pool, TrialResult, TrialTask
from autotune.orchestrate.runs import WorkloadSearch
from autotune.plan import MIXED, readings_made
from autotune.recommend import Scored
from autotune.recommend.outputs import not_checked
from autotune.search import Suggestion
from autotune.store import Store
from autotune.types import Measurement

__all__ = ["drive_trials", "open_ledger"]

#: Per-request columns kept with each trial (for bootstrap confidence intervals later).
_PER_REQUEST = ("ttft_s", "tpot_s", "e2e_s", "output_tokens", "ok")


def drive_trials(options: TuneOptions, store: Store, run_id: str,
                 searches: Sequence[WorkloadSearch], pool: Pool, rep: Reporter,
                 unchecked: str, ledger: Ledger) -> str | None:
    """Run trials until every search has stopped or the budget is spent; returns why the
    budget ended the pass (None: every search stopped on its own). ``unchecked``: why a trial
    that recorded no greedy outputs is stored "outputs not checked"; ``ledger``: the pass's
    (:func:`open_ledger`)."""
    by_name = {w.name: w for w in searches}
    share = FairShare([w.name for w in searches])
    in_flight: dict[Hashable, tuple[WorkloadSearch, Suggestion]] = {}
    stop: str | None = None
    while True:
        while stop is None and len(in_flight) < pool.capacity:
            picked = None
            for w in (by_name[n] for n in share.order()):
                if w.searcher.stop_reason:
                    continue  # asks nothing more
                stop = ledger.refusal(w.name, [f.name for f, _ in in_flight.values()])
                if stop is not None:
                    break
                if (s := w.searcher.ask()) is not None:
                    picked = (w, s)
                    break
            if picked is None:
                break
            w, s = picked
            _submit(options, store, run_id, w, s, pool, rep)
            in_flight[(w.name, s.number)] = (w, s)
            share.started(w.name)
        if not in_flight:
            return stop
        result = pool.wait()
        w, s = in_flight.pop(result.key)
        share.finished(w.name)
        ledger.charge(w.name, result.replica,
                      _finish(options, store, run_id, w, s, result, rep, unchecked))


def open_ledger(options: TuneOptions, store: Store, run_id: str, replicas: int,
                kept_readings: int = 0) -> Ledger:
    """The pass's ledger, charged with the trials (and mixed-sample readings) a resumed run
    finished before, keeping room for ``kept_readings`` readings after the searches."""
    budget = options.policy.budget
    ledger = Ledger(budget.gpu_hours, budget.wall_clock_s, max(replicas, 1),
                    options.policy.gpus_per_replica, budget.wall_clock,
                    kept_readings=kept_readings)
    for t in store.trials(run_id):
        if t.state in ("complete", "failed"):
            ledger.charge(t.workload, t.replica, trial_cost(t.metrics))
    plan = store.plan(run_id)
    for r in readings_made(plan.shared) if plan else []:  # the mixed readings made before
        ledger.charge(MIXED, r.get("replica"), trial_cost(r.get("metrics") or {}))
    return ledger


def _submit(options: TuneOptions, store: Store, run_id: str, w: WorkloadSearch,
            s: Suggestion, pool: Pool, rep: Reporter) -> None:
    policy = options.policy
    store.record_trial(run_id=run_id, workload=w.name, number=s.number, state="running",
                       params=s.config.as_dict(), is_baseline=s.is_baseline)
    rep.trial_started(w.name, s, w.searcher.budget, w.searcher.finished)
    schedule = policy.replay.schedule(w.requests, seed=options.seed + s.number,
                                      label=f"{run_id}:{w.name}:{s.number}",
                                      slo=policy.objective.slo.slo())
    if any(r.arrival_s is None for r in w.requests):
        schedule = replace(schedule, mode="closed")  # no arrival times
    if s.capacity_hint is not None:
        schedule = replace(schedule, capacity_hint=s.capacity_hint)
    check = policy.outputs.check(w.requests)  # decoded greedily after the replay
    if check is not None:
        schedule = replace(schedule, output_check=check)
    pool.submit(TrialTask((w.name, s.number), s.config, schedule))


def _per_request(m: Measurement) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for name in _PER_REQUEST:
        arr = getattr(m, name)
        out[name] = [round(float(x), 6) for x in arr] if arr.dtype.kind == "f" else \
            [int(x) if arr.dtype.kind in "iu" else bool(x) for x in arr]
    return out


def _cost(options: TuneOptions, m: Measurement | None) -> TrialCost | None:
    """The trial's cost from the replica time its pool charged to the measurement."""
    cost = trial_cost(m.extra) if m is not None else None
    if cost is None:
        return None
    return TrialCost(cost.start_s, cost.replay_s, options.policy.gpus_per_replica)


def _finish(options: TuneOptions, store: Store, run_id: str, w: WorkloadSearch,
            s: Suggestion, result: TrialResult, rep: Reporter,
            unchecked: str) -> TrialCost | None:
    """Store the finished trial, tell its search; returns its cost (None: unknown). A trial
    without greedy outputs is stored "outputs not checked" with ``unchecked`` as the reason."""
    policy = options.policy
    m = result.measurement
    outcome = None
    error = result.error
    if m is not None:
        if m.ok.any():
            outcome = score_measurement(m, policy.objective.maximize,
                                        policy.objective.slo.slo())
        else:
            error = "no request completed: " + "; ".join(m.errors[:3])
    metrics: dict[str, Any] = dict(outcome.summary) if outcome else {}
    if outcome:
        metrics["constraints"] = outcome.constraints
        if "outputs" not in metrics:
            metrics["output_check"] = not_checked(unchecked)
    cost = _cost(options, m)
    if cost is not None:
        metrics.update(cost.metrics())
        metrics[SOURCE] = result.start_source
    if s.is_incumbent:
        metrics["role"] = "incumbent"  # the active recommendation, re-measured
    elif s.is_repeat:
        metrics["role"] = "repeat"  # a close call or race read again before it is recommended
        metrics["repeat_reason"] = s.why
    measured = m if outcome else None
    trial_id = store.record_trial(
        run_id=run_id, workload=w.name, number=s.number,
        state="complete" if outcome else "failed", params=s.config.as_dict(),
        is_baseline=s.is_baseline, value=outcome.value if outcome else None,
        feasible=outcome.feasible if outcome else None, metrics=metrics,
        acceptance_rate=(measured.acceptance.rate
                         if measured is not None and measured.acceptance else None),
        per_request=_per_request(measured) if measured is not None else None,
        error=error, replica=result.replica, node=result.node, attempts=result.attempts)
    w.searcher.tell(s, outcome, measured)
    w.scored.append(Scored(s.number, s.config, outcome, s.is_baseline, trial_id))
    rep.trial_finished(w.name, s, outcome, error)
    return cost
