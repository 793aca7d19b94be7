"""`autotune db upgrade`, and database failures as one clear line and a non-zero exit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from autotune.cli import cli
from autotune.store import HEAD, Store
from autotune.store.schema import VERSION_TABLE

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def one_error_line(err: str) -> str:
    """The error, one line (after the line naming the database the command read)."""
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("database: ")]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    return lines[0]


def test_db_upgrade_is_idempotent(db_url: str) -> None:
    code, _, err = run("db", "upgrade", "--db", db_url)
    assert code == 0 and f"upgraded from schema empty to {HEAD}" in err
    code, _, err = run("db", "upgrade", "--db", db_url)
    assert code == 0 and f"at schema {HEAD} (up to date)" in err


def test_db_upgrade_reads_the_env_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "old.db"
    shutil.copy(FIXTURES / "autotune-v0001.db", db)
    monkeypatch.setenv("AUTOTUNE_DB_URL", f"sqlite:///{db}")
    code, _, err = run("db", "upgrade")
    assert code == 0 and f"from schema 0001 (unstamped) to {HEAD}" in err, err
    code, out, _ = run("recommendations", "--history", "--format", "json")
    assert code == 0 and out.count('"workload": "code"') == 3


def test_database_from_a_newer_autotune(db_url: str) -> None:
    Store.open(db_url).close()
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '0042'"))
    engine.dispose()
    for args in (["recommendations"], ["trials"], ["db", "upgrade"]):
        code, out, err = run(*args, "--db", db_url)
        line = one_error_line(err)
        assert code != 0 and out == ""
        assert "schema revision 0042" in line and "newer autotune" in line


def test_unreachable_database_through_the_real_entry_point() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "recommendations", "--db",
         "postgresql://postgres@127.0.0.1:1/test"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "AUTOTUNE_DB_URL": ""})
    assert proc.returncode != 0 and proc.stdout == ""
    line = one_error_line(proc.stderr)
    assert "127.0.0.1:1/test is not usable" in line and "server is running" in line


def test_file_that_is_not_a_database(tmp_path: Path) -> None:
    bad = tmp_path / "notes.db"
    bad.write_text("not sqlite\n" * 500)
    code, _, err = run("runs", "--db", f"sqlite:///{bad}")
    assert code != 0 and "not usable: file is not a database" in one_error_line(err)


@pytest.mark.postgres
def test_wrong_credentials(pg_schema_url: str) -> None:
    url = make_url(pg_schema_url).set(username="autotune_no_such_role")
    code, _, err = run("export", "--workload", "code", "--db",
                       url.render_as_string(hide_password=False))
    line = one_error_line(err)
    assert code != 0 and 'role "autotune_no_such_role" does not exist' in line
    assert "credentials" in line
