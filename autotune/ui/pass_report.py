"""What a tuning pass concluded, as a person reads it: one row per workload, then one line per
workload saying why it ended where it did (infeasible and what would fix it, why the search
stopped, why it was not promoted, where it was exported)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.table import Table

from autotune.cost import CostTotal
from autotune.store import LeaseRecord, RecommendationRecord, RunRecord
from autotune.store.records import iso
from autotune.ui.console import err, fmt_num, note, out, print_table
from autotune.ui.tables import (
    OBJECTIVE_LABELS,
    config_label,
    new_table,
    recommendations_table,
    speedup_cell,
)

if TYPE_CHECKING:  # the pass's types only: a read-only command need not import the pass
    from autotune.orchestrate import TuneResult
    from autotune.policy import Policy
    from autotune.recommend import WorkloadResult

__all__ = ["baseline_label", "cost_notes", "pass_notes", "print_pass", "print_status",
           "result_table"]


def baseline_label(policy: Policy) -> str:
    """``n=7/1024/8192`` (window / max_num_seqs / max_num_batched_tokens)."""
    b = policy.baseline
    av = " av" if b.enable_adaptive_verification else ""
    return f"n={b.num_speculative_tokens}{av}/{b.max_num_seqs}/{b.max_num_batched_tokens}"


def result_table(results: Sequence[WorkloadResult], policy: Policy, *,
                 wide: bool = False) -> Table:
    value = OBJECTIVE_LABELS.get(policy.objective.maximize, policy.objective.maximize)
    vs = f"vs baseline\n{baseline_label(policy)}"
    capacity = "capacity (×\nsample rate)"
    cols = ["workload", "status", "recommended config", value, capacity, vs, "trials"]
    if wide:
        cols += ["export"]
    t = new_table(*cols, numeric=(value, capacity, vs, "trials"), title="recommendations",
                  fold=("workload", "recommended config", vs, "export"))
    budget = policy.budget.trials
    for r in results:
        rec = r.recommendation
        trials = f"{r.trials}/{budget}"
        if rec is None:
            cells = [r.workload, "failed", "-", "-", "-", "-", trials]
        else:
            cap = r.feasibility.capacity if r.feasibility else None
            status = rec.status + (" (outputs FLAGGED)" if r.outputs_flagged else "")
            cells = [r.workload, status, config_label(rec.config), fmt_num(rec.value),
                     fmt_num(cap), speedup_cell(rec), trials]
        if wide:
            cells += [str(r.export_path) if r.export_path else "-"]
        t.add_row(*cells)
    return t


def pass_notes(results: Sequence[WorkloadResult]) -> list[str]:
    """Per workload, why it ended where it did."""
    lines = []
    for r in results:
        parts = []
        if r.recommendation is None or r.status == "infeasible" or not r.promoted:
            parts.append(r.reason)
        p = r.recommendation.provenance.get("slo_probability") if r.recommendation else None
        if isinstance(p, float) and r.status != "infeasible":
            n = r.recommendation.provenance.get("readings", 1) if r.recommendation else 1
            parts.append(f"meets the SLO with probability {p:.2f} ({n} reading"
                         f"{'s' if n != 1 else ''})")
        if r.race is not None and r.race.close:
            parts.append(r.race.describe())
        if r.outputs and not r.outputs_flagged:  # a flagged one's reason says it already
            parts.append(str(r.outputs.get("reason")))
        if r.stop_reason:
            parts.append(f"search stopped: {r.stop_reason}")
        if r.export_path:
            parts.append(f"exported to {r.export_path}")
        if parts:
            lines.append(f"{r.workload}: " + "; ".join(parts))
        lines.extend(f"{r.workload}: outputs FLAGGED, trial {line}" for line in r.flagged)
    return lines


def cost_notes(cost: Mapping[str, Any], budget_stop: str | None = None) -> list[str]:
    """What the pass cost on real replicas, in total and per workload, and why its budget
    ended it (``cost``: a run's recorded cost, :func:`autotune.cost.pass_cost`)."""
    lines = []
    if cost and isinstance(cost.get("total"), Mapping):
        whole = CostTotal.from_json(cost["total"])
        per = ", ".join(f"{w} {CostTotal.from_json(c).gpu_h:.3g}"
                        for w, c in (cost.get("workloads") or {}).items())
        line = f"cost: {whole.describe()}; GPU-h per workload: {per or '-'}"
        if whole.starts:
            line += (f"; a server start is charged {whole.start_s / whole.starts:.0f} s, once "
                     "per config a replica kept serving")
        if cost.get("backend") == "sim":
            line += (f"; simulated: what the pass would cost on real replicas of "
                     f"{cost.get('gpus_per_replica', '?')} GPUs")
        lines.append(line)
    if budget_stop:
        lines.append(f"budget: the pass ended early, with the workloads' results so far: "
                     f"{budget_stop}")
    return lines


def print_pass(result: TuneResult, policy: Policy, why: str | None, *,
               wide: bool = False) -> None:
    """What a tuning pass did: the recommendations table, its notes, skipped workloads."""
    if why:
        err.print(f"pass triggered by: {why}")
    if result.run_id is None:
        err.print("nothing to re-tune: no workload drifted")
        return
    print_table(result_table(result.workloads, policy, wide=wide),
                [*pass_notes(result.workloads), *cost_notes(result.cost, result.budget_stop)],
                wide=wide)
    if result.plan is not None:
        out.print(note(f"plan: {result.plan.headline()}; `autotune plan --run "
                       f"{result.run_id}` for replicas per workload, growth and split or shared"))
    elif result.plan_note:
        out.print(note(f"plan: none: {result.plan_note}"))
    err.print(f"run {result.run_id} {result.status}; `autotune trials --run {result.run_id}` "
              "lists its trials")


def print_status(state: Mapping[str, Any] | None, held: Sequence[LeaseRecord],
                 current: Sequence[RunRecord], last: RunRecord | None,
                 recs: Sequence[RecommendationRecord], now: datetime) -> None:
    """``autotune status``: the daemon's state file, the leases in the database, the runs."""
    if state is None:
        out.print("daemon: no state file (not started here)")
    else:
        alive = "running" if state.get("alive") else "not running"
        out.print(f"daemon: {alive} (pid {state.get('pid')}, {state.get('status')}, "
                  f"updated {state.get('updated_at')}), traffic {state.get('traffic')}")
    for lease in held:
        expired = "" if lease.live(now) else "; expired: the next start takes it over"
        out.print(f"lease on {lease.traffic}: held by {lease.describe(now)}{expired}",
                  soft_wrap=True)
    if not held:
        out.print("lease: none held (no start or nightly is tuning on this database)")
    out.print("current run: " + (", ".join(r.id for r in current) if current else "none"))
    out.print("last finished run: " + (f"{last.id} (finished {iso(last.finished_at)})"
                                       if last else "none"))
    out.print(f"next pass: {(state or {}).get('next_pass') or '-'}")
    if recs:
        print_table(*recommendations_table(recs))
    else:
        out.print("active recommendations: none")
