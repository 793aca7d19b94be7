"""What a report shows, read from the store and reduced to plain series (no plotting here).

Everything the figures draw is computed here, so it can be tested without a browser: the
Pareto front of throughput against p99 inter-token latency, the best measured objective per
draft window relative to the run's baseline trial, the optimisation history with its running
best, predicted against measured per-position acceptance of each recommendation, and the run's
capacity plan (its GPU curves: :mod:`autotune.report.plan_series`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from autotune.cost import SOURCE, CostTotal, TrialCost, total, trial_cost
from autotune.errors import PlanError, StoreError
from autotune.plan import Plan, plan_for_run
from autotune.store import (
    CalibrationRecord,
    RecommendationRecord,
    RunRecord,
    Store,
    TrialRecord,
)
from autotune.store.engine import redact

__all__ = [
    "AcceptancePanel",
    "HistoryPoint",
    "ReportData",
    "TrialPoint",
    "WindowPoint",
    "WorkloadReport",
    "load_report_data",
    "pareto_front",
    "pick_run",
    "slo_bound",
]

#: Trial metric drawn as throughput (the x of the Pareto plot is p99 ITL).
THROUGHPUT = "output_tokens_per_s"
ITL_P99 = "itl_p99_ms"


def _num(x: Any) -> float | None:
    """A finite float, or None for missing / NaN / non-numbers."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    f = float(x)
    return f if math.isfinite(f) else None


@dataclass(frozen=True)
class TrialPoint:
    """One trial as the plots see it."""

    id: int
    number: int
    state: str
    baseline: bool
    params: dict[str, Any]
    value: float | None
    feasible: bool | None
    throughput: float | None
    itl_p99_ms: float | None
    ttft_p99_ms: float | None
    error: str | None = None
    #: measured at capacity (the fastest replay meeting the SLOs), not at the trace's rate
    at_capacity: bool = False
    #: what the trial cost on real replicas (None: not recorded)
    cost: TrialCost | None = None
    #: where its server start's figure comes from (or that it reused a server)
    start_source: str | None = None
    #: the output check stored with the trial (docs/outputs.md); None: not made yet
    output_check: Mapping[str, Any] | None = None

    @property
    def window(self) -> int | None:
        n = self.params.get("num_speculative_tokens")
        return int(n) if isinstance(n, int) and not isinstance(n, bool) else None

    @property
    def measured(self) -> bool:
        return self.state == "complete" and self.value is not None

    def label(self) -> str:
        p = self.params
        adaptive = "on" if p.get("enable_adaptive_verification") else "off"
        return (f"n={p.get('num_speculative_tokens')} adaptive={adaptive} "
                f"seqs={p.get('max_num_seqs')} tokens={p.get('max_num_batched_tokens')}")

    @classmethod
    def from_record(cls, t: TrialRecord) -> TrialPoint:
        m = t.metrics
        return cls(id=t.id, number=t.number, state=t.state, baseline=t.baseline,
                   params=dict(t.params), value=_num(t.value), feasible=t.feasible,
                   throughput=_num(m.get(THROUGHPUT)), itl_p99_ms=_num(m.get(ITL_P99)),
                   ttft_p99_ms=_num(m.get("ttft_p99_ms")), error=t.error,
                   at_capacity="capacity_replays" in m, cost=trial_cost(m),
                   start_source=str(m[SOURCE]) if m.get(SOURCE) else None,
                   output_check=(dict(m["output_check"])
                                 if isinstance(m.get("output_check"), Mapping) else None))


@dataclass(frozen=True)
class WindowPoint:
    """The best measured objective at one draft window, and its ratio to the baseline's."""

    window: int
    value: float
    speedup: float | None
    feasible: bool
    trial: TrialPoint


@dataclass(frozen=True)
class HistoryPoint:
    number: int
    value: float | None
    feasible: bool | None
    best_so_far: float | None
    trial: TrialPoint


@dataclass(frozen=True)
class AcceptancePanel:
    """Predicted (confidence head) and measured (vLLM counters) acceptance by position.

    Both are survivals: the share of drafts whose first k tokens were all accepted.
    """

    predicted: tuple[float, ...]
    measured: tuple[float, ...]

    @property
    def positions(self) -> int:
        return min(len(self.predicted), len(self.measured))

    @property
    def mean_abs_error(self) -> float | None:
        k = self.positions
        if not k:
            return None
        return sum(abs(p - m) for p, m in zip(self.predicted, self.measured, strict=False)) / k


def pareto_front(points: Sequence[TrialPoint]) -> list[TrialPoint]:
    """Trials no other trial beats on both throughput (higher) and p99 ITL (lower).

    Sorted by p99 ITL; of exact duplicates the earliest trial is kept.
    """
    usable = [p for p in points if p.measured and p.throughput is not None
              and p.itl_p99_ms is not None]
    usable.sort(key=lambda p: (p.itl_p99_ms, -(p.throughput or 0.0), p.number))
    front: list[TrialPoint] = []
    best = -math.inf
    for p in usable:
        assert p.throughput is not None
        if p.throughput > best:
            front.append(p)
            best = p.throughput
    return front


@dataclass(frozen=True)
class WorkloadReport:
    """One workload of the run: its trials and the recommendation the run made for it."""

    name: str
    trials: tuple[TrialPoint, ...]
    recommendation: RecommendationRecord | None = None
    #: The policy's p99 bounds (ms), recovered from the trials' constraints.
    itl_slo_ms: float | None = None
    ttft_slo_ms: float | None = None
    #: The confidence-head calibration the run's guided search fitted (Store.calibrations).
    fit: CalibrationRecord | None = None

    @property
    def measured(self) -> list[TrialPoint]:
        return [t for t in self.trials if t.measured]

    @property
    def failed(self) -> list[TrialPoint]:
        return [t for t in self.trials if t.state == "failed"]

    @property
    def baseline(self) -> TrialPoint | None:
        return next((t for t in self.trials if t.baseline and t.measured), None)

    @property
    def recommended(self) -> TrialPoint | None:
        tid = self.recommendation.trial_id if self.recommendation else None
        return next((t for t in self.trials if t.id == tid), None) if tid is not None else None

    def pareto(self) -> list[TrialPoint]:
        return pareto_front(self.trials)

    def by_window(self) -> list[WindowPoint]:
        """Per window, the best feasible trial (else the best measured one), vs the baseline."""
        base = self.baseline
        base_value = base.value if base and base.value else None
        out = []
        windows = sorted({t.window for t in self.measured if t.window is not None})
        for n in windows:
            at_n = [t for t in self.measured if t.window == n]
            feasible = [t for t in at_n if t.feasible]
            pool = feasible or at_n
            best = max(pool, key=lambda t: (t.value or 0.0, -t.number))
            assert best.value is not None
            out.append(WindowPoint(window=n, value=best.value,
                                   speedup=best.value / base_value if base_value else None,
                                   feasible=bool(feasible), trial=best))
        return out

    def relative(self) -> list[tuple[TrialPoint, float]]:
        """Every measured trial with a window, and its value divided by the baseline's."""
        base = self.baseline
        if base is None or not base.value:
            return []
        return [(t, (t.value or 0.0) / base.value) for t in self.measured
                if t.window is not None]

    def history(self) -> list[HistoryPoint]:
        """Trials in the order the search ran them, with the best feasible value so far."""
        out = []
        best: float | None = None
        for t in sorted(self.trials, key=lambda t: t.number):
            if t.state == "running":
                continue
            if t.measured and t.feasible and t.value is not None:
                best = t.value if best is None else max(best, t.value)
            out.append(HistoryPoint(t.number, t.value if t.measured else None,
                                    t.feasible if t.measured else None, best, t))
        return out

    def calibration(self) -> AcceptancePanel | None:
        rec = self.recommendation
        acc = (rec.provenance.get("acceptance") if rec else None) or {}
        pred, meas = acc.get("predicted_per_position"), acc.get("measured_per_position")
        if not pred or not meas:
            return None
        p = tuple(v for v in (_num(x) for x in pred) if v is not None)
        m = tuple(v for v in (_num(x) for x in meas) if v is not None)
        if len(p) != len(pred) or len(m) != len(meas):
            return None
        return AcceptancePanel(predicted=p, measured=m)


@dataclass(frozen=True)
class ReportData:
    """Everything one report shows, for one run."""

    run: RunRecord
    workloads: tuple[WorkloadReport, ...]
    recommendations: tuple[RecommendationRecord, ...]
    objective: str
    db: str
    generated_at: str
    plan: Plan | None = None  # the run's capacity plan (autotune.plan)
    plan_note: str = ""  # why there is none

    @property
    def trial_count(self) -> int:
        return sum(len(w.trials) for w in self.workloads)

    def cost(self, workload: str | None = None) -> CostTotal:
        """What one workload's trials (None: the run's) cost on real replicas."""
        return total(t.cost for w in self.workloads if workload in (None, w.name)
                     for t in w.trials)


def slo_bound(trials: Sequence[TrialRecord], name: str) -> float | None:
    """A policy's SLO bound, recovered from a trial's constraint (measured minus bound)."""
    for t in trials:
        m = t.metrics
        measured, excess = _num(m.get(name)), _num((m.get("constraints") or {}).get(name))
        if measured is not None and excess is not None:
            return measured - excess
    return None


def pick_run(store: Store, run_id: str | None) -> RunRecord:
    """The run asked for, or the newest finished one."""
    if run_id:
        return store.run(run_id)
    runs = store.runs()
    finished = next((r for r in runs if r.status == "finished"), None)
    if finished is None:
        others = ", ".join(f"{r.id} ({r.status})" for r in runs[:5])
        hint = (f"runs in the database: {others}; pass one with --run ID" if runs else
                "run: autotune start --traffic SAMPLE --once")
        raise StoreError(f"no finished run in database {store.url}; {hint}")
    return finished


def load_report_data(store: Store, run_id: str | None = None) -> ReportData:
    """Read one run (default: the newest finished) with its trials and recommendations."""
    run = pick_run(store, run_id)
    rid = run.id
    trials = store.trials(rid)
    recs = store.recommendations(run_id=rid)
    rec_by_workload: dict[str, RecommendationRecord] = {}
    for r in recs:  # newest first per workload: keep the newest of this run
        rec_by_workload.setdefault(r.workload, r)
    fits: dict[str, CalibrationRecord] = {}
    for c in store.calibrations(run_id=rid):  # newest first: keep the run's final fit
        fits.setdefault(c.workload, c)
    names = sorted({t.workload for t in trials} | set(rec_by_workload))
    workloads = []
    for name in names:
        mine = tuple(t for t in trials if t.workload == name)
        workloads.append(WorkloadReport(
            name=name, trials=tuple(TrialPoint.from_record(t) for t in mine),
            recommendation=rec_by_workload.get(name), itl_slo_ms=slo_bound(mine, ITL_P99),
            ttft_slo_ms=slo_bound(mine, "ttft_p99_ms"), fit=fits.get(name)))
    objectives = {r.objective for r in recs}
    objective = objectives.pop() if len(objectives) == 1 else "objective"
    plan, plan_note = None, ""
    try:
        plan = plan_for_run(store, rid)
    except PlanError as e:
        plan_note = str(e)
    return ReportData(run=run, workloads=tuple(workloads),
                      recommendations=tuple(sorted(recs, key=lambda r: r.workload)),
                      objective=objective, db=redact(store.url),
                      generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
                      plan=plan, plan_note=plan_note)
