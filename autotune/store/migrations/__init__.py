"""Alembic migrations of autotune's tables, shipped in the package (``autotune db upgrade``).

The environment (``env.py``) runs on the connection :mod:`autotune.store.schema` hands it, in
that connection's transaction, and records revisions in ``autotune_alembic_version`` (Optuna
keeps its own ``alembic_version`` in the same database). Developers can also drive it with the
``alembic`` command: ``alembic -c autotune/store/migrations/alembic.ini upgrade head`` (URL from
``$AUTOTUNE_DB_URL``), or ``... revision -m "what changes"`` to add a revision.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["MIGRATIONS_DIR"]

MIGRATIONS_DIR = Path(__file__).resolve().parent
