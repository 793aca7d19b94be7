"""Database URLs, engines and the one session scope that wraps driver errors.

The default database is ``sqlite:///storage/autotune.db`` (relative to the working directory,
created on first use, WAL journal and a busy timeout so readers never see lock errors);
``--db URL`` or ``AUTOTUNE_DB_URL`` override it (PostgreSQL for clusters).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from autotune.errors import StoreError

__all__ = ["DEFAULT_DB_URL", "ENV_DB_URL", "make_engine", "resolve_url", "session_scope",
           "redact"]

ENV_DB_URL = "AUTOTUNE_DB_URL"
DEFAULT_DB_URL = "sqlite:///storage/autotune.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000


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


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def make_engine(url: str) -> Engine:
    """An engine for ``url``; creates the SQLite file's folder; raises StoreError if unusable."""
    parsed = make_url(url)
    kwargs: dict[str, Any] = {"future": True}
    if parsed.get_backend_name() == "sqlite":
        db = parsed.database
        if db and db != ":memory:":
            Path(db).expanduser().parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
    else:
        kwargs["pool_pre_ping"] = True
    try:
        engine = create_engine(url, **kwargs)
    except (ImportError, ModuleNotFoundError) as e:
        raise StoreError(
            f"database URL {redact(url)} needs a driver that is not installed ({e}); for "
            "PostgreSQL install it with: pip install 'autotune[postgres]'") from e
    except SQLAlchemyError as e:
        raise StoreError(f"cannot use database {redact(url)}: {e}") from e
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def describe_db_error(url: str, e: Exception) -> str:
    """One clear line for an unreachable database, bad credentials, or a broken file."""
    orig = getattr(e, "orig", None) or e
    text = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    return (f"database {redact(url)} is not usable: {text}; check --db / {ENV_DB_URL}, that the "
            "server is running and the credentials are right")


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
