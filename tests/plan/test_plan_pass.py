"""A pass on the simulator stores its plan with the run (the arrival times, the mixed sample's
readings at capacity, the plan), and `autotune plan --run` makes it again from the database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from plan_run import REPLAYED, SAMPLE, quick_pass, run, stored_plan

from autotune.policy import DEFAULT_POLICY_PATH
from autotune.store import Store


def test_the_pass_stores_the_mixed_readings_and_the_plan(tuned: tuple[str, str]) -> None:
    db, run_id = tuned
    store = Store.open(db)
    try:
        stored = store.plan(run_id)
        recs = store.recommendations(run_id=run_id)
    finally:
        store.close()
    assert stored is not None and stored.plan is not None
    arrivals = stored.inputs["arrivals"]
    assert set(arrivals) == {r.workload for r in recs}
    counts: dict[str, int] = {}
    for line in SAMPLE.read_text().splitlines():
        name = json.loads(line)["workload"]
        counts[name] = counts.get(name, 0) + 1
    assert {k: len(v) for k, v in arrivals.items()} == {k: min(n, REPLAYED)
                                                         for k, n in counts.items()}
    # one reading of the mixed sample per distinct recommended config, each at capacity
    assert len(stored.shared) == len({json.dumps(dict(r.config), sort_keys=True) for r in recs})
    for reading in stored.shared:
        assert reading["error"] is None
        metrics = reading["metrics"]
        assert metrics["load_scale"] > 0 and "capacity_met_slo" in metrics
        # the mixed sample: more requests than any workload alone holds (a reading's window
        # may hold fewer than all of them)
        replayed = [v for k, v in metrics.items() if k.startswith("replay")
                    and k.endswith("_requests")]
        assert max(replayed) > max(len(v) for v in arrivals.values())
        assert max(replayed) <= sum(len(v) for v in arrivals.values())
    plan = stored.plan
    assert plan["run"] == run_id and plan["split_or_shared"] is not None
    assert [t["growth"] for t in plan["totals"]] == [1.0, 2.0, 4.0]


def test_plan_run_makes_the_stored_plan_again_without_measuring(tuned: tuple[str, str]) -> None:
    db, run_id = tuned
    store = Store.open(db)
    try:
        trials_before = len(store.trials())
        stored = store.plan(run_id)
    finally:
        store.close()
    code, out, err = run("plan", "--run", run_id, "--db", db, "--format", "json")
    assert code == 0, err
    assert stored is not None and json.loads(out) == json.loads(json.dumps(stored.plan))
    store = Store.open(db)
    try:
        assert len(store.trials()) == trials_before
    finally:
        store.close()
    code, out, _ = run("plan", "--run", run_id, "--db", db, "--growth", "1,3")
    assert code == 0 and "traffic × 3" in out and "GPUs saved" in out
    assert "split or shared at × 3" in out


@pytest.mark.parametrize(("args", "flag"), [(("--growth", "1,0"), "--growth"),
                                            (("--growth", "two"), "--growth"),
                                            (("--headroom", "-0.2"), "--headroom"),
                                            (("--peak-window", "2h"), "--peak-window")])
def test_bad_plan_settings_name_the_flag_and_print_nothing(tuned: tuple[str, str],
                                                           args: tuple[str, str],
                                                           flag: str) -> None:
    db, run_id = tuned
    code, out, err = run("plan", "--run", run_id, "--db", db, *args)
    assert code == 2 and flag in err and out == ""


def test_the_mixed_readings_are_charged_to_the_pass(tuned: tuple[str, str]) -> None:
    db, run_id = tuned
    store = Store.open(db)
    try:
        stored = store.plan(run_id)
        options = store.run(run_id).options
        trials = store.trials(run_id)
    finally:
        store.close()
    assert stored is not None and stored.shared
    for reading in stored.shared:
        assert reading["metrics"]["cost_replica_h"] > 0
    cost = options["cost"]["workloads"]
    assert set(cost) == {t.workload for t in trials} | {"(mixed)"}


def test_a_policy_peak_window_longer_than_the_sample_stops_start_before_writing(
        tmp_path: Path) -> None:
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    data["plan"] = {"peak_window": "1h"}  # small.jsonl spans 14 s
    policy = tmp_path / "long-window.yaml"
    policy.write_text(yaml.safe_dump(data))
    db = tmp_path / "autotune.db"
    code, out, err = run("start", "--traffic", SAMPLE, "--policy", policy,
                         "--db", f"sqlite:///{db}", "--once", "--export-dir", tmp_path / "ex")
    assert code == 2 and "plan.peak_window 1h is longer than the sample" in err
    assert "Traceback" not in err and out == "" and not db.exists()
    assert not (tmp_path / "ex").exists()


@pytest.mark.slow
def test_a_pass_the_budget_ended_says_why_split_or_shared_was_not_measured(
        tmp_path: Path) -> None:
    # 3 GPU-hours are spent by the three baselines (a server start of 8 GPUs is 1.07 GPU-h):
    # the budget ends the pass with no room left for its last stage, the mixed sample
    db, run_id = quick_pass(tmp_path, budget={"gpu_hours": 3})
    plan = stored_plan(db, run_id)
    assert plan.shared is None and "budget.gpu_hours (3)" in plan.shared_note
    store = Store.open(db)
    try:
        cost = store.run(run_id).options["cost"]
    finally:
        store.close()
    assert "(mixed)" not in cost["workloads"]  # a reading not made is no uncounted cost
    assert cost["total"]["uncounted_trials"] == 0
    assert plan.shared_note.startswith("the mixed sample was not read on ")
    assert plan.as_dict()["split_or_shared_note"] == plan.shared_note
    code, out, _ = run("plan", "--run", run_id, "--db", db)
    assert code == 0 and "split or shared: not measured: the mixed sample was not read" in out


@pytest.mark.slow
def test_the_searches_leave_room_in_the_budget_for_the_mixed_readings(tmp_path: Path) -> None:
    # 10 GPU-hours: the searches (6 trials each) would spend it all; they stop where the mixed
    # sample's readings, one per workload's best config, still fit, and those are read
    db, run_id = quick_pass(tmp_path, budget={"trials": 6, "gpu_hours": 10})
    store = Store.open(db)
    try:
        options = store.run(run_id).options
        stored = store.plan(run_id)
    finally:
        store.close()
    assert "kept for the 3 readings of the mixed sample" in options["budget_stop"]
    assert stored is not None and stored.shared and not any(r["error"] for r in stored.shared)
    assert options["cost"]["total"]["gpu_h"] <= 10.0
    plan = stored_plan(db, run_id)
    assert plan.shared is not None
