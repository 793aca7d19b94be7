"""Database URLs, engines and the one session scope that wraps driver errors.

The default database is ``sqlite:///storage/autotune.db`` (relative to the working directory,
created on first use); ``--db URL`` or ``AUTOTUNE_DB_URL`` override it (PostgreSQL for
clusters, with the ``[postgres]`` extra).

SQLite runs in WAL mode with a busy timeout, and with real transactions: Python's sqlite3
module would otherwise run DDL and reads outside any transaction. Every transaction starts
with an explicit ``BEGIN``; writers (an engine or connection with the execution option
``WRITE``) start with ``BEGIN IMMEDIATE``, so they queue on the busy timeout for the one write
lock instead of failing when a read turns into a write. Readers never wait for writers (WAL)
and see one consistent snapshot per transaction.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    ArgumentError,
    DataError,
    DBAPIError,
    IntegrityError,
    ProgrammingError,
    SQLAlchemyError,
)
from sqlalchemy.orm import Session, sessionmaker

from autotune.errors import StoreError

__all__ = [
    "DEFAULT_DB_URL",
    "ENV_DB_URL",
    "WRITE",
    "database_error_in",
    "describe_db_error",
    "is_sqlite",
    "make_engine",
    "redact",
    "resolve_url",
    "session_scope",
]

ENV_DB_URL = "AUTOTUNE_DB_URL"
DEFAULT_DB_URL = "sqlite:///storage/autotune.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000
PG_CONNECT_TIMEOUT_S = 10
#: SQLite errors that mean the disk or the file, not the URL: a full disk or a file-size limit
#: ("database or disk is full", or "disk I/O error" for EFBIG), a read-only file or folder.
_SQLITE_DISK_ERRORS = ("disk i/o error", "disk is full", "readonly database", "read-only")
#: Execution option marking a writer: ``engine.execution_options(**{WRITE: True})``.
WRITE = "autotune_write"


def resolve_url(url: str | None) -> str:
    """The URL to use: the given one, else ``$AUTOTUNE_DB_URL``, else the embedded default."""
    chosen = url or os.environ.get(ENV_DB_URL) or DEFAULT_DB_URL
    try:
        parsed = make_url(chosen)
    except ArgumentError as e:
        raise StoreError(f"invalid database URL {chosen!r}: {e}; use e.g. "
                         "sqlite:///storage/autotune.db or "
                         "postgresql+psycopg://user@host:5432/db") from e
    if parsed.drivername == "postgresql":  # psycopg 3 is the driver the [postgres] extra installs
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def redact(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _sqlite_wal(cur: Any) -> None:
    """Switch to WAL (persistent in the file). Two connections switching a new file at once
    can deadlock on its locks, and SQLite then answers one of them "database is locked"
    without waiting: retry that one until the busy timeout."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            if str(cur.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # we emit BEGIN ourselves (see _sqlite_begin)
    cur = dbapi_connection.cursor()
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    _sqlite_wal(cur)
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def _sqlite_begin(conn: Connection) -> None:
    write = conn.get_execution_options().get(WRITE, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def make_engine(url: str, *, create_folder: bool = True) -> Engine:
    """An engine for ``url``; creates the SQLite file's folder (unless ``create_folder`` is
    False); raises StoreError if unusable."""
    parsed = make_url(url)
    kwargs: dict[str, Any] = {}
    sqlite = parsed.get_backend_name() == "sqlite"
    if sqlite:
        db = parsed.database
        if db and db != ":memory:" and create_folder:
            try:
                Path(db).expanduser().parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(f"cannot create the folder of SQLite database {db}: {e}; "
                                 "pass --db with a writable location") from e
        kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
    else:
        kwargs["pool_pre_ping"] = True
        if parsed.get_backend_name() == "postgresql":
            kwargs["connect_args"] = {"connect_timeout": PG_CONNECT_TIMEOUT_S}
    try:
        engine = create_engine(url, **kwargs)
    except (ImportError, ModuleNotFoundError) as e:
        raise StoreError(
            f"database URL {redact(url)} needs a driver that is not installed ({e}); for "
            "PostgreSQL install it with: pip install 'autotune[postgres]'") from e
    except SQLAlchemyError as e:
        raise StoreError(f"cannot use database {redact(url)}: {e}") from e
    if sqlite:
        event.listen(engine, "connect", _sqlite_connect)
        event.listen(engine, "begin", _sqlite_begin)
    return engine


def describe_db_error(url: str, e: BaseException) -> str:
    """One clear line for an unreachable database, bad credentials, or a broken file."""
    orig = getattr(e, "orig", None) or e
    lines = [ln.strip() for ln in str(orig).strip().splitlines() if ln.strip()]
    text = lines[0] if lines else type(orig).__name__
    if isinstance(e, IntegrityError | DataError | ProgrammingError):
        return f"database {redact(url)} refused the operation: {text}"
    lowered = text.lower()
    if is_sqlite(url) and any(k in lowered for k in _SQLITE_DISK_ERRORS):
        return (f"database {redact(url)} is not usable: {text}; check the disk that holds it: "
                "free space, quotas and file-size limits, and that the file and its folder are "
                "writable (what was written before stays intact; the same command resumes the "
                "run once it is fixed)")
    return (f"database {redact(url)} is not usable: {text}; check --db / {ENV_DB_URL}, that the "
            "server is running and the credentials are right")


def database_error_in(e: BaseException, url: str) -> StoreError | None:
    """A StoreError (one line) for a driver error behind ``e`` — raised, say, inside Optuna's
    storage, which shares the database —, or None when ``e`` does not come from one."""
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, DBAPIError):
            return StoreError(describe_db_error(url, cause))
        cause = cause.__cause__ or cause.__context__
    return None


@contextmanager
def session_scope(factory: sessionmaker[Session], url: str) -> Iterator[Session]:
    """One transaction: commit on success, roll back on error, always close.

    Driver errors become :class:`StoreError` with one clear line.
    """
    session = factory()
    try:
        yield session
        session.commit()
    except DBAPIError as e:
        session.rollback()
        raise StoreError(describe_db_error(url, e)) from e
    except SQLAlchemyError as e:
        session.rollback()
        raise StoreError(f"database {redact(url)}: {e}") from e
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
