"""Alembic environment: migrate autotune's tables on the connection autotune hands over.

:func:`autotune.store.schema.ensure_schema` passes its connection (inside a locked write
transaction) as ``config.attributes["connection"]``; run from the ``alembic`` command line
instead, the environment opens the database from ``$AUTOTUNE_DB_URL`` itself.
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import Connection

from autotune.store.models import TABLE_PREFIX, Base
from autotune.store.schema import VERSION_TABLE


def _include_name(name: str | None, type_: str, _parent: Any) -> bool:
    """Only autotune's own tables: Optuna's tables in the same database are not ours."""
    if type_ == "table":
        return bool(name and name.startswith(TABLE_PREFIX))
    return True


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=Base.metadata,
                      version_table=VERSION_TABLE, include_name=_include_name,
                      compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


def _main() -> None:
    if context.is_offline_mode():
        raise SystemExit("autotune's migrations run online only: alembic upgrade head")
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from autotune.store.engine import make_engine, resolve_url

    engine = make_engine(resolve_url(context.config.get_main_option("sqlalchemy.url")))
    try:
        with engine.begin() as conn:
            _run(conn)
    finally:
        engine.dispose()


_main()
