"""Shared fixtures: paths of the repo, its examples and the shared data, and temporary DBs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


def shared_data() -> Path:
    """../shared/data beside the checkout (CI lays it there), or $AUTOTUNE_SHARED_DATA."""
    env = os.environ.get("AUTOTUNE_SHARED_DATA")
    return Path(env) if env else (REPO / ".." / "shared" / "data").resolve()


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def small_sample() -> Path:
    return EXAMPLES / "small.jsonl"


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'autotune.db'}"
