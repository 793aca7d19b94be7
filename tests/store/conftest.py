"""Every store test runs against SQLite and against PostgreSQL.

The PostgreSQL server comes from ``$AUTOTUNE_TEST_POSTGRES_URL`` (CI: ``.ci/run`` sets it to
``postgresql+psycopg://postgres@127.0.0.1:5432/test``); the PostgreSQL variants skip only when
that variable is absent. Each test gets a fresh schema of its own (dropped afterwards), put
first on the connection's ``search_path`` through the URL, so parallel runs and reruns never
see each other's tables — Optuna's included.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_ENV = "AUTOTUNE_TEST_POSTGRES_URL"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _pg_admin_url() -> str | None:
    return os.environ.get(PG_ENV) or None


def with_search_path(url: str, schema: str) -> str:
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    query = dict(parsed.query)
    query["options"] = f"-csearch_path={schema}"
    return parsed.set(query=query).render_as_string(hide_password=False)


@pytest.fixture
def pg_schema_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh, empty schema (dropped afterwards)."""
    admin = _pg_admin_url()
    if admin is None:
        pytest.skip(f"{PG_ENV} is not set (CI sets it; see .ci/run)")
    from sqlalchemy import create_engine, text

    schema = f"autotune_test_{uuid.uuid4().hex[:12]}"
    engine = create_engine(admin)
    try:
        with engine.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        yield with_search_path(admin, schema)
    finally:
        with engine.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database under test: a fresh SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'autotune.db'}"
    return str(request.getfixturevalue("pg_schema_url"))


@pytest.fixture
def backend_name(db_url: str) -> str:
    return "postgresql" if db_url.startswith("postgresql") else "sqlite"
