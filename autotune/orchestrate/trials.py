"""Stage 3 of a pass: keep the pool of replicas busy with the workloads' trials.

Free replicas are offered to the workloads in :class:`~autotune.orchestrate.fair_share.FairShare`
order; each workload's search says what to run next. Every trial is recorded as ``running``
before it is submitted and in its own transaction when it finishes, with its measurement
summary, SLO constraints and per-request columns (for the significance test), so a crash
loses at most the trials in flight. The loop ends when every search has stopped or the
policy's wall-clock budget is spent (trials in flight then finish).
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any

from autotune.objective import score_measurement
from autotune.orchestrate.fair_share import FairShare
from autotune.orchestrate.options import Reporter, TuneOptions
from autotune.orchestrate.pool import Pool, TrialResult, TrialTask
from autotune.orchestrate.runs import WorkloadSearch
from autotune.recommend import Scored
from autotune.search import Suggestion
from autotune.store import Store
from autotune.types import Measurement

__all__ = ["drive_trials"]

#: Per-request columns kept with each trial (for bootstrap confidence intervals later).
_PER_REQUEST = ("ttft_s", "tpot_s", "e2e_s", "output_tokens", "ok")


def drive_trials(options: TuneOptions, store: Store, run_id: str,
                 searches: Sequence[WorkloadSearch], pool: Pool, rep: Reporter) -> None:
    """Run trials until every search has stopped or the wall-clock budget is spent."""
    policy = options.policy
    deadline = time.monotonic() + policy.budget.wall_clock_s
    by_name = {w.name: w for w in searches}
    share = FairShare([w.name for w in searches])
    in_flight: dict[Hashable, tuple[WorkloadSearch, Suggestion]] = {}
    while True:
        while time.monotonic() < deadline and len(in_flight) < pool.capacity:
            picked = next(((w, s) for w in (by_name[n] for n in share.order())
                           if (s := w.searcher.ask()) is not None), None)
            if picked is None:
                break
            w, s = picked
            _submit(options, store, run_id, w, s, pool, rep)
            in_flight[(w.name, s.number)] = (w, s)
            share.started(w.name)
        if not in_flight:
            return
        result = pool.wait()
        w, s = in_flight.pop(result.key)
        share.finished(w.name)
        _finish(options, store, run_id, w, s, result, rep)


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


def _finish(options: TuneOptions, store: Store, run_id: str, w: WorkloadSearch,
            s: Suggestion, result: TrialResult, rep: Reporter) -> None:
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
