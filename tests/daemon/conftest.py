"""The databases the daemon's tests run on: a SQLite file, and a fresh schema of the
PostgreSQL server named by ``AUTOTUNE_TEST_POSTGRES_URL`` (the variants skip without it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from signal_cases import pg_url  # noqa: F401 (a fixture shared with tests/faults)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'a.db'}"
    return str(request.getfixturevalue("pg_url"))
