"""A run's plan from the database, measuring nothing: what :func:`build_plan` reads, gathered.

Per workload: the replayed arrival times (stored with the run's plan row by the pass), the
recommended config's capacity (the run's recommendation's trial, with every reading of the same
config for the probability) and the baseline's (the run's baseline trial); the mixed sample's
readings (stored by the pass's split-or-shared step). Settings come from the run's policy
(``plan`` section; GPUs per replica from ``hardware.count``, else ``serve.gpus_per_replica``),
each overridable (the CLI's ``--headroom``, ``--growth``, ``--peak-window``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.errors import ConfigError, PlanError
from autotune.plan.build import (
    Plan,
    PlanSettings,
    SharedInput,
    WorkloadInput,
    build_plan,
)
from autotune.plan.measured import MeasuredCapacity, capacity_of
from autotune.policy import Policy, policy_from_mapping
from autotune.store import Store, TrialRecord
from autotune.types import TrialConfig

__all__ = ["MIXED", "plan_for_run", "plan_settings", "readings_made", "sample_rate",
           "shared_inputs"]

#: The workload label of the mixed sample (every workload's requests together).
MIXED = "(mixed)"


def sample_rate(arrivals: Sequence[float]) -> float:
    """The replayed requests' mean arrival rate: what a capacity's ``load_scale`` multiplies."""
    times = sorted(arrivals)
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    return (len(times) - 1) / span if span > 0 else 0.0


def plan_settings(policy: Policy, *, headroom: float | None = None,
                  growth: Sequence[float] | None = None,
                  peak_window_s: float | None = None) -> PlanSettings:
    """The policy's plan settings, with the ones given (CLI flags) in their place."""
    p = policy.plan
    return PlanSettings(
        headroom=p.headroom if headroom is None else headroom,
        growth=tuple(p.growth if growth is None else growth),
        peak_window_s=p.peak_window_s if peak_window_s is None else peak_window_s,
        gpus_per_replica=policy.gpus_per_replica,
        slo=policy.objective.slo.slo(),
        headroom_source="plan.headroom" if headroom is None else "--headroom",
        growth_source="plan.growth" if growth is None else "--growth",
        window_source="plan.peak_window" if peak_window_s is None else "--peak-window")


def _capacity(trial: TrialRecord | None, rate: float, same_traffic: Sequence[TrialRecord],
              what: str) -> MeasuredCapacity | str:
    if trial is None:
        return f"{what} was never measured"
    if trial.state != "complete":
        return f"{what}'s trial {trial.number} {trial.state}: {trial.error or 'no reading'}"
    readings = [t.metrics for t in same_traffic
                if t.state == "complete" and dict(t.params) == dict(trial.params)]
    return capacity_of(trial.config, trial.metrics, rate, trial_id=trial.id,
                       readings=readings, covered=[t.metrics for t in same_traffic])


def _workload(store: Store, run_id: str, name: str, arrivals: Sequence[float],
              trials: Sequence[TrialRecord]) -> WorkloadInput:
    rate = sample_rate(arrivals)
    mine = [t for t in trials if t.workload == name]
    recs = store.recommendations(name, run_id=run_id)
    by_id = {t.id: t for t in mine}
    if not recs:
        rec: MeasuredCapacity | str = ("no recommendation in this run (every trial failed, or "
                                       "the pass stopped before recommending)")
    else:
        trial = by_id.get(recs[0].trial_id) if recs[0].trial_id is not None else None
        rec = _capacity(trial, rate, mine, "the recommended config")
    baseline = next((t for t in mine if t.baseline and t.state == "complete"),
                    next((t for t in mine if t.baseline), None))
    return WorkloadInput(name, tuple(arrivals), rec,
                         _capacity(baseline, rate, mine, "the baseline config"))


def readings_made(readings: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The mixed sample's stored readings that were made (not those the budget left unread,
    which cost nothing)."""
    return [r for r in readings if not r.get("not_read")]


def shared_inputs(readings: Sequence[Mapping[str, Any]], rate: float) -> list[SharedInput]:
    """The mixed sample's stored readings (``{"config", "metrics", "error"}`` each, and
    ``"not_read"``: why the budget left it unread)."""
    out = []
    for r in readings:
        config = TrialConfig.from_dict(r["config"])
        metrics = r.get("metrics") or {}
        capacity: MeasuredCapacity | str = (
            str(r["not_read"]) if r.get("not_read") else
            f"its reading failed: {r['error']}" if r.get("error") else
            capacity_of(config, metrics, rate, readings=[metrics], covered=[metrics]))
        out.append(SharedInput(config, capacity))
    return out


def _why_not_shared(policy: Policy, workloads: int, budget_stop: object) -> str:
    """Why a run read no mixed sample (the conditions of
    :func:`autotune.orchestrate.mixed.measure_mixed`, and a budget that ended the pass first)."""
    if workloads < 2:
        return "a single workload: nothing to share"
    if not policy.plan.measure_shared:
        return "plan.measure_shared is false"
    if policy.replay.mode != "trace" or not policy.replay.find_capacity:
        return "the pass read no capacities (replay.mode closed or replay.find_capacity false)"
    if budget_stop:
        return (f"the pass's budget ended it before the mixed sample was read ({budget_stop}); "
                "give the pass more budget (budget.gpu_hours, budget.wall_clock) or fewer "
                "trials (budget.trials) to leave room for it")
    return "the pass read no mixed sample (it stopped before its last stage)"


def plan_for_run(store: Store, run_id: str, *, headroom: float | None = None,
                 growth: Sequence[float] | None = None,
                 peak_window_s: float | None = None) -> Plan:
    """The plan of a finished run from what the database holds (see module doc)."""
    run = store.run(run_id)
    try:
        policy = policy_from_mapping(store.run_policy(run_id), f"run {run_id}'s policy")
    except ConfigError as e:
        raise PlanError(str(e)) from e
    stored = store.plan(run_id)
    arrivals: Mapping[str, Sequence[float]] = (stored.inputs.get("arrivals") or {}) \
        if stored else {}
    if not arrivals:
        raise PlanError(f"run {run_id} has no stored plan inputs (the replayed arrival times): "
                        "it was made by an autotune without plans, or stopped before its "
                        "trials finished; tune the traffic again with: autotune start "
                        f"--traffic {run.sample_path} --once")
    trials = store.trials(run_id)
    workloads = [_workload(store, run_id, name, times, trials)
                 for name, times in sorted(arrivals.items())]
    mixed = [a for times in arrivals.values() for a in times]
    readings = stored.shared if stored else []
    unread = [str(r["not_read"]) for r in readings if r.get("not_read")]
    shared = shared_inputs(readings, sample_rate(mixed)) if len(unread) < len(readings) else []
    note = "" if shared else unread[0] if unread else _why_not_shared(
        policy, len(workloads), (run.options or {}).get("budget_stop"))
    return build_plan(workloads, shared, plan_settings(policy, headroom=headroom, growth=growth,
                                                       peak_window_s=peak_window_s),
                      run_id=run_id, backend=run.backend, shared_note=note)
