"""The last stage of a pass: what the capacity plan reads besides the trials, and the plan.

Before the replicas are released, the pass records each workload's replayed arrival times (the
rate the capacities multiply) and reads the **mixed sample** — every workload's replayed
requests together, in arrival order — at capacity on each candidate shared config: each
workload's best config (the one its recommendation will be, :func:`~autotune.recommend.
choose.select_best`), once each. The readings are stored with the run's plan row (a resumed
run does not read a config twice), so ``autotune plan --run`` measures nothing; their cost is
charged to the pass (under the workload :data:`~autotune.plan.MIXED`). After the
recommendations, the plan is made from the database (:func:`~autotune.plan.plan_for_run`) and
stored with the run.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from autotune.cost import TrialCost, trial_cost
from autotune.errors import PlanError
from autotune.objective import score_measurement
from autotune.orchestrate.budget import Ledger
from autotune.orchestrate.options import TuneOptions
from autotune.orchestrate.pool import Pool, TrialResult, TrialTask
from autotune.orchestrate.runs import WorkloadSearch
from autotune.plan import MIXED, Plan, plan_for_run, readings_made
from autotune.recommend import select_best
from autotune.store import Store
from autotune.traffic.load import WorkloadTraffic
from autotune.types import Request, TrialConfig

__all__ = ["make_plan", "measure_mixed", "mixed_readings_planned", "mixed_requests",
           "record_arrivals"]

log = logging.getLogger(__name__)


def record_arrivals(store: Store, run_id: str, groups: Mapping[str, WorkloadTraffic]) -> None:
    """Store each timed workload's replayed arrival times (ms resolution) with the run."""
    arrivals = {name: [round(r.arrival_s, 3) for r in w.replay if r.arrival_s is not None]
                for name, w in groups.items()
                if w.replay and all(r.arrival_s is not None for r in w.replay)}
    store.save_plan(run_id, inputs={"arrivals": arrivals})


def mixed_requests(groups: Mapping[str, WorkloadTraffic]) -> list[Request]:
    """Every workload's replayed requests together, in arrival order (ties: by line)."""
    merged = [r for w in groups.values() for r in w.replay]
    return sorted(merged, key=lambda r: (r.arrival_s or 0.0, r.line))


def _candidates(options: TuneOptions, searches: Sequence[WorkloadSearch]) -> list[TrialConfig]:
    """Each workload's best config (what its recommendation will be), once each."""
    policy = options.policy
    out: list[TrialConfig] = []
    for w in searches:
        best = select_best(list(w.scored), policy.replay.time_scale,
                           policy.objective.slo.slo())
        if best is not None and best.outcome is not None and best.config not in out:
            out.append(best.config)
    return out


def _mixed_workloads(options: TuneOptions,
                     groups: Mapping[str, WorkloadTraffic]) -> dict[str, WorkloadTraffic]:
    """The workloads whose traffic the mixed sample merges; none when it is not read: the
    policy turns it off, fewer than two workloads are timed, or replays are not read at
    capacity."""
    policy = options.policy
    timed = {k: w for k, w in groups.items()
             if w.replay and all(r.arrival_s is not None for r in w.replay)}
    if (not policy.plan.measure_shared or len(timed) < 2 or policy.replay.mode != "trace"
            or not policy.replay.find_capacity):
        return {}
    return timed


def mixed_readings_planned(options: TuneOptions, groups: Mapping[str, WorkloadTraffic]) -> int:
    """How many mixed-sample readings the pass will make after its searches, at most (one per
    workload's best config): the budget keeps room for them
    (:class:`~autotune.orchestrate.budget.Ledger`)."""
    return len(_mixed_workloads(options, groups))


def measure_mixed(options: TuneOptions, store: Store, run_id: str,
                  groups: Mapping[str, WorkloadTraffic], searches: Sequence[WorkloadSearch],
                  pool: Pool, ledger: Ledger) -> int:
    """Read the mixed sample at capacity on every candidate shared config not read yet in this
    run (see module doc), each only when the budget left holds it: the searches are over, so
    the room they kept is released and every reading asks the ``ledger`` itself, predicted at
    the mixed readings already made (at the pass's mean trial before the first), and is
    charged to it. A config the budget refuses is stored as not read, with the reason. Returns
    how many were read (nothing when the pass reads no mixed sample,
    :func:`mixed_readings_planned`)."""
    policy = options.policy
    timed = _mixed_workloads(options, groups)
    if not timed:
        return 0
    stored = store.plan(run_id)
    done = readings_made(stored.shared) if stored else []
    read = [TrialConfig.from_dict(r["config"]) for r in done]
    todo = [c for c in _candidates(options, searches) if c not in read]
    if not todo:
        return 0
    slo = policy.objective.slo.slo()
    schedule = policy.replay.schedule(mixed_requests(timed), seed=options.seed,
                                      label=f"{run_id}:{MIXED}", slo=slo)
    ledger.kept_readings = 0
    readings: list[Mapping[str, Any]] = list(done)
    pending = list(enumerate(todo))
    in_flight: dict[Hashable, TrialConfig] = {}
    refused: str | None = None
    while True:
        while refused is None and pending and len(in_flight) < pool.capacity:
            refused = ledger.refusal(MIXED, [MIXED] * len(in_flight),
                                     what="a reading of the mixed sample")
            if refused is None:
                i, config = pending.pop(0)
                pool.submit(TrialTask((MIXED, i), config,
                                      replace(schedule, label=f"{schedule.label}:{i}")))
                in_flight[(MIXED, i)] = config
        if not in_flight:
            break
        result = pool.wait()
        entry, cost = _reading(in_flight.pop(result.key), result, options)
        ledger.charge(MIXED, result.replica, cost)
        readings.append(entry)
    for _, config in pending:
        why = f"the mixed sample was not read on {config.short()}: {refused}"
        log.info("mixed sample on %s: %s", config.short(), why)
        readings.append({"config": config.as_dict(), "metrics": {}, "error": None,
                         "not_read": why})
    store.save_plan(run_id, shared=readings)
    return len(todo) - len(pending)


def _reading(config: TrialConfig, result: TrialResult, options: TuneOptions
             ) -> tuple[dict[str, Any], TrialCost | None]:
    """A mixed-sample reading as the plan stores it, and its cost (charged to the pass like a
    trial's, :mod:`autotune.cost`)."""
    policy = options.policy
    m = result.measurement
    entry: dict[str, Any] = {"config": config.as_dict(), "metrics": {}, "error": None,
                             "replica": result.replica, "node": result.node}
    cost: TrialCost | None = None
    if m is None or not m.ok.any():
        entry["error"] = result.error or "no request completed"
    else:
        outcome = score_measurement(m, policy.objective.maximize, policy.objective.slo.slo())
        entry["metrics"] = {**outcome.summary, "constraints": outcome.constraints}
        measured = trial_cost(m.extra)
        if measured is not None:
            cost = TrialCost(measured.start_s, measured.replay_s, policy.gpus_per_replica)
            entry["metrics"].update(cost.metrics())
    log.info("mixed sample on %s: %s", config.short(),
             entry["error"] or f"capacity {entry['metrics'].get('load_scale')}x")
    return entry, cost


def make_plan(store: Store, run_id: str) -> tuple[Plan | None, str]:
    """The run's plan with its policy's settings, stored with the run; or None and why not."""
    try:
        plan = plan_for_run(store, run_id)
    except PlanError as e:
        return None, str(e)
    store.save_plan(run_id, plan=plan.as_dict())
    return plan, ""
