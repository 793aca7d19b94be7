"""The tables the listing commands print: runs, trials, recommendations, traffic inspect.

Each fits 100 columns with its default columns; ``wide=True`` (``--wide``) adds the rest.
Units are in the headers; text too long for a cell (reasons, errors) goes below the table as
notes, wrapped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

from autotune.cost import CostTotal, trial_cost
from autotune.store import RecommendationRecord, RunRecord, TrialRecord
from autotune.store.records import WorkloadStatus, iso
from autotune.ui.console import fmt_num

__all__ = ["OBJECTIVE_LABELS", "close_race_note", "config_label", "inspect_table", "new_table",
           "recommendations_table", "runs_table", "trials_table"]

#: Column header of each objective, with its unit.
OBJECTIVE_LABELS = {"goodput": "goodput\n(req/s in SLO)",
                    "output_tokens_per_s": "output\n(tok/s)"}

_MAX_CK = 4  # predicted c_k shown in `traffic inspect` without --wide


def new_table(*columns: str, numeric: Sequence[str] = (), title: str | None = None,
              fold: Sequence[str] = ()) -> Table:
    """A table whose cells never truncate: ``fold`` columns wrap, the others keep their width;
    ``numeric`` columns align right."""
    t = Table(title=title, title_justify="left")
    for col in columns:
        t.add_column(col, justify="right" if col in numeric else "left", overflow="fold",
                     no_wrap=col not in fold)
    return t


def _when(t: Any) -> str:
    """``2026-11-29 15:42`` (UTC) for a datetime, ``-`` for none."""
    text = iso(t)
    return text.replace("T", " ")[:16] if text else "-"


def config_label(c: Mapping[str, Any]) -> str:
    """``n=5 av seqs=64 tok=8192`` from a stored config (tolerates missing keys)."""
    av = " av" if c.get("enable_adaptive_verification") else ""
    return (f"n={c.get('num_speculative_tokens', '?')}{av} seqs={c.get('max_num_seqs', '?')} "
            f"tok={c.get('max_num_batched_tokens', '?')}")


def _run_gpu_h(r: RunRecord) -> str:
    """The run's GPU-hours (``*`` when the budget ended it), ``-`` when not recorded."""
    total = (r.cost or {}).get("total")
    if not isinstance(total, Mapping):
        return "-"
    return fmt_num(float(total.get("gpu_h", 0.0))) + ("*" if r.budget_stop else "")


def runs_table(rows: Sequence[RunRecord], *, wide: bool = False) -> tuple[Table, list[str]]:
    """The runs table (GPU-h: what the pass cost on real replicas) and its notes (why a
    budget ended a run, for the runs marked ``*``)."""
    cols = ["run", "status", "backend", "policy", "requests", "GPU-h", "started (UTC)"]
    if wide:
        cols += ["replica-h", "trials", "finished (UTC)", "traffic"]
    t = new_table(*cols, numeric=("requests", "GPU-h", "replica-h", "trials"),
                  fold=("policy", "traffic"))
    notes = []
    for r in rows:
        cells = [r.id, r.status, r.backend, r.policy_name, str(r.sample_requests),
                 _run_gpu_h(r), _when(r.started_at)]
        if wide:
            total = (r.cost or {}).get("total")
            whole = CostTotal.from_json(total) if isinstance(total, Mapping) else None
            cells += [fmt_num(whole.replica_h) if whole else "-",
                      str(whole.trials + whole.uncounted) if whole else "-",
                      _when(r.finished_at), r.sample_path]
        t.add_row(*cells)
        if r.budget_stop:
            notes.append(f"{r.id}*: the budget ended the pass: {r.budget_stop}")
    return t, notes


def trials_table(rows: Sequence[TrialRecord], *, wide: bool = False) -> tuple[Table, list[str]]:
    """The trials table and its notes (the first line of each failed trial's error)."""
    cols = ["workload", "#", "state", "config", "value", "meets\nSLO", "capacity\n(×)",
            "p99 TTFT\n(ms)", "p99 ITL\n(ms)", "accept\nrate", "outputs\nidentical"]
    if wide:
        cols = ["run", *cols, "GPU-h", "replica", "attempts"]
    t = new_table(*cols, numeric=("#", "value", "capacity\n(×)", "p99 TTFT\n(ms)",
                                  "p99 ITL\n(ms)", "accept\nrate", "GPU-h", "attempts"),
                  fold=("workload", "config", "run", "replica", "outputs\nidentical"))
    notes = []
    for r in rows:
        m = r.metrics
        cfg = config_label(r.params) + (" (baseline)" if r.baseline else "")
        cells = [r.workload, str(r.number), r.state, cfg, fmt_num(r.value),
                 "-" if r.feasible is None else ("yes" if r.feasible else "no"),
                 fmt_num(m.get("load_scale")), fmt_num(m.get("ttft_p99_ms")),
                 fmt_num(m.get("itl_p99_ms")), fmt_num(r.acceptance_rate),
                 outputs_cell(m.get("output_check"))]
        if wide:
            cost = trial_cost(m)
            cells = [r.run, *cells, fmt_num(cost.gpu_h) if cost else "-", r.replica or "-",
                     str(r.attempts)]
        t.add_row(*cells)
        if r.error:
            notes.append(f"{r.workload} #{r.number}: {r.error.splitlines()[0]}")
        check = m.get("output_check")
        if isinstance(check, Mapping) and check.get("flagged"):
            notes.append(f"{r.workload} #{r.number}: FLAGGED, {check.get('reason')}")
    return t, notes


def outputs_cell(check: Any) -> str:
    """A trial's output check in a cell: identical prompts of those compared against the
    reference that differs most and the first divergence (prompt:token), FLAGGED when the
    outputs differ beyond the engine's numerics; "not checked" (no tokens), "-" (not yet)."""
    if not isinstance(check, Mapping):
        return "-"
    if not check.get("checked"):
        return "not checked"
    prompts = check.get("prompts")
    if prompts is None:
        return "reference"  # the only config whose outputs there were to compare
    share = check.get("identical_share")
    same = round(float(share) * int(prompts)) if isinstance(share, int | float) else "?"
    first = check.get("first_divergence")
    where = f" @{first['prompt']}:{first['position']}" if isinstance(first, Mapping) else ""
    return f"{same}/{prompts}{where}" + (" FLAGGED" if check.get("flagged") else "")


def recommendations_table(rows: Sequence[RecommendationRecord | WorkloadStatus], *,
                          wide: bool = False) -> tuple[Table, list[str]]:
    """Recommendations and their notes (why each is where it is). A
    :class:`~autotune.store.records.WorkloadStatus` row shows its recommendation, or for a
    workload whose newest run recommended nothing, ``failed`` and why."""
    recs = [r.recommendation if isinstance(r, WorkloadStatus) else r for r in rows]
    objectives = {r.objective for r in recs if r is not None}
    value = (OBJECTIVE_LABELS.get(objectives.pop(), "value") if len(objectives) == 1 else
             "value")
    cols = ["workload", "status", "config", value, "vs baseline", "created (UTC)"]
    if wide:
        cols += ["run", "objective"]
    t = new_table(*cols, numeric=(value, "vs baseline"),
                  fold=("workload", "config", "vs baseline", "run"))
    notes = []
    for row, r in zip(rows, recs, strict=True):
        if r is None:
            assert isinstance(row, WorkloadStatus)
            t.add_row(row.workload, row.status, "-", "-", "-", _when(row.at),
                      *([row.run, "-"] if wide else []))
            notes.append(f"{row.workload} ({row.status}, run {row.run}): {row.reason}")
            continue
        cells = [r.workload, r.status, config_label(r.config), fmt_num(r.value),
                 speedup_cell(r), _when(r.created_at)]
        if wide:
            cells += [r.run, r.objective]
        t.add_row(*cells)
        if r.reason:
            none = ", no active recommendation" if r is not row and r.status != "active" else ""
            notes.append(f"{r.workload} #{r.id} ({r.status}{none}): {r.reason}")
        race = r.provenance.get("runner_up") or {}
        if race.get("close_race"):
            notes.append(f"{r.workload} #{r.id}: {close_race_note(race)}")
    return t, notes


def close_race_note(race: Mapping[str, Any]) -> str:
    """A stored close race (``provenance.runner_up``) in one line."""
    config = race.get("config")
    other = config_label(config) if isinstance(config, Mapping) else "the runner-up"
    ci = race.get("lead_ci") or [None, None]
    interval = (f" (95% interval {ci[0]:+.1%} to {ci[1]:+.1%})"
                if None not in ci else "")
    return (f"a close race: leads {other} by only {race.get('lead', 0.0):.1%}{interval}, "
            f"inside the measured noise; either may serve better")


def speedup_cell(r: RecommendationRecord) -> str:
    """``1.99×`` against a baseline that met the SLO; else why there is no speedup."""
    if r.speedup_vs_baseline:
        return f"{r.speedup_vs_baseline:.2f}×"
    base = r.provenance.get("baseline") or {}
    if base and not base.get("meets_slo"):
        return "baseline misses SLO"
    return "-"


def inspect_table(rows: Sequence[Mapping[str, Any]], *, wide: bool = False) -> Table:
    cols = ["workload", "requests", "prompt tokens\np50/p90/p99", "output tokens\np50/p90/p99",
            "rate\n(req/s)", "bursti-\nness", "predicted acceptance c_k"]
    t = new_table(*cols, numeric=("requests", "rate\n(req/s)", "bursti-\nness"),
                  fold=("workload", "predicted acceptance c_k"))
    for r in rows:
        p, o = r["prompt_tokens"], r["output_tokens"]
        ck = list(r["mean_predicted_acceptance"])
        shown = ck if wide or len(ck) <= _MAX_CK else ck[:_MAX_CK]
        acc = " ".join(f"{c:.2f}" for c in shown) + (" …" if len(shown) < len(ck) else "")
        t.add_row(r["workload"], str(r["requests"]),
                  f"{p['p50']:.0f}/{p['p90']:.0f}/{p['p99']:.0f}",
                  f"{o['p50']:.0f}/{o['p90']:.0f}/{o['p99']:.0f}",
                  fmt_num(r["arrival_rate_per_s"]), fmt_num(r["burstiness"]), acc or "-")
    return t
