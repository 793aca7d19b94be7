"""Output a user can trust and read: infeasible results said out loud and never exported,
read-only commands that create nothing and name their database, tables that fit 100 columns,
and SLOs that must be positive."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from autotune.cli import cli
from autotune.policy import DEFAULT_POLICY_PATH

SMALL = Path(__file__).resolve().parents[1] / "examples" / "small.jsonl"


def write_policy(tmp_path: Path, **changes: Any) -> Path:
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    data["budget"]["trials"] = 3
    data["replay"]["max_requests"] = 30
    data["replay"]["warmup_requests"] = 2
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def widest(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


@pytest.fixture(scope="module")
def infeasible_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, str, str]:
    """A pass whose SLO no config can meet (a 5 ms p99 TTFT: prefill alone takes longer),
    shared by the tests that read it."""
    tmp_path = tmp_path_factory.mktemp("infeasible")
    # what the pass says and stores is judged, not the search: the grid proposes without
    # fitting a predictor
    policy = write_policy(tmp_path, **{"objective.slo.ttft_p99_ms": 5,
                                       "search.strategy": "grid"})
    db = f"sqlite:///{tmp_path / 'a.db'}"
    exports = tmp_path / "exports"
    # one sim replica, in this process: no local Ray to start (the Ray pool has its own tests)
    code, out, err = run("start", "--traffic", SMALL, "--policy", policy, "--db", db,
                         "--once", "--replicas", "1", "--export-dir", exports)
    assert code == 0, err
    return db, exports, out, err


def test_an_infeasible_workload_is_stored_said_and_not_exported(
        infeasible_db: tuple[str, Path, str, str]) -> None:
    db, exports, out, err = infeasible_db
    assert widest(out) <= 100, out
    assert "infeasible" in out and "(req/s in SLO)" in out and "n=7/1024/8192" in out
    notes = " ".join(out.split())  # the notes wrap at 100 columns
    assert "meets the SLO at no rate down to" in notes and "an SLO of p99 TTFT ≤" in notes
    assert "search stopped:" in notes
    assert not exports.exists() or not any(exports.iterdir())  # nothing deployable written
    assert f"database: {db}" in err

    code, out, _ = run("recommendations", "--db", db, "--history", "--format", "json")
    recs = json.loads(out)
    assert recs and {r["status"] for r in recs} == {"infeasible"}
    feas = recs[0]["provenance"]["feasibility"]
    assert feas["feasible"] is False and feas["reason"].startswith("infeasible:")
    assert recs[0]["speedup_vs_baseline"] is None  # the baseline misses the SLO too
    assert recs[0]["provenance"]["baseline"]["meets_slo"] is False

    workload = recs[0]["workload"]
    code, out, err = run("export", "--workload", workload, "--db", db)
    assert code != 0 and out == ""
    assert "is infeasible" in err and "--force" in err
    code, out, err = run("export", "--workload", workload, "--db", db, "--force")
    assert code == 0 and json.loads(out)["method"] == "dspark"
    assert "warning: exporting infeasible" in err
    code, _, err = run("export", "--workload", "nope", "--db", db)
    assert code == 2 and "no recommendation for 'nope'; workloads with recommendations" in err


def test_read_only_commands_create_nothing_and_name_their_database(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUTOTUNE_DB_URL", raising=False)
    for args in (["runs"], ["trials"], ["recommendations"], ["status"],
                 ["export", "--workload", "code"], ["report", "-o", "r.html"]):
        code, _, err = run(*args)
        assert code != 0, args
        assert "database: sqlite:///storage/autotune.db" in err, (args, err)
        assert "no autotune database at sqlite:///storage/autotune.db" in err, (args, err)
    assert list(tmp_path.iterdir()) == []


def test_report_needs_an_output_file() -> None:
    code, _, err = run("report")
    assert code == 2 and "-o" in err


@pytest.mark.parametrize("bound", [0, -5])
def test_an_slo_of_zero_or_less_is_an_error_naming_the_key(tmp_path: Path, small_sample: Path,
                                                           bound: float) -> None:
    policy = write_policy(tmp_path, **{"objective.slo.itl_p99_ms": bound})
    code, out, err = run("start", "--traffic", small_sample, "--policy", policy, "--db",
                         f"sqlite:///{tmp_path / 'a.db'}", "--once")
    assert code == 2 and out == ""
    assert "objective.slo.itl_p99_ms" in err and "greater than 0" in err
    assert not (tmp_path / "a.db").exists()


def test_listing_tables_fit_100_columns(infeasible_db: tuple[str, Path, str, str]) -> None:
    db = infeasible_db[0]
    for args in (["runs"], ["trials"], ["recommendations", "--history"], ["recommendations"],
                 ["status"]):
        code, out, _ = run(*args, "--db", db)
        assert code == 0 and widest(out) <= 100, (args, out)
        assert "…" not in out, (args, out)
    code, wide, _ = run("trials", "--db", db, "--wide")
    assert code == 0 and "replica" in wide
