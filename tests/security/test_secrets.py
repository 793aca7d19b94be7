"""Secrets from the environment never land in logs, the database, reports or exports.

A real ``autotune`` process runs a simulator pass with ``HF_TOKEN`` set and a PostgreSQL URL
holding a password (the local server trusts any password), at debug verbosity; then ``runs``,
``trials``, ``recommendations``, ``export`` and ``report`` read it back. Neither secret may
appear in any output, file written, or row of any table of the database (Optuna's included).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from autotune.policy import DEFAULT_POLICY_PATH

REPO = Path(__file__).resolve().parents[2]
PG_ENV = "AUTOTUNE_TEST_POSTGRES_URL"


@pytest.fixture
def pg_schema() -> Iterator[tuple[str, str]]:
    """(admin URL, schema): a fresh, empty schema, dropped afterwards."""
    admin = os.environ.get(PG_ENV)
    if not admin:
        pytest.skip(f"{PG_ENV} is not set (CI sets it; see .ci/run)")
    from sqlalchemy import create_engine, text

    schema = f"autotune_secret_{uuid.uuid4().hex[:12]}"
    engine = create_engine(admin)
    try:
        with engine.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        yield admin, schema
    finally:
        with engine.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        engine.dispose()


def _url_with_password(admin: str, schema: str, password: str) -> str:
    from sqlalchemy.engine import make_url

    parsed = make_url(admin)
    query = {**parsed.query, "options": f"-csearch_path={schema}"}
    return parsed.set(password=password, query=query).render_as_string(hide_password=False)


def _all_rows(admin: str, schema: str) -> str:
    """Every row of every table in ``schema``, as text."""
    from sqlalchemy import MetaData, create_engine, select

    engine = create_engine(admin)
    try:
        meta = MetaData(schema=schema)
        meta.reflect(engine)
        assert len(meta.tables) >= 5, sorted(meta.tables)
        out = []
        with engine.connect() as conn:
            for table in meta.tables.values():
                out.extend(repr(tuple(row)) for row in conn.execute(select(table)))
        return "\n".join(out)
    finally:
        engine.dispose()


@pytest.mark.slow
@pytest.mark.postgres
def test_hf_token_and_db_password_never_leak(pg_schema: tuple[str, str], tmp_path: Path) -> None:
    admin, schema = pg_schema
    token = f"hf_{uuid.uuid4().hex}"
    password = f"pw{uuid.uuid4().hex}"
    url = _url_with_password(admin, schema, password)
    env = {**os.environ, "HF_TOKEN": token, "HUGGING_FACE_HUB_TOKEN": token,
           "PYTHONPATH": str(REPO), "AUTOTUNE_DB_URL": url}
    env.pop("RAY_ADDRESS", None)
    exports = tmp_path / "exports"
    # the default policy searching with the grid: where secrets go is judged, not the search
    # (the grid proposes without fitting a predictor)
    policy = tmp_path / "policy.yaml"
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    data["search"] = {"strategy": "grid"}
    policy.write_text(yaml.safe_dump(data))

    def autotune(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-c", "from autotune.cli import main; main()",
                               "-vv", *args], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout + proc.stderr

    outputs = [
        autotune("start", "--traffic", str(REPO / "examples" / "small.jsonl"), "--once",
                 "--policy", str(policy), "--budget-trials", "2", "--replicas", "1",
                 "--export-dir", str(exports),
                 "--db", url),  # the URL as a flag here, from AUTOTUNE_DB_URL below
        autotune("runs", "--format", "json"),
        autotune("recommendations", "--format", "json", "--history"),
        autotune("report", "-o", str(tmp_path / "report.html")),
    ]
    # a workload the pass promoted is exported on promotion; export it again as vllm-args
    promoted = sorted(p.name.removesuffix(".speculative-config.json")
                      for p in exports.glob("*.speculative-config.json"))
    assert promoted, outputs[0]
    outputs.append(autotune("export", "--workload", promoted[0], "--format", "vllm-args",
                            "-o", str(tmp_path / "promoted.sh")))
    run_id = next(line.split()[1] for line in outputs[0].splitlines()
                  if line.startswith("run ") and "finished" in line)
    outputs.append(autotune("trials", "--run", run_id, "--format", "json"))

    written = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert {p.name for p in written} >= {"report.html", "promoted.sh",
                                         f"{promoted[0]}.speculative-config.json"}
    texts = {"output of the commands": "\n".join(outputs),
             "database rows": _all_rows(admin, schema)}
    texts.update({str(p): p.read_text(errors="replace") for p in written})
    assert run_id in texts["database rows"]  # the rows searched are the pass's
    for where, text in texts.items():
        assert token not in text, f"HF_TOKEN found in {where}"
        assert password not in text, f"the database password found in {where}"
