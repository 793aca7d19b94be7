"""Fixtures of the report tests: a store holding one realistic finished run."""

from __future__ import annotations

from pathlib import Path

import pytest
from report_run import FilledRun, fill_run

from autotune.store import Store


@pytest.fixture
def filled(tmp_path: Path) -> FilledRun:
    store = Store.open(f"sqlite:///{tmp_path / 'report.db'}")
    return fill_run(store)
