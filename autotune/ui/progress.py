"""Progress while a pass runs: one bar per workload's trials and one line per finished trial.

A workload's bar counts its finished trials against its budget (a resumed run starts where it
was); it goes away when the workload's search stops, whatever the reason, which the pass's
table then states. The replay bar appears only while a replica reports how far its replay is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from autotune.objective import Outcome
from autotune.orchestrate import Reporter
from autotune.recommend import WorkloadResult
from autotune.search import Suggestion
from autotune.traffic.load import SampleWorkloads
from autotune.ui.console import err, fmt_num

__all__ = ["RichReporter"]


class RichReporter(Reporter):
    """Progress bars and trial lines on stderr (see the module doc)."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or err
        self.progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=self.console, transient=True)
        self._tasks: dict[str, Any] = {}
        self._replay: Any = None
        self._replaying = ""

    def __enter__(self) -> RichReporter:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def workload_skipped(self, workload: str, why: str) -> None:
        self.console.print(f"{workload}: skipped, {why}")

    def sample_loaded(self, sample: SampleWorkloads, workloads: Mapping[str, int]) -> None:
        skipped = f", skipped {sample.skipped} invalid lines" if sample.skipped else ""
        parts = ", ".join(f"{k} ({v})" for k, v in workloads.items()) or "none to tune"
        self.console.print(f"loaded {sample.requests} requests from {sample.path}"
                           f"{skipped}; workloads: {parts}")
        for e in sample.skip_errors[:5]:
            self.console.print(f"  skipped: {e}", style="yellow")

    def run_started(self, run_id: str, resumed: bool, finished_trials: int) -> None:
        if resumed:
            self.console.print(f"resuming run {run_id} ({finished_trials} finished trials "
                               "kept)")
        else:
            self.console.print(f"run {run_id}")

    def trial_started(self, workload: str, s: Suggestion, budget: int, finished: int) -> None:
        task = self._tasks.get(workload)
        if task is None:
            task = self._tasks[workload] = self.progress.add_task(
                f"{workload} trials", total=budget, completed=finished)
        self._replaying = f"  replay {workload} {s.config.short()}"

    def replay_progress(self, done: int, total: int | None) -> None:
        if total is None:
            return
        if self._replay is None:
            self._replay = self.progress.add_task(self._replaying, total=total)
        self.progress.update(self._replay, description=self._replaying, completed=done,
                             total=total)

    def trial_finished(self, workload: str, s: Suggestion, outcome: Outcome | None,
                       error: str | None) -> None:
        task = self._tasks.get(workload)
        if task is not None:
            self.progress.advance(task)
        tag = ("baseline " if s.is_baseline else "active, re-measured " if s.is_incumbent
               else f"read again ({s.why}) " if s.is_repeat and s.why
               else "read again " if s.is_repeat else "")
        head = f"  {workload} #{s.number} {tag}{s.config.short()}: "
        if outcome is None:
            first = (error or "failed").splitlines()[0]
            self.progress.console.print(Text.assemble(head, ("failed", "red"), f" {first}"))
            return
        slo = ("", "") if outcome.feasible else (" (misses SLO)", "yellow")
        scale = outcome.summary.get("load_scale")
        at = f" at {fmt_num(scale)}× the sample's rate" if isinstance(scale, float) else ""
        summary = outcome.summary
        if outcome.feasible and summary.get("capacity_sustained") == 0.0:
            at += " (met the SLO only in readings too short to sustain a rate)"
        elif outcome.feasible and summary.get("slo_verdict_code") == 0.5:
            at += (f" (SLO undecided: p99s over {fmt_num(summary.get('p99_requests'))} "
                   "requests)")
        self.progress.console.print(Text.assemble(f"{head}{fmt_num(outcome.value)}{at}", slo))

    def workload_finished(self, result: WorkloadResult) -> None:
        task = self._tasks.pop(result.workload, None)
        if task is not None:
            self.progress.remove_task(task)
