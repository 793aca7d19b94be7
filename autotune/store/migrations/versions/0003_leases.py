"""One process per database and traffic: the ``autotune_leases`` table.

A daemon, ``start --once`` or ``nightly`` holds a lease on the traffic it tunes (key: the
traffic's absolute path) and renews it with a heartbeat; a second process on the same database
and traffic is refused with the holder's host and pid, and a lease whose holder died is taken
over (``autotune/store/lease.py``).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "autotune_leases",
        sa.Column("key_sha256", sa.String(64), nullable=False),
        sa.Column("traffic", sa.Text(), nullable=False),
        sa.Column("holder", sa.String(64), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("process", sa.String(200), nullable=False),
        sa.Column("command", sa.String(32), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key_sha256"),
    )


def downgrade() -> None:
    raise NotImplementedError("autotune does not downgrade its schema; restore a backup of the "
                              "database taken before the upgrade")
