"""Schema migrations: the 0001 fixture upgrades without losing rows; migrations equal models."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, text

from autotune.errors import StoreError
from autotune.store import HEAD, Store, upgrade
from autotune.store.models import Base
from autotune.store.schema import VERSION_TABLE, _alembic_config

FIXTURES = Path(__file__).resolve().parent / "fixtures"

LEGACY = ["traffic_samples", "workloads", "runs", "trials", "recommendations", "calibrations"]


def _migrate_to(url: str, revision: str) -> None:
    """Run the shipped migrations step by step from an empty database to ``revision``."""
    from alembic import command

    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            command.upgrade(_alembic_config(conn), revision)
    finally:
        engine.dispose()


def _optuna_round_trip(url: str) -> int:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="after-upgrade", storage=url, direction="maximize")
    study.optimize(lambda t: t.suggest_int("k", 1, 7), n_trials=3)
    return len(study.trials)


def test_v0001_fixture_upgrades_to_head_without_losing_rows(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    shutil.copy(FIXTURES / "autotune-v0001.db", db)
    with sqlite3.connect(db) as raw:
        before = {t: raw.execute(f"SELECT * FROM {t} ORDER BY id").fetchall() for t in LEGACY}
        legacy_cols = {t: [r[1] for r in raw.execute(f"PRAGMA table_info({t})")] for t in LEGACY}
    assert all(before.values()), "the fixture must hold rows in every table"

    result = upgrade(f"sqlite:///{db}")
    assert (result.before, result.after) == ("0001 (unstamped)", HEAD)

    with sqlite3.connect(db) as raw:
        for t in LEGACY:
            cols = ", ".join(legacy_cols[t])
            after = raw.execute(f"SELECT {cols} FROM autotune_{t} ORDER BY id").fetchall()
            assert after == before[t], t
        assert raw.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchall() == [(HEAD,)]
        # Optuna's own version stamp is left alone.
        assert raw.execute("SELECT version_num FROM alembic_version").fetchall() != [(HEAD,)]

    store = Store.open(f"sqlite:///{db}")
    hist = [r.to_json() for r in store.recommendations("code", history=True)]
    by_status = {r["status"]: r for r in hist}
    assert sorted(by_status) == ["active", "candidate", "retired"]
    assert by_status["retired"]["retired_by"] == by_status["active"]["id"]
    assert by_status["active"]["promoted_at"] == by_status["active"]["created_at"]
    assert by_status["candidate"]["promoted_at"] is None
    trial = store.trial(by_status["active"]["trial_id"])
    assert trial is not None and len((trial.per_request or {})["ttft_s"]) == 4
    # The collision with Optuna's `trials` is gone: a study works in the upgraded file.
    assert _optuna_round_trip(store.optuna_url) == 3
    assert len(store.trials()) == 5


def test_upgrade_from_revision_0001_keeps_rows(db_url: str) -> None:
    _migrate_to(db_url, "0001")
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO traffic_samples (sha256, path, size_bytes, requests, skipped_lines,"
            " created_at) VALUES (:sha, 'a.jsonl', 10, 2, 0, CURRENT_TIMESTAMP)"),
            {"sha": "f" * 64})
        sample_id = conn.execute(text("SELECT id FROM traffic_samples")).scalar_one()
        conn.execute(text(
            "INSERT INTO runs (id, status, backend, policy_name, policy_sha256, policy,"
            " sample_id, seed, options, started_at) VALUES ('r1', 'finished', 'sim', 'p',"
            " 'h', '{}', :sid, 0, '{}', CURRENT_TIMESTAMP)"), {"sid": sample_id})
        conn.execute(text(
            "INSERT INTO trials (id, run_id, workload, number, state, is_baseline, params,"
            " metrics, per_request, attempts, started_at) VALUES (7, 'r1', 'code', 0,"
            " 'complete', false, '{\"num_speculative_tokens\": 3}', '{}', '{}', 1,"
            " CURRENT_TIMESTAMP)"))
        for rid, status in ((1, "retired"), (2, "active"), (3, "active")):
            conn.execute(text(
                "INSERT INTO recommendations (id, workload, status, config, serve, objective,"
                " value, run_id, trial_id, backend, provenance, created_at) VALUES (:id, 'code',"
                " :st, '{}', '{}', 'goodput', 1.0, 'r1', 7, 'sim', '{}', CURRENT_TIMESTAMP)"),
                {"id": rid, "st": status})
    engine.dispose()

    store = Store.open(db_url)
    (trial,) = store.trials("r1")
    assert trial.id == 7 and trial.params == {"num_speculative_tokens": 3}
    hist = [r.to_json() for r in store.recommendations("code", history=True)]
    # Two actives (a race 0001 allowed) become one: the newest stays active.
    assert [(r["id"], r["status"], r["retired_by"]) for r in hist] == [
        (3, "active", None), (2, "retired", 3), (1, "retired", 2)]
    # Sequences and constraints carry over: new rows get fresh ids, and Optuna can create
    # its own `trials` (with its own `trials_pkey`) beside autotune's.
    sid = store.record_sample(path="b", sha256="e" * 64, size_bytes=1, requests=1,
                              skipped_lines=0, workloads={})
    assert sid == sample_id + 1
    assert _optuna_round_trip(store.optuna_url) == 3


def _schema_diffs(url: str) -> list[Any]:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={
                "include_name": lambda name, type_, _p: type_ != "table" or
                (name.startswith("autotune_") and name != VERSION_TABLE),
                "compare_type": True})
            return list(compare_metadata(ctx, Base.metadata))
    finally:
        engine.dispose()


def test_migrations_build_exactly_the_models(db_url: str) -> None:
    _migrate_to(db_url, HEAD)
    assert _schema_diffs(db_url) == []


def test_fresh_database_is_created_at_head_and_upgrade_is_idempotent(db_url: str) -> None:
    first = upgrade(db_url)
    assert (first.before, first.after) == ("empty", HEAD)
    again = upgrade(db_url)
    assert not again.changed and "up to date" in again.message()
    assert _schema_diffs(db_url) == []
    engine = create_engine(db_url)
    with engine.connect() as conn:
        assert conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).all() == [(HEAD,)]
        assert not {"runs", "trials", "recommendations"} & set(inspect(conn).get_table_names())
    engine.dispose()


def test_database_from_a_newer_schema_is_refused(db_url: str) -> None:
    Store.open(db_url).close()
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '0099'"))
    engine.dispose()
    for attempt in (lambda: Store.open(db_url), lambda: upgrade(db_url)):
        with pytest.raises(StoreError, match=r"revision 0099.*newer autotune") as e:
            attempt()
        assert "\n" not in str(e.value)


def test_open_without_create_names_the_upgrade_command(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    shutil.copy(FIXTURES / "autotune-v0001.db", db)
    with pytest.raises(StoreError, match="autotune db upgrade"):
        Store.open(f"sqlite:///{db}", create=False)
    with sqlite3.connect(db) as raw:  # refused means untouched
        assert raw.execute("SELECT COUNT(*) FROM trials").fetchone() == (5,)


def test_concurrent_first_use_migrates_once(db_url: str) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def opener() -> None:
        try:
            barrier.wait()
            Store.open(db_url).close()
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    engine = create_engine(db_url)
    with engine.connect() as conn:
        assert conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).all() == [(HEAD,)]
    engine.dispose()
