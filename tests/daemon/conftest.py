"""The databases the daemon's tests run on: a SQLite file, and a fresh schema of the
PostgreSQL server named by ``AUTOTUNE_TEST_POSTGRES_URL`` (the variants skip without it)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_ENV = "AUTOTUNE_TEST_POSTGRES_URL"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh, empty schema (dropped afterwards)."""
    admin = os.environ.get(PG_ENV)
    if not admin:
        pytest.skip(f"{PG_ENV} is not set (CI sets it; see .ci/run)")
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    schema = f"autotune_test_{uuid.uuid4().hex[:12]}"
    engine = create_engine(admin)
    with engine.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    parsed = make_url(admin)
    url = parsed.set(query={**parsed.query, "options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with engine.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'a.db'}"
    return str(request.getfixturevalue("pg_url"))
