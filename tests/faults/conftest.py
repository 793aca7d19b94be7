"""Faults injected for real into autotune processes (helpers shared with tests/daemon)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "daemon"))

from signal_cases import PG_ENV, pg_schema


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh, empty schema (dropped afterwards)."""
    admin = os.environ.get(PG_ENV)
    if not admin:
        pytest.skip(f"{PG_ENV} is not set (CI sets it; see .ci/run)")
    with pg_schema(admin) as url:
        yield url
