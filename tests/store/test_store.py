from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import StoreError
from autotune.store import Store


def make_run(store: Store, sha: str = "s" * 64) -> tuple[int, str]:
    sid = store.record_sample(path="x.jsonl", sha256=sha, size_bytes=10, requests=3,
                              skipped_lines=0, workloads={"code": {"requests": 3}})
    rid = store.create_run(backend="sim", policy_name="p", policy_sha256="h", policy={"a": 1},
                           sample_id=sid, seed=1)
    return sid, rid


def test_sample_recorded_once_per_hash(db_url: str) -> None:
    store = Store.open(db_url)
    a = store.record_sample(path="a", sha256="1" * 64, size_bytes=1, requests=1,
                            skipped_lines=0, workloads={"w": {"requests": 1}})
    b = store.record_sample(path="b", sha256="1" * 64, size_bytes=1, requests=1,
                            skipped_lines=0, workloads={"w": {"requests": 1}})
    assert a == b
    assert store.sample(a)["workloads"] == {"w": {"requests": 1}}


def test_run_lifecycle_and_resume_lookup(db_url: str) -> None:
    store = Store.open(db_url)
    sid, rid = make_run(store)
    assert store.resumable_run(backend="sim", policy_sha256="h", sample_id=sid, seed=1) == rid
    assert store.resumable_run(backend="sim", policy_sha256="h", sample_id=sid, seed=2) is None
    store.set_run_status(rid, "interrupted")
    assert store.resumable_run(backend="sim", policy_sha256="h", sample_id=sid, seed=1) == rid
    store.set_run_status(rid, "finished")
    assert store.resumable_run(backend="sim", policy_sha256="h", sample_id=sid, seed=1) is None
    (row,) = store.runs()
    assert row["status"] == "finished" and row["finished_at"] is not None
    assert row["traffic"] == {"path": "x.jsonl", "sha256": "s" * 64, "requests": 3}
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
    assert t["state"] == "complete" and t["value"] == 2.5 and t["metrics"] == {"goodput": 2.5}
    assert "per_request" not in t
    assert store.trials(rid, with_requests=True)[0]["per_request"] == {"ttft_s": [0.1]}


def test_promotion_retires_previous_active(db_url: str) -> None:
    store = Store.open(db_url)
    _, rid = make_run(store)
    common = dict(workload="code", speculative_config={"method": "dspark",
                                                       "num_speculative_tokens": 3},
                  serve={"model": "m"}, objective="goodput", run_id=rid, trial_id=None,
                  backend="sim", provenance={"policy": {"name": "p"}}, baseline_value=1.0)
    store.add_recommendation(config={"num_speculative_tokens": 3}, value=2.0, promote=True,
                             reason="first", **common)
    store.add_recommendation(config={"num_speculative_tokens": 4}, value=1.5, promote=False,
                             reason="worse", **common)
    assert store.active_recommendation("code")["value"] == 2.0  # type: ignore[index]
    store.add_recommendation(config={"num_speculative_tokens": 5}, value=3.0, promote=True,
                             reason="better", **common)
    hist = store.recommendations("code", history=True)
    assert [r["status"] for r in hist] == ["active", "candidate", "retired"]
    assert hist[0]["speedup_vs_baseline"] == 3.0 and hist[2]["retired_at"] is not None
    assert [r["value"] for r in store.recommendations()] == [3.0]


def test_unreachable_database_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not usable"):
        Store.open("postgresql+psycopg://nobody@127.0.0.1:1/none")
    bad = tmp_path / "not-a-db.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not usable"):
        Store.open(f"sqlite:///{bad}")
    with pytest.raises(StoreError, match="invalid database URL"):
        Store.open("::nonsense::")
