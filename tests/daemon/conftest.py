"""The databases the daemon's tests run on: a SQLite file, and a fresh schema of the
PostgreSQL server named by ``AUTOTUNE_TEST_POSTGRES_URL`` (the variants skip without it)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from signal_cases import PG_ENV, pg_schema


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh, empty schema (dropped afterwards)."""
    admin = os.environ.get(PG_ENV)
    if not admin:
        pytest.skip(f"{PG_ENV} is not set (CI sets it; see .ci/run)")
    with pg_schema(admin) as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'a.db'}"
    return str(request.getfixturevalue("pg_url"))
