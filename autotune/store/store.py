"""The Store: every read and write autotune makes to its database, each in one transaction.

Writers (the tuning pass) and readers (``runs``, ``trials``, ``recommendations``, ``export``)
may run at the same time: each call opens its own short transaction, so a reader sees whole
trials and whole recommendations, never half of one, and never a workload with two active
recommendations or none between a retirement and a promotion (both happen in one transaction).
Opening a store creates or upgrades its schema (:mod:`autotune.store.schema`).
"""

from __future__ import annotations

import math
import secrets
import zlib
from collections.abc import Mapping
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, case, func, make_url, select, text, update
from sqlalchemy.orm import Session, defer, sessionmaker

from autotune.errors import StoreError
from autotune.redact import redact_text
from autotune.store.engine import (
    DEFAULT_DB_URL,
    ENV_DB_URL,
    WRITE,
    is_sqlite,
    make_engine,
    redact,
    resolve_url,
    session_scope,
)
from autotune.store.models import (
    CalibrationRow,
    PlanRow,
    RecommendationRow,
    RunRow,
    TrafficSampleRow,
    TrialRow,
    WorkloadRow,
    utcnow,
)
from autotune.store.records import (
    CalibrationRecord,
    PlanRecord,
    RecommendationRecord,
    RunRecord,
    SampleRecord,
    TrialRecord,
    WorkloadStatus,
)
from autotune.types import TrialConfig

__all__ = ["Store", "new_run_id"]

RUN_STATUSES = ("running", "finished", "failed", "interrupted")
RECOMMENDATION_STATUSES = ("candidate", "active", "retired", "infeasible")
TRIAL_STATES = ("complete", "failed", "pruned", "running")


def new_run_id(now: datetime | None = None) -> str:
    """A sortable, unique run id: ``20261129-151003-3fa2``."""
    t = now or datetime.now(UTC)
    return f"{t:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def _no_database(url: str) -> str:
    return (f"no autotune database at {redact(url)} (--db, else ${ENV_DB_URL}, else the "
            f"default {DEFAULT_DB_URL}, relative to this folder); pass --db with the one a "
            "pass wrote, or run: autotune start --traffic SAMPLE --once")


def _require_sqlite_file(url: str) -> None:
    """A read-only command must not create an empty SQLite file (or its folder)."""
    if is_sqlite(url):
        db = make_url(url).database
        if db and db != ":memory:" and not Path(db).expanduser().is_file():
            raise StoreError(_no_database(url))


def _json_safe(value: Any) -> Any:
    """NaN and infinities become None: PostgreSQL's JSON (rightly) refuses them; credentials in
    URLs become ``***`` (:func:`autotune.redact.redact_text`): none reaches the database."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _later(first: datetime | None, second: datetime | None) -> bool:
    """True when ``first`` is after ``second`` (unknown times are never later)."""
    if first is None or second is None:
        return False
    return first.replace(tzinfo=first.tzinfo or UTC) > second.replace(tzinfo=second.tzinfo or UTC)


def _pair(low: float | None, high: float | None) -> tuple[float, float] | None:
    return (low, high) if low is not None and high is not None else None


class Store:
    """Typed access to the autotune database at ``url`` (see :mod:`autotune.store.engine`)."""

    def __init__(self, engine: Engine, url: str) -> None:
        self.engine = engine
        self.url = url
        self._reads = sessionmaker(engine, expire_on_commit=False)
        self._writes = sessionmaker(engine.execution_options(**{WRITE: True}),
                                    expire_on_commit=False)

    @classmethod
    def open(cls, url: str | None = None, *, create: bool = True,
             existing: bool = False) -> Store:
        """Connect; create the schema of an empty database, upgrade an older one.

        ``create=False`` refuses a database that is not at the current schema instead (the
        message names ``autotune db upgrade``). ``existing=True`` (the read-only commands)
        refuses a database autotune has not written yet, and creates no file or folder for it.
        Errors are :class:`StoreError`, one line.
        """
        from autotune.store.schema import ensure_schema

        resolved = resolve_url(url)
        if existing:
            _require_sqlite_file(resolved)
        engine = make_engine(resolved, create_folder=not existing)
        try:
            ensure_schema(engine, resolved, upgrade=create,
                          missing=_no_database(resolved) if existing else None)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine, resolved)

    @property
    def optuna_url(self) -> str:
        """Optuna's RDB storage lives in the same database (optuna-dashboard can open it)."""
        return self.url

    def session(self) -> AbstractContextManager[Session]:
        """A write transaction (SQLite: ``BEGIN IMMEDIATE``); commits on success."""
        return session_scope(self._writes, self.url)

    def _read(self) -> AbstractContextManager[Session]:
        """A read transaction: one consistent snapshot, never blocked by a writer."""
        return session_scope(self._reads, self.url)

    def close(self) -> None:
        self.engine.dispose()

    # ---- traffic -------------------------------------------------------------------------
    def record_sample(self, *, path: str, sha256: str, size_bytes: int, requests: int,
                      skipped_lines: int, workloads: Mapping[str, Mapping[str, Any]]) -> int:
        """Record a loaded sample and its workloads (once per content hash); returns its id."""
        with self.session() as s:
            row = s.scalar(select(TrafficSampleRow).where(TrafficSampleRow.sha256 == sha256))
            if row is None:
                row = TrafficSampleRow(sha256=sha256, path=path, size_bytes=size_bytes,
                                       requests=requests, skipped_lines=skipped_lines)
                s.add(row)
                s.flush()
                for name, summary in workloads.items():
                    s.add(WorkloadRow(sample_id=row.id, name=name,
                                      requests=int(summary.get("requests", 0)),
                                      summary=dict(summary)))
            return row.id

    def sample(self, sample_id: int) -> SampleRecord:
        with self._read() as s:
            row = s.get(TrafficSampleRow, sample_id)
            if row is None:
                raise StoreError(f"no traffic sample with id {sample_id}")
            workloads = s.scalars(select(WorkloadRow).where(WorkloadRow.sample_id == row.id))
            return SampleRecord(id=row.id, path=row.path, sha256=row.sha256,
                                size_bytes=row.size_bytes, requests=row.requests,
                                workloads={w.name: w.summary for w in workloads})

    # ---- runs ----------------------------------------------------------------------------
    def create_run(self, *, backend: str, policy_name: str, policy_sha256: str,
                   policy: Mapping[str, Any], sample_id: int, seed: int,
                   options: Mapping[str, Any] | None = None, run_id: str | None = None) -> str:
        rid = run_id or new_run_id()
        with self.session() as s:
            s.add(RunRow(id=rid, status="running", backend=backend, policy_name=policy_name,
                         policy_sha256=policy_sha256, policy=_json_safe(dict(policy)),
                         sample_id=sample_id,
                         seed=seed, options=_json_safe(dict(options or {}))))
        return rid

    def resumable_run(self, *, backend: str, policy_sha256: str, sample_id: int,
                      seed: int) -> str | None:
        """The newest unfinished run (running or interrupted) with the same inputs, if any."""
        with self._read() as s:
            return s.scalar(
                select(RunRow.id)
                .where(RunRow.backend == backend, RunRow.policy_sha256 == policy_sha256,
                       RunRow.sample_id == sample_id, RunRow.seed == seed,
                       RunRow.status.in_(("running", "interrupted")))
                .order_by(RunRow.started_at.desc())
                .limit(1))

    def set_run_status(self, run_id: str, status: str, error: str | None = None) -> None:
        if status not in RUN_STATUSES:
            raise ValueError(f"run status must be one of {RUN_STATUSES}, got {status!r}")
        with self.session() as s:
            values: dict[str, Any] = {"status": status,
                                      "error": redact_text(error) if error else error}
            values["finished_at"] = None if status == "running" else utcnow()
            s.execute(update(RunRow).where(RunRow.id == run_id).values(**values))

    def update_run_options(self, run_id: str, values: Mapping[str, Any]) -> None:
        """Merge ``values`` into the run's ``options`` JSON (its cost, why its budget ended
        it)."""
        with self.session() as s:
            run = s.get(RunRow, run_id)
            if run is None:
                raise StoreError(f"no run {run_id!r}; list runs with: autotune runs")
            run.options = {**(run.options or {}), **_json_safe(dict(values))}

    def runs(self, limit: int | None = None) -> list[RunRecord]:
        """Runs, newest first."""
        with self._read() as s:
            q = (select(RunRow, TrafficSampleRow)
                 .join(TrafficSampleRow, RunRow.sample_id == TrafficSampleRow.id)
                 .order_by(RunRow.started_at.desc(), RunRow.id.desc()))
            if limit:
                q = q.limit(limit)
            return [self._run_view(run, sample) for run, sample in s.execute(q).all()]

    def run(self, run_id: str) -> RunRecord:
        with self._read() as s:
            run = s.get(RunRow, run_id)
            if run is None:
                raise StoreError(f"no run {run_id!r}; list runs with: autotune runs")
            sample = s.get(TrafficSampleRow, run.sample_id)
            assert sample is not None
            return self._run_view(run, sample)

    @staticmethod
    def _run_view(run: RunRow, sample: TrafficSampleRow) -> RunRecord:
        return RunRecord(id=run.id, status=run.status, backend=run.backend,
                         policy_name=run.policy_name, policy_sha256=run.policy_sha256,
                         sample_id=sample.id, sample_path=sample.path,
                         sample_sha256=sample.sha256, sample_requests=sample.requests,
                         seed=run.seed, started_at=run.started_at,
                         finished_at=run.finished_at, error=run.error,
                         options=dict(run.options or {}))

    # ---- trials --------------------------------------------------------------------------
    def record_trial(self, *, run_id: str, workload: str, number: int, state: str,
                     params: Mapping[str, Any], is_baseline: bool = False,
                     value: float | None = None, feasible: bool | None = None,
                     metrics: Mapping[str, Any] | None = None,
                     acceptance_rate: float | None = None,
                     per_request: Mapping[str, Any] | None = None, error: str | None = None,
                     replica: str | None = None, node: str | None = None, attempts: int = 1,
                     started_at: datetime | None = None) -> int:
        """Insert or update one trial (keyed by run, workload, number) in one transaction."""
        if state not in TRIAL_STATES:
            raise ValueError(f"trial state must be one of {TRIAL_STATES}, got {state!r}")
        with self.session() as s:
            row = s.scalar(select(TrialRow).where(TrialRow.run_id == run_id,
                                                  TrialRow.workload == workload,
                                                  TrialRow.number == number))
            if row is None:
                row = TrialRow(run_id=run_id, workload=workload, number=number,
                               started_at=started_at or utcnow())
                s.add(row)
            row.state = state
            row.params = _json_safe(dict(params))
            row.is_baseline = is_baseline
            row.value = value
            row.feasible = feasible
            row.metrics = _json_safe(dict(metrics or {}))
            row.acceptance_rate = acceptance_rate
            row.per_request = _json_safe(dict(per_request or {}))
            row.error = redact_text(error) if error else error
            row.replica = replica
            row.node = node
            row.attempts = attempts
            row.finished_at = None if state == "running" else utcnow()
            s.flush()
            return row.id

    def update_trial_metrics(self, trial_id: int, updates: Mapping[str, Any]) -> None:
        """Set keys of a stored trial's ``metrics`` (what a later step concluded about it)."""
        with self.session() as s:
            row = s.get(TrialRow, trial_id)
            if row is None:
                raise ValueError(f"no trial with id {trial_id}")
            row.metrics = {**(row.metrics or {}), **_json_safe(dict(updates))}

    def trials(self, run_id: str | None = None, workload: str | None = None,
               *, with_requests: bool = False) -> list[TrialRecord]:
        """Trials, oldest first (by run, workload and number)."""
        with self._read() as s:
            q = select(TrialRow).order_by(TrialRow.run_id, TrialRow.workload, TrialRow.number)
            if run_id:
                q = q.where(TrialRow.run_id == run_id)
            if workload:
                q = q.where(TrialRow.workload == workload)
            if not with_requests:
                q = q.options(defer(TrialRow.per_request))
            return [self._trial_view(t, with_requests) for t in s.scalars(q)]

    def trial(self, trial_id: int, *, with_requests: bool = True) -> TrialRecord | None:
        """One trial by its id (with its per-request measurements), or None."""
        with self._read() as s:
            row = s.get(TrialRow, trial_id)
            return self._trial_view(row, with_requests) if row is not None else None

    @staticmethod
    def _trial_view(t: TrialRow, with_requests: bool) -> TrialRecord:
        return TrialRecord(id=t.id, run=t.run_id, workload=t.workload, number=t.number,
                           state=t.state, baseline=t.is_baseline, params=t.params or {},
                           replica=t.replica, node=t.node, value=t.value, feasible=t.feasible,
                           metrics=t.metrics or {}, acceptance_rate=t.acceptance_rate,
                           error=t.error, attempts=t.attempts,
                           per_request=(t.per_request or {}) if with_requests else None)

    # ---- recommendations -----------------------------------------------------------------
    def add_recommendation(self, *, workload: str, config: TrialConfig,
                           speculative_config: Mapping[str, Any] | None,
                           serve: Mapping[str, Any], objective: str, value: float,
                           baseline_value: float | None, run_id: str, trial_id: int | None,
                           backend: str, provenance: Mapping[str, Any],
                           value_ci: tuple[float, float] | None = None,
                           promote: bool, reason: str, gain: float | None = None,
                           gain_ci: tuple[float, float] | None = None,
                           compared_with: int | None = None,
                           check_active: bool = False,
                           infeasible: bool = False,
                           once_per_run: bool = False) -> RecommendationRecord:
        """Add a recommendation; with ``promote`` it becomes active and the old one retires.

        ``gain``/``gain_ci`` are the relative improvement over recommendation ``compared_with``
        (the active one when the decision was made). With ``check_active`` the promotion only
        happens if ``compared_with`` is still the active one when this transaction runs (another
        process may have promoted meanwhile); otherwise the row stays a candidate and its reason
        says so. Retirement and promotion commit together: a reader sees one active or the
        other, never both or neither. An ``infeasible`` result (no config measured serves the
        workload's traffic within the SLO) is stored with that status and never promoted.

        With ``once_per_run`` a run stores at most one recommendation per workload: when one
        is stored already (a run stopped after recommending, then resumed), it is returned
        unchanged and nothing is added or promoted.
        """
        if infeasible:
            promote = False
        speedup = value / baseline_value if baseline_value else None
        with self.session() as s:
            if ((promote or once_per_run) and s.bind is not None
                    and s.bind.dialect.name == "postgresql"):
                key = zlib.crc32(f"autotune:{workload}".encode())
                s.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
            if once_per_run:
                stored = s.scalar(select(RecommendationRow)
                                  .where(RecommendationRow.run_id == run_id,
                                         RecommendationRow.workload == workload)
                                  .order_by(RecommendationRow.id).limit(1))
                if stored is not None:
                    return self._rec_view(stored)
            active = s.scalar(select(RecommendationRow)
                              .where(RecommendationRow.workload == workload,
                                     RecommendationRow.status == "active")
                              .order_by(RecommendationRow.id.desc()).limit(1))
            active_id = active.id if active is not None else None
            if promote and check_active and active_id != compared_with:
                promote = False
                reason = (f"{reason}; not promoted: the active recommendation changed to "
                          f"#{active_id} while this run decided (compared with "
                          f"#{compared_with})")
            row = RecommendationRow(
                workload=workload, status="infeasible" if infeasible else "candidate",
                config=config.as_dict(),
                speculative_config=dict(speculative_config) if speculative_config else None,
                serve=_json_safe(dict(serve)), objective=objective, value=value,
                value_ci_low=value_ci[0] if value_ci else None,
                value_ci_high=value_ci[1] if value_ci else None,
                baseline_value=baseline_value, speedup_vs_baseline=speedup, run_id=run_id,
                trial_id=trial_id, backend=backend, provenance=_json_safe(dict(provenance)),
                reason=redact_text(reason),
                gain=gain, gain_ci_low=gain_ci[0] if gain_ci else None,
                gain_ci_high=gain_ci[1] if gain_ci else None, compared_with_id=compared_with)
            s.add(row)
            s.flush()
            if promote:
                now = utcnow()
                s.execute(update(RecommendationRow)
                          .where(RecommendationRow.workload == workload,
                                 RecommendationRow.status == "active")
                          .values(status="retired", retired_at=now, retired_by_id=row.id))
                s.execute(update(RecommendationRow).where(RecommendationRow.id == row.id)
                          .values(status="active", promoted_at=now))
                s.refresh(row)
            return self._rec_view(row)

    def active_recommendation(self, workload: str) -> RecommendationRecord | None:
        with self._read() as s:
            row = s.scalar(select(RecommendationRow)
                           .where(RecommendationRow.workload == workload,
                                  RecommendationRow.status == "active")
                           .order_by(RecommendationRow.id.desc()).limit(1))
            return self._rec_view(row) if row else None

    def recommendation(self, rec_id: int) -> RecommendationRecord:
        with self._read() as s:
            row = s.get(RecommendationRow, rec_id)
            if row is None:
                raise StoreError(f"no recommendation #{rec_id}; list them with: autotune "
                                 "recommendations --history")
            return self._rec_view(row)

    def recommendations(self, workload: str | None = None, *, history: bool = False,
                        run_id: str | None = None) -> list[RecommendationRecord]:
        """Active recommendations (all of them, newest first, with ``history``)."""
        with self._read() as s:
            q = select(RecommendationRow).order_by(RecommendationRow.workload,
                                                   RecommendationRow.id.desc())
            if workload:
                q = q.where(RecommendationRow.workload == workload)
            if run_id:
                q = q.where(RecommendationRow.run_id == run_id)
            elif not history:
                q = q.where(RecommendationRow.status == "active")
            return [self._rec_view(r) for r in s.scalars(q)]

    def workload_statuses(self, workload: str | None = None) -> list[WorkloadStatus]:
        """Every workload's newest result (:class:`~autotune.store.records.WorkloadStatus`),
        by workload: the active recommendation, else the newest one stored, else — or when a
        later finished or failed run tuned the workload and recommended nothing — ``failed``
        with that run's reason."""
        with self._read() as s:
            newest = (select(func.max(RecommendationRow.id))
                      .group_by(RecommendationRow.workload))
            if workload:
                newest = newest.where(RecommendationRow.workload == workload)
            recs: dict[str, RecommendationRow] = {}
            chosen = select(RecommendationRow).where(
                (RecommendationRow.status == "active") | RecommendationRow.id.in_(newest))
            if workload:
                chosen = chosen.where(RecommendationRow.workload == workload)
            for row in s.scalars(chosen.order_by(RecommendationRow.id)):
                if recs.get(row.workload) is None or recs[row.workload].status != "active":
                    recs[row.workload] = row
            starts = dict(s.execute(select(RunRow.id, RunRow.started_at).where(
                RunRow.id.in_({r.run_id for r in recs.values()}))).all())
            out = {name: self._status_view(row) for name, row in recs.items()}
            for name, (run, trials, failed) in self._runs_without_result(s, workload).items():
                stored = recs.get(name)
                if stored is not None and (stored.status == "active" or _later(
                        starts.get(stored.run_id), run.started_at)):
                    continue
                why = (f"the run failed: {run.error}" if run.status == "failed" and run.error
                       else f"every trial failed ({failed})" if failed == trials
                       else f"no recommendation stored ({failed} of {trials} trials failed)")
                out[name] = WorkloadStatus(
                    workload=name, status="failed", run=run.id, at=run.finished_at,
                    reason=f"{why}; see `autotune trials --run {run.id} --workload {name}`")
            return [out[k] for k in sorted(out)]

    def _runs_without_result(self, s: Session, workload: str | None
                             ) -> dict[str, tuple[RunRow, int, int]]:
        """Per workload, the newest finished or failed run that has its trials but stored no
        recommendation for it: (run, trials, failed trials)."""
        q = (select(TrialRow.workload, RunRow, func.count(TrialRow.id),
                    func.sum(case((TrialRow.state == "failed", 1), else_=0)))
             .join(RunRow, RunRow.id == TrialRow.run_id)
             .where(RunRow.status.in_(("finished", "failed")),
                    ~select(RecommendationRow.id)
                    .where(RecommendationRow.run_id == TrialRow.run_id,
                           RecommendationRow.workload == TrialRow.workload).exists())
             .group_by(TrialRow.workload, RunRow.id)
             .order_by(RunRow.started_at, RunRow.id))
        if workload:
            q = q.where(TrialRow.workload == workload)
        return {name: (run, int(n), int(failed or 0)) for name, run, n, failed in s.execute(q)}

    def _status_view(self, row: RecommendationRow) -> WorkloadStatus:
        rec = self._rec_view(row)
        return WorkloadStatus(workload=rec.workload, status=rec.status, reason=rec.reason,
                              run=rec.run, at=rec.created_at, recommendation=rec)

    @staticmethod
    def _rec_view(r: RecommendationRow) -> RecommendationRecord:
        return RecommendationRecord(
            id=r.id, workload=r.workload, status=r.status,
            config=r.config or {},
            speculative_config=r.speculative_config, serve=r.serve or {},
            objective=r.objective, value=r.value, value_ci=_pair(r.value_ci_low, r.value_ci_high),
            baseline_value=r.baseline_value, speedup_vs_baseline=r.speedup_vs_baseline,
            gain=r.gain, gain_ci=_pair(r.gain_ci_low, r.gain_ci_high),
            compared_with=r.compared_with_id, run=r.run_id, trial_id=r.trial_id,
            backend=r.backend, provenance=r.provenance or {}, reason=r.reason or "",
            created_at=r.created_at, promoted_at=r.promoted_at, retired_at=r.retired_at,
            retired_by=r.retired_by_id)

    # ---- calibrations --------------------------------------------------------------------
    def record_calibration(self, *, workload: str, run_id: str | None, method: str,
                           params: Mapping[str, Any], ece_before: float | None,
                           ece_after: float | None) -> int:
        with self.session() as s:
            row = CalibrationRow(workload=workload, run_id=run_id, method=method,
                              params=dict(params), ece_before=ece_before, ece_after=ece_after)
            s.add(row)
            s.flush()
            return row.id

    def calibrations(self, run_id: str | None = None,
                     workload: str | None = None) -> list[CalibrationRecord]:
        """Stored acceptance-head calibrations (method, ECE before and held-out ECE after),
        newest first."""
        with self._read() as s:
            q = select(CalibrationRow).order_by(CalibrationRow.id.desc())
            if run_id:
                q = q.where(CalibrationRow.run_id == run_id)
            if workload:
                q = q.where(CalibrationRow.workload == workload)
            return [CalibrationRecord(workload=c.workload, run=c.run_id, method=c.method,
                                      params=dict(c.params or {}), ece_before=c.ece_before,
                                      ece_after=c.ece_after, created_at=c.created_at)
                    for c in s.scalars(q)]

    # ---- plans ---------------------------------------------------------------------------
    def run_policy(self, run_id: str) -> dict[str, Any]:
        """The policy a run was made with, as stored (a mapping ``policy_from_mapping`` reads)."""
        with self._read() as s:
            run = s.get(RunRow, run_id)
            if run is None:
                raise StoreError(f"no run {run_id!r}; list runs with: autotune runs")
            return dict(run.policy or {})

    def save_plan(self, run_id: str, *, inputs: Mapping[str, Any] | None = None,
                  shared: list[Mapping[str, Any]] | None = None,
                  plan: Mapping[str, Any] | None = None) -> None:
        """Create or update a run's plan row: each part given replaces the stored one."""
        with self.session() as s:
            row = s.get(PlanRow, run_id)
            if row is None:
                row = PlanRow(run_id=run_id, inputs={}, shared=[], plan=None)
                s.add(row)
            if inputs is not None:
                row.inputs = _json_safe(dict(inputs))
            if shared is not None:
                row.shared = _json_safe([dict(r) for r in shared])
            if plan is not None:
                row.plan = _json_safe(dict(plan))
            row.updated_at = utcnow()

    def plan(self, run_id: str) -> PlanRecord | None:
        """A run's stored plan row, or None."""
        with self._read() as s:
            row = s.get(PlanRow, run_id)
            if row is None:
                return None
            return PlanRecord(run=row.run_id, inputs=dict(row.inputs or {}),
                              shared=tuple(dict(r) for r in row.shared or []),
                              plan=dict(row.plan) if row.plan is not None else None,
                              created_at=row.created_at, updated_at=row.updated_at)
