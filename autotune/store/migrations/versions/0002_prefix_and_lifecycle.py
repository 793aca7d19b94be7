"""Prefix autotune's tables with ``autotune_``; lineage and significance of recommendations.

- Revision 0001's ``trials`` (and ``alembic_version``) collided with Optuna's tables, which live
  in the same database: a tuning pass could not use its study. Every autotune table is renamed
  to ``autotune_<name>``, with its indexes, constraints and (PostgreSQL) sequences. In SQLite,
  renaming also rewrote the foreign keys of the Optuna tables created against the old
  ``trials``; those tables are necessarily empty (Optuna never had a ``trials`` of its own), so
  they are dropped and Optuna recreates them on next use.
- ``autotune_recommendations`` gains the significance test against the recommendation that was
  active (``gain``, ``gain_ci_low``, ``gain_ci_high``, ``compared_with_id``), its lineage
  (``retired_by_id``, ``promoted_at``, backfilled from the order of promotions) and a partial
  unique index allowing one active recommendation per workload.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

PREFIX = "autotune_"
#: Table → its single-column indexes in revision 0001 (name ix_<table>_<column>).
TABLES: dict[str, list[str]] = {
    "traffic_samples": ["sha256"],
    "workloads": ["sample_id"],
    "runs": ["status", "policy_sha256", "sample_id"],
    "trials": ["run_id", "workload"],
    "recommendations": ["workload", "status", "run_id"],
    "calibrations": ["workload"],
}
UNIQUE_INDEXES = {("traffic_samples", "sha256")}


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _check_trials_is_ours(inspector: sa.Inspector) -> None:
    columns = {c["name"] for c in inspector.get_columns("trials")}
    if "run_id" not in columns:
        raise RuntimeError("table 'trials' is not autotune's (no run_id column; it looks like "
                           "Optuna's): this database cannot be upgraded automatically")


def _rename_tables() -> None:
    for table, columns in TABLES.items():
        for column in columns:
            op.drop_index(f"ix_{table}_{column}", table_name=table)
        op.rename_table(table, PREFIX + table)
        for column in columns:
            op.create_index(f"ix_{PREFIX}{table}_{column}", PREFIX + table, [column],
                            unique=(table, column) in UNIQUE_INDEXES)


def _rename_pg_constraints(bind: sa.Connection) -> None:
    """PostgreSQL keeps constraint and sequence names on rename; give them the new prefix."""
    inspector = sa.inspect(bind)
    for table in TABLES:
        new = PREFIX + table
        renames: list[tuple[str, str]] = []
        pk = inspector.get_pk_constraint(new).get("name")
        if pk and pk != f"{new}_pkey":
            renames.append((pk, f"{new}_pkey"))
        for uq in inspector.get_unique_constraints(new):
            target = f"{new}_{'_'.join(uq['column_names'])}_key"
            if uq["name"] and uq["name"] != target:
                renames.append((uq["name"], target))
        for fk in inspector.get_foreign_keys(new):
            target = f"{new}_{fk['constrained_columns'][0]}_fkey"
            if fk["name"] and fk["name"] != target:
                renames.append((fk["name"], target))
        for old, target in renames:
            op.execute(f"ALTER TABLE {_q(new)} RENAME CONSTRAINT {_q(old)} TO {_q(target)}")
        seq = bind.execute(sa.text("SELECT pg_get_serial_sequence(:t, 'id')"),
                           {"t": new}).scalar()
        if seq and seq.split(".")[-1].strip('"') != f"{new}_id_seq":
            op.execute(f"ALTER SEQUENCE {seq} RENAME TO {_q(f'{new}_id_seq')}")


def _drop_collision_leftovers(bind: sa.Connection) -> None:
    """Drop foreign tables whose foreign keys now point at autotune's tables (SQLite rename)."""
    inspector = sa.inspect(bind)
    for table in inspector.get_table_names():
        if table.startswith(PREFIX):
            continue
        refs = [fk for fk in inspector.get_foreign_keys(table)
                if (fk.get("referred_table") or "").startswith(PREFIX)]
        if not refs:
            continue
        rows = bind.execute(sa.text(f"SELECT COUNT(*) FROM {_q(table)}")).scalar()
        if rows:
            raise RuntimeError(
                f"table {table!r} references autotune's tables and holds {rows} rows; it is "
                "not autotune's, so the upgrade stops: move that table out of this database")
        op.drop_table(table)


def _lifecycle_columns() -> None:
    table = PREFIX + "recommendations"
    op.add_column(table, sa.Column("gain", sa.Float(), nullable=True))
    op.add_column(table, sa.Column("gain_ci_low", sa.Float(), nullable=True))
    op.add_column(table, sa.Column("gain_ci_high", sa.Float(), nullable=True))
    op.add_column(table, sa.Column("compared_with_id", sa.Integer(), nullable=True))
    op.add_column(table, sa.Column("retired_by_id", sa.Integer(), nullable=True))
    op.add_column(table, sa.Column("promoted_at", sa.DateTime(timezone=True), nullable=True))


def _backfill_lineage(bind: sa.Connection) -> None:
    """Promotion order per workload: each promoted row is retired by the next one; one active."""
    recs = sa.table(PREFIX + "recommendations", sa.column("id", sa.Integer),
                    sa.column("workload", sa.String), sa.column("status", sa.String),
                    sa.column("created_at", sa.DateTime(timezone=True)),
                    sa.column("retired_at", sa.DateTime(timezone=True)),
                    sa.column("retired_by_id", sa.Integer),
                    sa.column("promoted_at", sa.DateTime(timezone=True)))
    rows = bind.execute(sa.select(recs.c.id, recs.c.workload, recs.c.status,
                                  recs.c.created_at, recs.c.retired_at)
                        .where(recs.c.status.in_(("active", "retired")))
                        .order_by(recs.c.workload, recs.c.id)).all()
    by_workload: dict[str, list[Any]] = {}
    for row in rows:
        by_workload.setdefault(row.workload, []).append(row)
    for chain in by_workload.values():
        for i, row in enumerate(chain):
            values: dict[str, Any] = {"promoted_at": row.created_at}
            if i + 1 < len(chain):
                nxt = chain[i + 1]
                values["retired_by_id"] = nxt.id
                if row.status == "active":  # two actives (a race in 0001): the newest wins
                    values["status"] = "retired"
                    values["retired_at"] = nxt.created_at
            bind.execute(sa.update(recs).where(recs.c.id == row.id).values(**values))


def upgrade() -> None:
    bind = op.get_bind()
    _check_trials_is_ours(sa.inspect(bind))
    _rename_tables()
    if bind.dialect.name == "postgresql":
        _rename_pg_constraints(bind)
    _drop_collision_leftovers(bind)
    _lifecycle_columns()
    _backfill_lineage(bind)
    op.create_index("ux_autotune_recommendations_one_active", PREFIX + "recommendations",
                    ["workload"], unique=True,
                    sqlite_where=sa.text("status = 'active'"),
                    postgresql_where=sa.text("status = 'active'"))


def downgrade() -> None:
    raise NotImplementedError("autotune does not downgrade its schema; restore a backup of the "
                              "database taken before the upgrade")
