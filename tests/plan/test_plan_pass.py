"""A pass on the simulator stores its plan with the run (the arrival times, the mixed sample's
readings at capacity, the plan), and `autotune plan --run` makes it again from the database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from autotune.cli import cli
from autotune.policy import DEFAULT_POLICY_PATH
from autotune.store import Store

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "small.jsonl"
REPLAYED = 30  # replay.max_requests of the quick policy


def run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """One quick pass over examples/small.jsonl: (database URL, run id)."""
    tmp = tmp_path_factory.mktemp("plan")
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    data["budget"]["trials"] = 2
    data["replay"]["max_requests"] = REPLAYED
    data["replay"]["warmup_requests"] = 4
    policy = tmp / "quick.yaml"
    policy.write_text(yaml.safe_dump(data))
    db = f"sqlite:///{tmp / 'autotune.db'}"
    code, out, err = run("start", "--traffic", SAMPLE, "--policy", policy, "--db", db,
                         "--once", "--export-dir", tmp / "exports")
    assert code == 0, err
    assert "plan: " in out
    store = Store.open(db)
    try:
        return db, store.runs()[0].id
    finally:
        store.close()


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
        # every workload's replayed requests together, the warm-up left out
        assert metrics["requests"] == sum(len(v) for v in arrivals.values()) - 4
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
