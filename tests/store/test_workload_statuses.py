"""``Store.workload_statuses``: each workload's newest result, on SQLite and PostgreSQL.

Runs are written as a pass writes them (trials, then a recommendation or none, then the run's
status); the statuses must follow the newest run that concluded something for each workload.
"""

from __future__ import annotations

from autotune.store import Store
from autotune.types import TrialConfig

CONFIG = TrialConfig(3, False, 8, 2048)


def _run(store: Store, sample_id: int, seed: int) -> str:
    return store.create_run(backend="sim", policy_name="p", policy_sha256="h", policy={},
                            sample_id=sample_id, seed=seed)


def _trials(store: Store, run: str, workload: str, *states: str) -> None:
    for n, state in enumerate(states):
        store.record_trial(run_id=run, workload=workload, number=n, state=state,
                           params=CONFIG.as_dict(), value=1.0 if state == "complete" else None,
                           error="boom" if state == "failed" else None)


def _recommend(store: Store, run: str, workload: str, **kw: object) -> int:
    args: dict[str, object] = dict(
        workload=workload, config=CONFIG, speculative_config=None, serve={},
        objective="goodput", value=1.0, baseline_value=None, run_id=run, trial_id=None,
        backend="sim", provenance={}, promote=False, reason=f"why {workload}")
    args.update(kw)
    return store.add_recommendation(**args).id  # type: ignore[arg-type]


def test_each_workload_shows_its_newest_result(db_url: str) -> None:
    store = Store.open(db_url)
    sid = store.record_sample(path="x", sha256="s" * 64, size_bytes=1, requests=1,
                              skipped_lines=0, workloads={})
    first = _run(store, sid, 1)
    for w in ("active", "infeasible", "later-failed", "candidate"):
        _trials(store, first, w, "complete", "failed")
    kept = _recommend(store, first, "active", promote=True)
    _recommend(store, first, "infeasible", infeasible=True)
    _recommend(store, first, "later-failed")
    cand = _recommend(store, first, "candidate")
    store.set_run_status(first, "finished")

    second = _run(store, sid, 2)  # every trial failed: nothing recommended
    for w in ("active", "later-failed"):
        _trials(store, second, w, "failed", "failed")
    store.set_run_status(second, "finished")
    third = _run(store, sid, 3)  # the run itself failed
    _trials(store, third, "run-failed", "failed")
    store.set_run_status(third, "failed", "BackendError: no GPU")
    fourth = _run(store, sid, 4)  # still running, then interrupted: no result yet
    _trials(store, fourth, "candidate", "failed")
    store.set_run_status(fourth, "interrupted", "stopped")

    got = {s.workload: s for s in store.workload_statuses()}
    assert list(got) == sorted(got)
    assert {k: s.status for k, s in got.items()} == {
        "active": "active", "candidate": "candidate", "infeasible": "infeasible",
        "later-failed": "failed", "run-failed": "failed"}
    active = got["active"].recommendation
    assert active is not None and active.id == kept  # a later failed run does not hide it
    assert got["candidate"].recommendation is not None and got["candidate"].run == first
    assert got["candidate"].recommendation.id == cand
    assert got["infeasible"].reason == "why infeasible"
    failed = got["later-failed"]
    assert failed.recommendation is None and failed.run == second
    assert failed.reason == (f"every trial failed (2); see `autotune trials --run {second} "
                             "--workload later-failed`")
    assert failed.to_json() == {"id": None, "workload": "later-failed", "status": "failed",
                                "reason": failed.reason, "run": second,
                                "created_at": failed.to_json()["created_at"]}
    assert failed.to_json()["created_at"] is not None
    assert got["run-failed"].reason.startswith("the run failed: BackendError: no GPU; see ")
    assert [s.workload for s in store.workload_statuses("infeasible")] == ["infeasible"]

    # a newer recommendation after a failed run is the newest result again
    fifth = _run(store, sid, 5)
    _trials(store, fifth, "later-failed", "complete")
    _recommend(store, fifth, "later-failed", infeasible=True)
    store.set_run_status(fifth, "finished")
    (again,) = store.workload_statuses("later-failed")
    assert (again.status, again.run) == ("infeasible", fifth)
    store.close()
