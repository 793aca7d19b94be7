"""Exports a deployment takes from a plan: the vllm serve command with its replica count, and
production-stack Helm values whose every key is one the chart documents (a schema written down
from the chart in tests/fixtures)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from plan_run import run, stored_plan

from autotune.plan import plan_for_run
from autotune.store import Store

SCHEMA = yaml.safe_load((Path(__file__).resolve().parents[1] / "fixtures" /
                         "production-stack-modelspec.yaml").read_text())
JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
    "integer": (int,), "number": (int, float)}


def _is(value: Any, kinds: str | list[str]) -> bool:
    kinds = [kinds] if isinstance(kinds, str) else kinds
    return any(isinstance(value, JSON_TYPES[k]) and not (k in ("integer", "number")
                                                        and isinstance(value, bool))
               for k in kinds)


def check_against_chart(values: dict[str, Any]) -> None:
    assert set(values) <= set(SCHEMA["top_level"])
    assert set(values["servingEngineSpec"]) <= set(SCHEMA["servingEngineSpec"])
    for entry in values["servingEngineSpec"]["modelSpec"]:
        assert set(SCHEMA["required_by_template"]) <= set(entry)
        for key, value in entry.items():
            assert key in SCHEMA["modelSpec"], f"modelSpec.{key} is not a field of the chart"
            assert _is(value, SCHEMA["modelSpec"][key]), (key, value)
        for key, value in entry["vllmConfig"].items():
            assert key in SCHEMA["vllmConfig"], f"vllmConfig.{key} is not a field of the chart"
            assert _is(value, SCHEMA["vllmConfig"][key]), (key, value)
        assert all(isinstance(a, str) for a in entry["vllmConfig"]["extraArgs"])


def test_production_stack_values_carry_the_plan_in_the_charts_fields(
        tuned: tuple[str, str], tmp_path: Path) -> None:
    db, run_id = tuned
    out = tmp_path / "values.yaml"
    code, _, err = run("export", "--format", "production-stack", "--run", run_id, "--db", db,
                       "-o", out)
    assert code == 0, err
    values = yaml.safe_load(out.read_text())
    check_against_chart(values)
    store = Store.open(db)
    try:
        plan = plan_for_run(store, run_id)
        recs = {r.workload: r for r in reversed(store.recommendations(run_id=run_id))}
    finally:
        store.close()
    entries = {e["name"]: e for e in values["servingEngineSpec"]["modelSpec"]}
    assert set(entries) == {w.workload for w in plan.planned}
    for w in plan.planned:
        entry, rec = entries[w.workload], recs[w.workload]
        assert entry["replicaCount"] == w.recommended_sizing[0].replicas
        assert entry["requestGPU"] == plan.settings.gpus_per_replica
        assert entry["modelURL"] == rec.serve["model"]
        config = entry["vllmConfig"]
        assert config["maxNumSeqs"] == rec.config["max_num_seqs"]
        args = config["extraArgs"]
        assert args[args.index("--max-num-batched-tokens") + 1] == \
            str(rec.config["max_num_batched_tokens"])
        spec = json.loads(args[args.index("--speculative-config") + 1])
        assert spec == dict(rec.speculative_config or {})
    assert "plan of run" in out.read_text().splitlines()[1]


def test_a_modelspec_key_the_chart_does_not_document_fails_the_check() -> None:
    entry = {"name": "x", "repository": "r", "tag": "t", "modelURL": "m", "replicaCount": 1,
             "requestGPU": 8, "vllmConfig": {"maxNumSeqs": 8, "maxNumBatchedTokens": 8192,
                                             "extraArgs": []}}
    try:
        check_against_chart({"servingEngineSpec": {"modelSpec": [entry]}})
    except AssertionError as e:
        assert "maxNumBatchedTokens" in str(e)
    else:
        raise AssertionError("an undocumented vllmConfig key passed the check")


def test_vllm_args_say_how_many_replicas_the_plan_gives(tuned: tuple[str, str]) -> None:
    db, _ = tuned
    plan = stored_plan(*tuned)
    for w in plan.planned:
        code, out, err = run("export", "--workload", w.workload, "--format", "vllm-args",
                             "--db", db)
        assert code == 0, err
        n = w.recommended_sizing[0].replicas
        assert f"# replicas: {n} of this command" in out
        assert out.splitlines()[-1].startswith("vllm serve ")


def test_production_stack_with_a_workload_is_refused(tuned: tuple[str, str]) -> None:
    db, _ = tuned
    code, out, err = run("export", "--format", "production-stack", "--workload", "code",
                         "--db", db)
    assert code == 2 and "--workload" in err and out == ""


def test_an_infeasible_workload_the_plan_sizes_is_exported_with_its_replicas(
        tuned: tuple[str, str], tmp_path: Path) -> None:
    import sqlite3
    from contextlib import closing

    from sqlalchemy import create_engine, text

    db, run_id = tuned
    copy = tmp_path / "copy.db"
    with closing(sqlite3.connect(db.removeprefix("sqlite:///"))) as src, \
            closing(sqlite3.connect(copy)) as dst:
        src.backup(dst)  # the whole database, its write-ahead log included
    url = f"sqlite:///{copy}"
    store = Store.open(url)
    try:
        w = plan_for_run(store, run_id).planned[0]
    finally:
        store.close()
    # the newest result of the workload made infeasible for one replica (capacity below 1x)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE autotune_recommendations SET status = 'infeasible', "
                          "reason = 'infeasible: needs 2 replicas' WHERE workload = :w"),
                     {"w": w.workload})
    engine.dispose()
    code, out, err = run("export", "--workload", w.workload, "--format", "vllm-args",
                         "--db", url)
    assert code == 0, err
    assert "the plan gives it the replicas it needs" in err
    assert f"# replicas: {w.recommended_sizing[0].replicas} of this command" in out
