from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import StoreError
from autotune.store import Store
from autotune.types import TrialConfig


def make_run(store: Store, sha: str = "s" * 64) -> tuple[int, str]:
    sid = store.record_sample(path="x.jsonl", sha256=sha, size_bytes=10, requests=3,
                              skipped_lines=0, workloads={"code": {"requests": 3}})
    rid = store.create_run(backend="sim", policy_name="p", policy_sha256="h", policy={"a": 1},
                           sample_id=sid, seed=1)
    return sid, rid


def config(k: int) -> TrialConfig:
    return TrialConfig(k, False, 8, 2048)


def test_sample_recorded_once_per_hash(db_url: str) -> None:
    store = Store.open(db_url)
    a = store.record_sample(path="a", sha256="1" * 64, size_bytes=1, requests=1,
                            skipped_lines=0, workloads={"w": {"requests": 1}})
    b = store.record_sample(path="b", sha256="1" * 64, size_bytes=1, requests=1,
                            skipped_lines=0, workloads={"w": {"requests": 1}})
    assert a == b
    assert store.sample(a).workloads == {"w": {"requests": 1}}


def test_run_lifecycle_and_resume_lookup(db_url: str) -> None:
    store = Store.open(db_url)
    sid, rid = make_run(store)
    assert store.resumable_run(backend="sim", policy_sha256="h", sample_id=sid, seed=1) == rid
    assert store.resumable_run(backend="sim", policy_sha256="h", sample_id=sid, seed=2) is None
    store.set_run_status(rid, "interrupted")
    assert store.resumable_run(backend="sim", policy_sha256="h", sample_id=sid, seed=1) == rid
    store.set_run_status(rid, "finished")
    assert store.resumable_run(backend="sim", policy_sha256="h", sample_id=sid, seed=1) is None
    (run,) = store.runs()
    row = run.to_json()
    assert row["status"] == "finished" and row["finished_at"] is not None
    assert row["traffic"] == {"path": "x.jsonl", "sha256": "s" * 64, "requests": 3,
                              "sample_id": sid}
    with pytest.raises(ValueError):
        store.set_run_status(rid, "exploded")


def test_trial_upsert_keeps_one_row(db_url: str) -> None:
    store = Store.open(db_url)
    _, rid = make_run(store)
    store.record_trial(run_id=rid, workload="code", number=0, state="running", params={"n": 1})
    store.record_trial(run_id=rid, workload="code", number=0, state="complete", params={"n": 1},
                       value=2.5, feasible=True, metrics={"goodput": 2.5},
                       per_request={"ttft_s": [0.1]})
    (t,) = store.trials(rid)
    assert t.state == "complete" and t.value == 2.5 and t.metrics == {"goodput": 2.5}
    assert t.per_request is None and "per_request" not in t.to_json()
    assert store.trials(rid, with_requests=True)[0].per_request == {"ttft_s": [0.1]}


def test_promotion_retires_previous_active(db_url: str) -> None:
    store = Store.open(db_url)
    _, rid = make_run(store)
    common = dict(workload="code", speculative_config={"method": "dspark",
                                                       "num_speculative_tokens": 3},
                  serve={"model": "m"}, objective="goodput", run_id=rid, trial_id=None,
                  backend="sim", provenance={"policy": {"name": "p"}}, baseline_value=1.0)
    store.add_recommendation(config=config(3), value=2.0, promote=True,
                             reason="first", **common)
    store.add_recommendation(config=config(4), value=1.5, promote=False,
                             reason="worse", **common)
    active = store.active_recommendation("code")
    assert active is not None and active.value == 2.0
    store.add_recommendation(config=config(5), value=3.0, promote=True,
                             reason="better", **common)
    hist = store.recommendations("code", history=True)
    assert [r.status for r in hist] == ["active", "candidate", "retired"]
    assert hist[0].speedup_vs_baseline == 3.0 and hist[2].retired_at is not None
    assert [r.value for r in store.recommendations()] == [3.0]


def test_unreachable_database_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not usable"):
        Store.open("postgresql+psycopg://nobody@127.0.0.1:1/none")
    bad = tmp_path / "not-a-db.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not usable"):
        Store.open(f"sqlite:///{bad}")
    with pytest.raises(StoreError, match="invalid database URL"):
        Store.open("::nonsense::")


JSON_KEYS = ("workload", "status", "config", "speculative_config", "objective", "value",
               "value_ci", "baseline_value", "speedup_vs_baseline", "run", "backend", "traffic",
               "policy", "created_at", "model", "draft_model", "vllm_version", "hardware",
               "acceptance", "retired_at", "reason")


def _rec(store: Store, rid: str, k: int, value: float, **kw: Any) -> dict[str, Any]:
    """Add a recommendation and return it in its JSON form (the CLI's contract)."""
    args: dict[str, Any] = dict(
        workload="code", config=config(k),
        speculative_config={"method": "dspark", "num_speculative_tokens": k},
        serve={"model": "m"}, objective="goodput", value=value, baseline_value=1.0,
        run_id=rid, trial_id=None, backend="sim",
        provenance={"model": "m", "draft_model": "d", "vllm_version": None, "hardware": "H",
                    "traffic": {"sha256": "s" * 64, "size_bytes": 10},
                    "policy": {"name": "p", "sha256": "h"},
                    "acceptance": {"predicted_per_position": [0.8],
                                   "measured_per_position": [0.7]}},
        promote=True, reason="r")
    args.update(kw)
    return store.add_recommendation(**args).to_json()


def test_lineage_and_significance_are_kept(db_url: str) -> None:
    store = Store.open(db_url)
    _, rid = make_run(store)
    first = _rec(store, rid, 3, 2.0, value_ci=(1.8, 2.2))
    second = _rec(store, rid, 5, 2.6, gain=0.3, gain_ci=(0.1, 0.5), compared_with=first["id"],
                  check_active=True)
    assert second["status"] == "active" and second["promoted_at"] is not None
    assert second["gain_ci"] == [0.1, 0.5] and second["compared_with"] == first["id"]
    old = store.recommendation(first["id"]).to_json()
    assert old["status"] == "retired" and old["retired_by"] == second["id"]
    assert old["value_ci"] == [1.8, 2.2]
    for key in JSON_KEYS:
        assert key in second, key
    assert second["acceptance"]["measured_per_position"] == [0.7]
    assert second["traffic"]["size_bytes"] == 10 and second["policy"]["sha256"] == "h"


def test_promotion_checks_the_active_one_did_not_change(db_url: str) -> None:
    store = Store.open(db_url)
    _, rid = make_run(store)
    first = _rec(store, rid, 3, 2.0)
    _rec(store, rid, 4, 2.5, compared_with=first["id"], check_active=True)  # now active
    late = _rec(store, rid, 5, 3.0, compared_with=first["id"], check_active=True)
    assert late["status"] == "candidate"
    assert "changed to" in late["reason"] and f"compared with #{first['id']}" in late["reason"]
    assert [r.trial_config.num_speculative_tokens for r in store.recommendations()] == [4]


def test_one_active_per_workload_is_enforced_by_the_database(db_url: str) -> None:
    from autotune.store.models import RecommendationRow

    store = Store.open(db_url)
    _, rid = make_run(store)
    _rec(store, rid, 3, 2.0)
    with pytest.raises(StoreError, match="refused"), store.session() as s:
        s.add(RecommendationRow(workload="code", status="active", config={}, serve={},
                                objective="goodput", value=1.0, run_id=rid, backend="sim",
                                provenance={}))


def test_non_finite_numbers_are_stored_as_null(db_url: str) -> None:
    store = Store.open(db_url)
    _, rid = make_run(store)
    store.record_trial(run_id=rid, workload="code", number=0, state="complete",
                       params={"n": 1}, value=1.0, metrics={"ttft_p99_ms": math.nan},
                       per_request={"tpot_s": [0.01, math.nan, math.inf]})
    (t,) = store.trials(rid, with_requests=True)
    assert t.metrics == {"ttft_p99_ms": None}
    assert t.per_request == {"tpot_s": [0.01, None, None]}
    assert store.trial(t.id) == t


def test_optuna_studies_share_the_database(db_url: str) -> None:
    import optuna

    store = Store.open(db_url)
    _, rid = make_run(store)
    store.record_trial(run_id=rid, workload="code", number=0, state="complete", params={})
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=f"{rid}:code", storage=store.optuna_url,
                                direction="maximize")
    study.optimize(lambda t: -abs(t.suggest_int("k", 1, 7) - 4), n_trials=4)
    assert len(study.trials) == 4
    assert len(store.trials(rid)) == 1  # autotune's trials are its own table
    names = optuna.get_all_study_names(storage=store.optuna_url)
    assert f"{rid}:code" in names
