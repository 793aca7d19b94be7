"""First schema: the tables autotune 0.1 created with ``create_all`` (before migrations).

Databases made by that version carry no revision stamp; :mod:`autotune.store.schema` recognises
them by their tables and stamps them 0001 before upgrading. New databases are created at head
directly, so this revision only runs when upgrading step by step from an empty database.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _when() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "traffic_samples",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("skipped_lines", sa.Integer(), nullable=False),
        sa.Column("created_at", _when(), nullable=False),
    )
    op.create_index("ix_traffic_samples_sha256", "traffic_samples", ["sha256"], unique=True)
    op.create_table(
        "workloads",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("sample_id", sa.Integer(), sa.ForeignKey("traffic_samples.id"),
                  nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.UniqueConstraint("sample_id", "name"),
    )
    op.create_index("ix_workloads_sample_id", "workloads", ["sample_id"])
    op.create_table(
        "runs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("policy_name", sa.String(200), nullable=False),
        sa.Column("policy_sha256", sa.String(64), nullable=False),
        sa.Column("policy", sa.JSON(), nullable=False),
        sa.Column("sample_id", sa.Integer(), sa.ForeignKey("traffic_samples.id"),
                  nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("started_at", _when(), nullable=False),
        sa.Column("finished_at", _when(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
    )
    op.create_index("ix_runs_status", "runs", ["status"])
    op.create_index("ix_runs_policy_sha256", "runs", ["policy_sha256"])
    op.create_index("ix_runs_sample_id", "runs", ["sample_id"])
    op.create_table(
        "trials",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("workload", sa.String(200), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("is_baseline", sa.Boolean(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("replica", sa.String(200), nullable=True),
        sa.Column("node", sa.String(200), nullable=True),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("feasible", sa.Boolean(), nullable=True),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("acceptance_rate", sa.Float(), nullable=True),
        sa.Column("per_request", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("started_at", _when(), nullable=False),
        sa.Column("finished_at", _when(), nullable=True),
        sa.UniqueConstraint("run_id", "workload", "number"),
    )
    op.create_index("ix_trials_run_id", "trials", ["run_id"])
    op.create_index("ix_trials_workload", "trials", ["workload"])
    op.create_table(
        "recommendations",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("workload", sa.String(200), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("speculative_config", sa.JSON(), nullable=True),
        sa.Column("serve", sa.JSON(), nullable=False),
        sa.Column("objective", sa.String(64), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("value_ci_low", sa.Float(), nullable=True),
        sa.Column("value_ci_high", sa.Float(), nullable=True),
        sa.Column("baseline_value", sa.Float(), nullable=True),
        sa.Column("speedup_vs_baseline", sa.Float(), nullable=True),
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("trial_id", sa.Integer(), sa.ForeignKey("trials.id"), nullable=True),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("provenance", sa.JSON(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", _when(), nullable=False),
        sa.Column("retired_at", _when(), nullable=True),
    )
    op.create_index("ix_recommendations_workload", "recommendations", ["workload"])
    op.create_index("ix_recommendations_status", "recommendations", ["status"])
    op.create_index("ix_recommendations_run_id", "recommendations", ["run_id"])
    op.create_table(
        "calibrations",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("workload", sa.String(200), nullable=False),
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id"), nullable=True),
        sa.Column("method", sa.String(32), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("ece_before", sa.Float(), nullable=True),
        sa.Column("ece_after", sa.Float(), nullable=True),
        sa.Column("created_at", _when(), nullable=False),
    )
    op.create_index("ix_calibrations_workload", "calibrations", ["workload"])


def downgrade() -> None:
    raise NotImplementedError("autotune does not downgrade its schema; restore a backup of the "
                              "database taken before the upgrade")
