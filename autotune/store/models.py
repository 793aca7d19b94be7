"""SQLAlchemy 2 typed models: the tables autotune keeps (docs/storage.md), at schema head.

autotune_traffic_samples ─< autotune_workloads
autotune_traffic_samples ─< autotune_runs ─< autotune_trials
autotune_runs ─< autotune_recommendations (lifecycle candidate → active → retired)
autotune_runs ─ autotune_plans (the capacity plan of a run and the readings only it needs)
autotune_calibrations (acceptance-head calibration fits, per workload)
autotune_leases (one process tuning a traffic on this database: holder, heartbeat, expiry)

Every table name starts with ``autotune_``: Optuna keeps its studies in the same database
(its own ``studies``, ``trials``, ``alembic_version`` ... tables), and revision 0001's unprefixed
``trials`` collided with Optuna's. Constraints are unnamed here: PostgreSQL names them
``<table>_pkey``, ``<table>_<columns>_key``, ``<table>_<column>_fkey``, which is what revision
0002 renames the old ones to, so a database created at head and an upgraded one are identical.

JSON columns hold the value types of ``autotune.types`` in their ``as_dict`` form. Changing a
model means adding a revision under ``autotune/store/migrations/versions``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "REC_STATUSES",
    "TABLE_PREFIX",
    "Base",
    "CalibrationRow",
    "LeaseRow",
    "PlanRow",
    "RecommendationRow",
    "RunRow",
    "TrafficSampleRow",
    "TrialRow",
    "WorkloadRow",
    "utcnow",
]

TABLE_PREFIX = "autotune_"
REC_STATUSES = ("candidate", "active", "retired")

def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class TrafficSampleRow(Base):
    __tablename__ = "autotune_traffic_samples"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    sha256: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    path: Mapped[str] = mapped_column(Text)
    size_bytes: Mapped[int] = mapped_column(Integer)
    requests: Mapped[int] = mapped_column(Integer)
    skipped_lines: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class WorkloadRow(Base):
    __tablename__ = "autotune_workloads"
    __table_args__ = (UniqueConstraint("sample_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    sample_id: Mapped[int] = mapped_column(ForeignKey("autotune_traffic_samples.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    requests: Mapped[int] = mapped_column(Integer)
    summary: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class RunRow(Base):
    __tablename__ = "autotune_runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    #: running / finished / failed / interrupted
    status: Mapped[str] = mapped_column(String(16), index=True)
    backend: Mapped[str] = mapped_column(String(32))
    policy_name: Mapped[str] = mapped_column(String(200))
    policy_sha256: Mapped[str] = mapped_column(String(64), index=True)
    policy: Mapped[dict[str, Any]] = mapped_column(JSON)
    sample_id: Mapped[int] = mapped_column(ForeignKey("autotune_traffic_samples.id"), index=True)
    seed: Mapped[int] = mapped_column(Integer, default=0)
    options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class TrialRow(Base):
    __tablename__ = "autotune_trials"
    __table_args__ = (UniqueConstraint("run_id", "workload", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("autotune_runs.id"), index=True)
    workload: Mapped[str] = mapped_column(String(200), index=True)
    number: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))  # complete/failed/pruned/running
    is_baseline: Mapped[bool] = mapped_column(Boolean, default=False)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    replica: Mapped[str | None] = mapped_column(String(200), nullable=True)
    node: Mapped[str | None] = mapped_column(String(200), nullable=True)
    value: Mapped[float | None] = mapped_column(Float, nullable=True)
    feasible: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    acceptance_rate: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: Per measured request: ttft_s, tpot_s, e2e_s, output_tokens, ok (lists of equal length).
    per_request: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class RecommendationRow(Base):
    __tablename__ = "autotune_recommendations"
    __table_args__ = (
        # At most one active recommendation per workload, whoever writes concurrently.
        Index("ux_autotune_recommendations_one_active", "workload", unique=True,
              sqlite_where=text("status = 'active'"),
              postgresql_where=text("status = 'active'")),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workload: Mapped[str] = mapped_column(String(200), index=True)
    # candidate | active | retired | infeasible
    status: Mapped[str] = mapped_column(String(16), index=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    speculative_config: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    serve: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    objective: Mapped[str] = mapped_column(String(64))
    value: Mapped[float] = mapped_column(Float)
    #: 95% bootstrap CI of ``value`` over the trial's requests.
    value_ci_low: Mapped[float | None] = mapped_column(Float, nullable=True)
    value_ci_high: Mapped[float | None] = mapped_column(Float, nullable=True)
    baseline_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    speedup_vs_baseline: Mapped[float | None] = mapped_column(Float, nullable=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("autotune_runs.id"), index=True)
    trial_id: Mapped[int | None] = mapped_column(ForeignKey("autotune_trials.id"), nullable=True)
    backend: Mapped[str] = mapped_column(String(32))
    provenance: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    retired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Revision 0002: the significance test against the recommendation that was active.
    #: Relative improvement of the objective over ``compared_with_id`` (0.05 = +5%).
    gain: Mapped[float | None] = mapped_column(Float, nullable=True)
    gain_ci_low: Mapped[float | None] = mapped_column(Float, nullable=True)
    gain_ci_high: Mapped[float | None] = mapped_column(Float, nullable=True)
    compared_with_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    #: The recommendation that replaced this one (set when it retires).
    retired_by_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    promoted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class CalibrationRow(Base):
    __tablename__ = "autotune_calibrations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workload: Mapped[str] = mapped_column(String(200), index=True)
    run_id: Mapped[str | None] = mapped_column(ForeignKey("autotune_runs.id"), nullable=True)
    method: Mapped[str] = mapped_column(String(32))  # temperature | isotonic | identity
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    ece_before: Mapped[float | None] = mapped_column(Float, nullable=True)
    ece_after: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class LeaseRow(Base):
    """Revision 0003: who is tuning a traffic on this database (``autotune.store.lease``)."""

    __tablename__ = "autotune_leases"

    #: sha256 of the lease key (the traffic's absolute path), so any path fits the index.
    key_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    traffic: Mapped[str] = mapped_column(Text)
    #: A random token naming the holding process; renewals and the release match it.
    holder: Mapped[str] = mapped_column(String(64))
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    #: ``<boot id>/<pid namespace>/<start time>`` of the holder: on the same machine and pid
    #: namespace, a holder that died is recognised at once instead of at expiry.
    process: Mapped[str] = mapped_column(String(200))
    command: Mapped[str] = mapped_column(String(32))  # start | nightly
    acquired_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class PlanRow(Base):
    """Revision 0004: a run's capacity plan (``autotune.plan``), one row per run.

    ``inputs`` holds what the plan reads besides the trials: each workload's replayed arrival
    times; ``shared`` the mixed sample's readings at capacity (config and metrics, as a trial's);
    ``plan`` the plan the pass made with the policy's settings (``autotune plan --run`` makes it
    again from ``inputs``, ``shared`` and the trials, with any settings, measuring nothing).
    """

    __tablename__ = "autotune_plans"

    run_id: Mapped[str] = mapped_column(ForeignKey("autotune_runs.id"), primary_key=True)
    inputs: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    shared: Mapped[list[Any]] = mapped_column(JSON, default=list)
    plan: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
