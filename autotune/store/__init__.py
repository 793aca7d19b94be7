"""Persistence: runs, trials, recommendations and calibrations in SQLite or PostgreSQL."""

from __future__ import annotations

from autotune.store.engine import DEFAULT_DB_URL, ENV_DB_URL, resolve_url
from autotune.store.store import Store, new_run_id

__all__ = ["DEFAULT_DB_URL", "ENV_DB_URL", "Store", "new_run_id", "resolve_url"]
