"""Where the benchmarks find the repository, the shared data and their results."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: One folder per benchmark: its canonical result, the readings that re-score it, a manifest.
RESULTS = REPO / "bench" / "results"


def shared_data() -> Path:
    """The shared data folder (traces, prompt sets): ``$AUTOTUNE_SHARED_DATA``, else
    ``../shared/data`` beside the repository."""
    env = os.environ.get("AUTOTUNE_SHARED_DATA")
    return Path(env) if env else (REPO / ".." / "shared" / "data").resolve()


def child_env() -> dict[str, str]:
    """This process's environment for a child Python that must import this checkout's
    ``autotune`` and ``bench`` (``python -m bench...`` or the CLI), wherever it starts."""
    return {**os.environ, "PYTHONPATH": str(REPO)}
