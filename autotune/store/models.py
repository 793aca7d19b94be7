"""SQLAlchemy 2 typed models: the tables autotune keeps (DESIGN §9).

traffic_samples ─< workloads
traffic_samples ─< runs ─< trials
runs ─< recommendations (one per workload and run; lifecycle candidate → active → retired)
calibrations (acceptance-head calibration fits, per workload)

Tables carry an ``autotune_`` prefix: Optuna's RDB storage keeps its studies in the same
database and owns unprefixed names such as ``trials`` and ``alembic_version``.

JSON columns hold the value types of ``autotune.types`` in their ``as_dict`` form.
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
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "Base",
    "Calibration",
    "RecommendationRow",
    "RunRow",
    "TrafficSampleRow",
    "TrialRow",
    "WorkloadRow",
    "utcnow",
]


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
    sample_id: Mapped[int] = mapped_column(ForeignKey("autotune_traffic_samples.id"),
                                           index=True)
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
    sample_id: Mapped[int] = mapped_column(ForeignKey("autotune_traffic_samples.id"),
                                           index=True)
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
    per_request: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class RecommendationRow(Base):
    __tablename__ = "autotune_recommendations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workload: Mapped[str] = mapped_column(String(200), index=True)
    status: Mapped[str] = mapped_column(String(16), index=True)  # candidate/active/retired
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    speculative_config: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    serve: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    objective: Mapped[str] = mapped_column(String(64))
    value: Mapped[float] = mapped_column(Float)
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


class Calibration(Base):
    __tablename__ = "autotune_calibrations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workload: Mapped[str] = mapped_column(String(200), index=True)
    run_id: Mapped[str | None] = mapped_column(ForeignKey("autotune_runs.id"), nullable=True)
    method: Mapped[str] = mapped_column(String(32))  # temperature | isotonic | identity
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    ece_before: Mapped[float | None] = mapped_column(Float, nullable=True)
    ece_after: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
