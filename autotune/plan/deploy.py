"""What a deployment takes from a plan: each workload's recommendation with its replica count.

``export --format vllm-args`` adds the count to the command line it writes, and ``export
--format production-stack`` writes one chart entry per planned workload
(:func:`autotune.export.production_stack_values`). A workload whose recommended config one
replica cannot serve at its rate gets the replicas it needs; only one the plan leaves out (no
config meets its SLO at any rate, or never measured) is left out, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import PlanError
from autotune.export import Deployment, pick_for_export
from autotune.plan.build import Plan, WorkloadPlan
from autotune.plan.inputs import plan_for_run
from autotune.store import RecommendationRecord, Store

__all__ = ["ExportPick", "deployment_for", "pick_export", "plan_deployments"]


def _why(plan: Plan, w: WorkloadPlan, i: int) -> str:
    s = w.recommended_sizing[i]
    assert w.rates is not None and w.recommended is not None
    k = plan.settings.growth[i]
    grown = f" × {k:g}" if k != 1 else ""
    p = f", P(SLO) {s.probability:.2f}" if s.probability is not None else ""
    flips = f", {s.replicas_if_high} if the capacity is at the top of its interval" \
        if s.flips else ""
    return (f"plan of run {plan.run_id}: {s.rate_per_s:.3g} req/s ({w.rates.note}{grown}) "
            f"with {plan.settings.headroom:.0%} headroom, one replica serving "
            f"{w.recommended.low_per_s:.3g}-{w.recommended.high_per_s:.3g} req/s{p}{flips}")


def _growth_index(plan: Plan, growth: float) -> int:
    if growth not in plan.settings.growth:
        raise PlanError(f"--growth {growth:g} is not one of the plan's growth factors "
                        f"({', '.join(f'{k:g}' for k in plan.settings.growth)})")
    return plan.settings.growth.index(growth)


def plan_deployments(store: Store, plan: Plan, growth: float = 1.0
                     ) -> tuple[list[Deployment], list[tuple[str, str]]]:
    """Per planned workload of ``plan`` its recommendation with the replicas at ``growth``;
    and (workload, why) for each workload left out."""
    i = _growth_index(plan, growth)
    recs: dict[str, RecommendationRecord] = {}
    for r in store.recommendations(run_id=plan.run_id):  # newest first per workload
        recs.setdefault(r.workload, r)
    out, left_out = [], []
    for w in plan.workloads:
        rec = recs.get(w.workload)
        if not w.planned or rec is None:
            left_out.append((w.workload, w.left_out or "no recommendation in this run"))
            continue
        out.append(Deployment(rec, w.recommended_sizing[i].replicas,
                              plan.settings.gpus_per_replica, _why(plan, w, i)))
    return out, left_out


def deployment_for(store: Store, rec: RecommendationRecord) -> Deployment | str:
    """``rec`` with the replicas the plan of its run gives it, or why there is none."""
    try:
        plan = plan_for_run(store, rec.run)
    except PlanError as e:
        return str(e)
    w = next((w for w in plan.workloads if w.workload == rec.workload), None)
    if w is None:
        return f"the plan of run {rec.run} has no workload {rec.workload!r}"
    if not w.planned:
        return w.left_out
    deployments, _ = plan_deployments(store, plan)
    return next((d for d in deployments if d.rec.id == rec.id),
                f"recommendation #{rec.id} is not the one the plan of run {rec.run} sizes")


@dataclass(frozen=True)
class ExportPick:
    """What ``export`` writes for one workload: the recommendation, its deployment (None when
    its run's plan has none), and what to tell the user (``warning``, ``note``: "" for none)."""

    rec: RecommendationRecord
    deployment: Deployment | None
    warning: str
    note: str


def pick_export(store: Store, history: list[RecommendationRecord], workload: str, *,
                force: bool) -> ExportPick:
    """The recommendation ``export`` writes (:func:`~autotune.export.pick_for_export`) with
    its replicas. A newest result that is infeasible only because one replica cannot serve the
    rate is what a plan is for: when the plan of its run sizes it, it is exported with its
    replicas, no ``--force`` needed. ``history``: the workload's, newest first."""
    newest = history[0]
    planned = deployment_for(store, newest) if newest.status == "infeasible" else None
    sized = isinstance(planned, Deployment)
    rec = pick_for_export(history, store.active_recommendation(workload), workload,
                          force=force or sized)
    warning = ""
    if rec.status == "infeasible":
        why = ("one replica cannot serve its rate; the plan gives it the replicas it needs"
               if sized else "--force")
        warning = f"exporting infeasible #{rec.id} ({why}): {rec.reason}"
    found = planned if sized and rec.id == newest.id else deployment_for(store, rec)
    if isinstance(found, str):
        return ExportPick(rec, None, warning, f"no replica count: {found}")
    return ExportPick(rec, found, warning, "")
