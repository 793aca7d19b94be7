"""Faults injected for real into autotune processes (helpers shared with tests/daemon)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "daemon"))

from signal_cases import pg_url  # noqa: F401 (the fixture tests/daemon uses)
