"""Terminal rendering: progress while a pass runs, and the tables commands print.

Progress and notes go to stderr; tables and JSON go to stdout, so ``--format json`` output can
be piped. Imported lazily by the CLI (rich costs start-up time).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autotune.objective import Outcome
from autotune.orchestrate import Reporter, TuneResult
from autotune.policy import Policy
from autotune.recommend import WorkloadResult
from autotune.search import Suggestion
from autotune.store import RecommendationRecord, RunRecord, TrialRecord
from autotune.store.records import iso
from autotune.traffic.load import LoadedSample

__all__ = ["RichReporter", "print_json", "print_table", "recommendations_table",
           "result_table", "runs_table", "trials_table"]

# Piped output (CI logs, files) gets wide tables instead of rich's 80-column default.
out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def print_json(rows: Any) -> None:
    """JSON on stdout; records print in their one JSON form (``to_json``)."""
    sys.stdout.write(json.dumps(rows, indent=2, default=_json_form) + "\n")


def _json_form(value: Any) -> Any:
    to_json = getattr(value, "to_json", None)
    return to_json() if callable(to_json) else str(value)


def print_table(table: Table) -> None:
    out.print(table)


def _num(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


class RichReporter(Reporter):
    """Shows a progress bar per workload's trials and one line per finished trial."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or err
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=self.console, transient=True)
        self._tasks: dict[str, Any] = {}
        self._replay: Any = None

    def __enter__(self) -> RichReporter:
        self.progress.start()
        return self

    def workload_skipped(self, workload: str, why: str) -> None:
        self.console.print(f"{workload}: skipped, {why}")

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def sample_loaded(self, sample: LoadedSample, workloads: Mapping[str, int]) -> None:
        skipped = f", skipped {sample.skipped} invalid lines" if sample.skipped else ""
        parts = ", ".join(f"{k} ({v})" for k, v in workloads.items()) or "none to tune"
        self.console.print(f"loaded {len(sample.requests)} requests from {sample.path}"
                           f"{skipped}; workloads: {parts}")
        for e in sample.skip_errors[:5]:
            self.console.print(f"  skipped: {e}", style="yellow")

    def run_started(self, run_id: str, resumed: bool, finished_trials: int) -> None:
        if resumed:
            self.console.print(f"resuming run {run_id} ({finished_trials} finished trials "
                               "kept)")
        else:
            self.console.print(f"run {run_id}")

    def trial_started(self, workload: str, s: Suggestion, budget: int) -> None:
        task = self._tasks.get(workload)
        if task is None:
            task = self._tasks[workload] = self.progress.add_task(f"{workload} trials",
                                                                  total=budget)
        self.progress.update(task, completed=s.number)
        if self._replay is None:
            self._replay = self.progress.add_task("replay", total=None)
        self.progress.update(self._replay, description=f"  replay {s.config.short()}",
                             completed=0)

    def replay_progress(self, done: int, total: int | None) -> None:
        if self._replay is not None:
            self.progress.update(self._replay, completed=done, total=total)

    def trial_finished(self, workload: str, s: Suggestion, outcome: Outcome | None,
                       error: str | None) -> None:
        task = self._tasks.get(workload)
        if task is not None:
            self.progress.advance(task)
        tag = "baseline " if s.is_baseline else ""
        if outcome is None:
            first = (error or "failed").splitlines()[0]
            self.progress.console.print(f"  {workload} #{s.number} {tag}{s.config.short()}: "
                                        f"[red]failed[/red] {first}")
            return
        slo = "" if outcome.feasible else " [yellow](misses SLO)[/yellow]"
        self.progress.console.print(
            f"  {workload} #{s.number} {tag}{s.config.short()}: "
            f"{_num(outcome.value)}{slo}")

    def workload_finished(self, result: WorkloadResult) -> None:
        task = self._tasks.pop(result.workload, None)
        if task is not None:
            self.progress.remove_task(task)


def result_notes(results: Sequence[WorkloadResult]) -> list[str]:
    """One line per workload whose result was not promoted, saying why."""
    return [f"{r.workload}: {r.reason}" for r in results if not r.promoted]


def result_table(results: Sequence[WorkloadResult], objective: str) -> Table:
    t = Table(title="recommendations", title_justify="left")
    for col in ("workload", "window", "adaptive", "max_num_seqs", "max_batched_tokens",
                objective, "speedup vs baseline", "trials", "status", "export"):
        t.add_column(col, justify="right" if col not in ("workload", "status", "export")
                     else "left")
    for r in results:
        rec = r.recommendation
        if rec is None:
            t.add_row(r.workload, "-", "-", "-", "-", "-", "-", str(r.trials), "failed",
                      r.reason)
            continue
        c = rec.trial_config
        speedup = rec.speedup_vs_baseline
        t.add_row(r.workload, str(c.num_speculative_tokens),
                  "on" if c.enable_adaptive_verification else "off", str(c.max_num_seqs),
                  str(c.max_num_batched_tokens), _num(rec.value),
                  f"{speedup:.2f}x" if speedup else "-", str(r.trials), rec.status,
                  str(r.export_path) if r.export_path else "-")
    return t


def runs_table(rows: Sequence[RunRecord]) -> Table:
    t = Table()
    for col in ("run", "status", "backend", "policy", "traffic", "requests", "started",
                "finished"):
        t.add_column(col)
    for r in rows:
        t.add_row(r.id, r.status, r.backend, r.policy_name, r.sample_path,
                  str(r.sample_requests), iso(r.started_at) or "-", iso(r.finished_at) or "-")
    return t


def trials_table(rows: Sequence[TrialRecord]) -> Table:
    t = Table()
    for col in ("run", "workload", "#", "state", "config", "value", "feasible", "ttft p99 ms",
                "itl p99 ms", "accept", "replica", "error"):
        t.add_column(col)
    for r in rows:
        m = r.metrics
        cfg = r.config.short() + (" (baseline)" if r.baseline else "")
        t.add_row(r.run, r.workload, str(r.number), r.state, cfg, _num(r.value),
                  "-" if r.feasible is None else ("yes" if r.feasible else "no"),
                  _num(m.get("ttft_p99_ms")), _num(m.get("itl_p99_ms")),
                  _num(r.acceptance_rate), r.replica or "-",
                  r.error.splitlines()[0][:60] if r.error else "")
    return t


def recommendations_table(rows: Sequence[RecommendationRecord]) -> Table:
    t = Table()
    for col in ("workload", "status", "window", "adaptive", "max_num_seqs",
                "max_batched_tokens", "objective", "value", "speedup", "run", "created",
                "reason"):
        t.add_column(col)
    for r in rows:
        c = r.config
        s = r.speedup_vs_baseline
        t.add_row(r.workload, r.status, str(c.get("num_speculative_tokens", "-")),
                  "on" if c.get("enable_adaptive_verification") else "off",
                  str(c.get("max_num_seqs", "-")), str(c.get("max_num_batched_tokens", "-")),
                  r.objective, _num(r.value),
                  f"{s:.2f}x" if s else "-", r.run, iso(r.created_at) or "-", r.reason)
    return t


def inspect_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    t = Table()
    for col in ("workload", "requests", "prompt p50/p90/p99", "output p50/p90/p99",
                "rate /s", "burstiness", "predicted acceptance c_k"):
        t.add_column(col)
    for r in rows:
        p, o = r["prompt_tokens"], r["output_tokens"]
        acc = " ".join(f"{c:.2f}" for c in r["mean_predicted_acceptance"]) or "-"
        t.add_row(r["workload"], str(r["requests"]),
                  f"{p['p50']:.0f}/{p['p90']:.0f}/{p['p99']:.0f}",
                  f"{o['p50']:.0f}/{o['p90']:.0f}/{o['p99']:.0f}",
                  _num(r["arrival_rate_per_s"]), _num(r["burstiness"]), acc)
    return t


def print_pass(result: TuneResult, policy: Policy, why: str | None) -> None:
    """What a tuning pass did: the recommendations table, notes, skipped workloads."""
    if why:
        err.print(f"pass triggered by: {why}")
    if result.run_id is None:
        err.print("nothing to re-tune: no workload drifted")
        return
    print_table(result_table(result.workloads, policy.objective.maximize))
    for note in result_notes(result.workloads):
        err.print(f"note: {note}")
    err.print(f"run {result.run_id} {result.status}; `autotune trials --run {result.run_id}` "
              "lists its trials")


def print_status(state: Mapping[str, Any] | None, current: Sequence[RunRecord],
                 last: RunRecord | None, recs: Sequence[RecommendationRecord]) -> None:
    if state is None:
        out.print("daemon: no state file (not started here)")
    else:
        alive = "running" if state.get("alive") else "not running"
        out.print(f"daemon: {alive} (pid {state.get('pid')}, {state.get('status')}, "
                  f"updated {state.get('updated_at')}), traffic {state.get('traffic')}")
    out.print("current run: " + (", ".join(r.id for r in current) if current else "none"))
    out.print("last finished run: " + (f"{last.id} (finished {iso(last.finished_at)})"
                                       if last else "none"))
    out.print(f"next pass: {(state or {}).get('next_pass') or '-'}")
    if recs:
        print_table(recommendations_table(recs))
    else:
        out.print("active recommendations: none")
