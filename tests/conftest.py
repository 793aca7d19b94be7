"""Shared fixtures: paths of the repo, its examples and the shared data, and temporary DBs;
the order test files run in (the slowest first), and the real-vLLM tests on one worker."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


#: Where a file's tests put it in the run order: files with a test that starts a real vLLM
#: server first, then those with a slow one (``slow``: more than a few seconds; ``ray``: a
#: local Ray cluster), then the rest.
_FIRST_MARKERS = (("vllm",), ("slow", "ray"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the slowest files first, each group in collection order. `make pytest` hands whole
    files to two workers in this order (``--dist loadfile --no-loadscope-reorder``): the
    longest start first and the many short ones even out the end. xdist's own order (the
    files with most tests first) left the one-test files of real servers, minutes each, for
    last, where one worker ran them while the other had nothing left."""
    def rank(item: pytest.Item) -> int:
        for i, names in enumerate(_FIRST_MARKERS):
            if any(item.get_closest_marker(n) is not None for n in names):
                return i
        return len(_FIRST_MARKERS)

    first: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        first[path] = min(first.get(path, len(_FIRST_MARKERS)), rank(item))
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (first[item.nodeid.split("::", 1)[0]], order[id(item)]))


#: The tests of real vLLM servers (and the scripted stand-ins beside them).
_VLLM_TESTS = "tests/backends/vllm/"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with the files of tests/backends/vllm as one unit of work: they run
    one after the other on one worker (the first, as they come first), never two real vLLM
    servers side by side on two cores. Each server runs OpenMP threads on every core: two at
    once oversubscribe them, and a full run ordered by files alone measured those files 40-90%
    slower (test_vllm_outputs 112 s -> 213 s) while the other tests took the same time."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class VllmOnOneWorker(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(_VLLM_TESTS):
                return _VLLM_TESTS
            scope: str = super()._split_scope(nodeid)
            return scope

    return VllmOnOneWorker(config, log)


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
