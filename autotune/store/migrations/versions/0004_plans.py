"""A run's capacity plan: the ``autotune_plans`` table.

One row per run: the inputs a plan reads besides the trials (each workload's replayed arrival
times), the mixed sample's readings at capacity on the candidate shared configs, and the plan
the pass made (``autotune/plan/``, docs/plan.md).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "autotune_plans",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("shared", sa.JSON(), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["autotune_runs.id"]),
        sa.PrimaryKeyConstraint("run_id"),
    )


def downgrade() -> None:
    raise NotImplementedError("autotune does not downgrade its schema; restore a backup of the "
                              "database taken before the upgrade")
