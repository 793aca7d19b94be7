"""Persistence: runs, trials, recommendations and calibrations in SQLite or PostgreSQL.

:class:`Store` is the one way in; opening it creates or upgrades the schema (Alembic
migrations shipped in ``autotune/store/migrations``); :func:`upgrade` is ``autotune db
upgrade``; :class:`HeldLease` keeps one process per database and traffic. All of autotune's
tables are named ``autotune_*``: Optuna's studies share the database.
"""

from __future__ import annotations

from autotune.store.engine import DEFAULT_DB_URL, ENV_DB_URL, resolve_url
from autotune.store.lease import HeldLease, LeaseHeld, LeaseRecord, lease_key, leases
from autotune.store.records import (
    CalibrationRecord,
    PlanRecord,
    RecommendationRecord,
    RunRecord,
    SampleRecord,
    TrialRecord,
    WorkloadStatus,
)
from autotune.store.schema import HEAD, UpgradeResult, upgrade
from autotune.store.store import Store, new_run_id

__all__ = [
    "DEFAULT_DB_URL",
    "ENV_DB_URL",
    "HEAD",
    "CalibrationRecord",
    "HeldLease",
    "LeaseHeld",
    "LeaseRecord",
    "PlanRecord",
    "RecommendationRecord",
    "RunRecord",
    "SampleRecord",
    "Store",
    "TrialRecord",
    "UpgradeResult",
    "WorkloadStatus",
    "lease_key",
    "leases",
    "new_run_id",
    "resolve_url",
    "upgrade",
]
