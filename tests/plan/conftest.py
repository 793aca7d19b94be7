"""Fixtures of the plan tests: one quick sim pass, shared by every test that reads it."""

from __future__ import annotations

import pytest
from plan_run import quick_pass


@pytest.fixture(scope="session")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """One quick pass over examples/small.jsonl on the simulator: (database URL, run id). One
    sim replica, in this process: no local Ray to start (the plan is judged, not the pool)."""
    return quick_pass(tmp_path_factory.mktemp("plan"), ("--replicas", "1"))
