"""Bringing a database to the schema this autotune expects (Alembic, shipped in the package).

Three kinds of database meet :func:`ensure_schema`:

- empty (no autotune table): the tables are created at head and stamped, in one transaction;
- made by autotune 0.1 (revision 0001's tables, no stamp): stamped 0001, then upgraded;
- stamped with a revision: upgraded to head; a revision this autotune does not know (written by
  a newer autotune) is refused with one clear line.

The upgrade runs in one write transaction holding a lock (SQLite ``BEGIN IMMEDIATE``; a
PostgreSQL advisory lock), and re-reads the revision under the lock, so processes opening the
same database at once migrate it exactly once. PostgreSQL and SQLite both roll DDL back if a
step fails. Revisions are recorded in ``autotune_alembic_version``: Optuna keeps its own
``alembic_version`` in the same database.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from autotune.errors import StoreError
from autotune.store.engine import WRITE, describe_db_error, make_engine, redact, resolve_url
from autotune.store.models import TABLE_PREFIX, Base

__all__ = [
    "HEAD",
    "VERSION_TABLE",
    "SchemaState",
    "UpgradeResult",
    "ensure_schema",
    "read_schema_state",
    "upgrade",
]

HEAD = "0004"
VERSION_TABLE = "autotune_alembic_version"
#: Tables whose presence (without a stamp) marks a database of autotune 0.1 (revision 0001).
#: Not ``trials``: that name may be Optuna's.
LEGACY_TABLES = frozenset({"traffic_samples", "runs", "recommendations", "workloads"})
#: pg_advisory_xact_lock key serialising migrations ("autotune" in ASCII).
_PG_LOCK_KEY = int.from_bytes(b"autotune", "big") & 0x7FFF_FFFF_FFFF_FFFF


@dataclass(frozen=True)
class SchemaState:
    """What a database holds: its stamped revision, and whether it has autotune tables."""

    revision: str | None
    legacy: bool  # revision 0001's tables, unstamped
    empty: bool  # no autotune table at all

    @property
    def label(self) -> str:
        if self.revision:
            return self.revision
        return "empty" if self.empty else ("0001 (unstamped)" if self.legacy else "unknown")


def read_schema_state(conn: Connection) -> SchemaState:
    tables = set(inspect(conn).get_table_names())
    revision = None
    if VERSION_TABLE in tables:
        rows = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
        revision = ",".join(sorted(rows)) or None
    ours = {t for t in tables if t.startswith(TABLE_PREFIX) and t != VERSION_TABLE}
    legacy = tables >= LEGACY_TABLES
    return SchemaState(revision=revision, legacy=legacy, empty=not ours and not legacy)


def _known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    return {s.revision for s in ScriptDirectory(str(_migrations_dir())).walk_revisions()}


def _migrations_dir() -> Any:
    from autotune.store.migrations import MIGRATIONS_DIR

    return MIGRATIONS_DIR


def _alembic_config(conn: Connection) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_migrations_dir()))
    cfg.attributes["connection"] = conn
    return cfg


def _newer_schema_error(url: str, revision: str) -> StoreError:
    return StoreError(
        f"database {redact(url)} has schema revision {revision}, which this autotune (schema "
        f"{HEAD}) does not know: it was written by a newer autotune; upgrade autotune "
        "(pip install -U autotune) or point --db at another database")


@contextmanager
def _migration_lock(engine: Engine) -> Iterator[Connection]:
    """A connection in a write transaction that holds the migration lock; commits on exit."""
    with engine.execution_options(**{WRITE: True}).connect() as conn, conn.begin():
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
        yield conn


def _migrate(conn: Connection, url: str) -> SchemaState:
    """Under the lock: bring the database to head; returns the state found."""
    from alembic import command

    state = read_schema_state(conn)
    if state.revision == HEAD:
        return state
    if state.revision is not None and state.revision not in _known_revisions():
        raise _newer_schema_error(url, state.revision)
    cfg = _alembic_config(conn)
    if state.empty and state.revision is None:
        Base.metadata.create_all(conn)
        command.stamp(cfg, HEAD)
        return state
    if state.revision is None:
        if not state.legacy:
            raise StoreError(
                f"database {redact(url)} holds some of autotune's tables but no schema "
                f"revision ({VERSION_TABLE} is missing); it was not made by autotune, or was "
                "damaged: point --db at another database")
        command.stamp(cfg, "0001")
    command.upgrade(cfg, HEAD)
    return state


def ensure_schema(engine: Engine, url: str, *, upgrade: bool = True,
                  missing: str | None = None) -> SchemaState:
    """Check the database's schema and (``upgrade``) bring it to head; returns what was found.

    Without ``upgrade`` a database behind head is refused with the command that upgrades it.
    With ``missing`` (the message), a database holding no autotune table is refused instead of
    created. Errors are :class:`StoreError` with one line.
    """
    try:
        with engine.connect() as conn:
            state = read_schema_state(conn)
        if missing is not None and state.empty and state.revision is None:
            raise StoreError(missing)
        if state.revision == HEAD:
            return state
        if state.revision is not None and state.revision not in _known_revisions():
            raise _newer_schema_error(url, state.revision)
        if not upgrade:
            raise StoreError(f"database {redact(url)} is at schema {state.label}, this autotune "
                             f"needs {HEAD}; run: autotune db upgrade --db URL")
        with _migration_lock(engine) as conn:
            return _migrate(conn, url)
    except StoreError:
        raise
    except DBAPIError as e:
        raise StoreError(describe_db_error(url, e)) from e
    except (SQLAlchemyError, RuntimeError, NotImplementedError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise StoreError(f"cannot upgrade the schema of database {redact(url)}: {first}") from e


@dataclass(frozen=True)
class UpgradeResult:
    url: str
    before: str
    after: str

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def message(self) -> str:
        if not self.changed:
            return f"database {self.url} is at schema {self.after} (up to date)"
        return f"database {self.url} upgraded from schema {self.before} to {self.after}"


def upgrade(url: str | None = None) -> UpgradeResult:
    """``autotune db upgrade``: bring the database at ``url`` to head (idempotent)."""
    resolved = resolve_url(url)
    engine = make_engine(resolved)
    try:
        state = ensure_schema(engine, resolved, upgrade=True)
        return UpgradeResult(redact(resolved), state.label, HEAD)
    finally:
        engine.dispose()
