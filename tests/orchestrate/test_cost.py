"""Cost as a measured quantity: a trial's server start and replica time, servers shared by the
trials of one config, and the budget a pass is held to (GPU-hours, replica time)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from autotune.backends import create_backend
from autotune.backends.sim import generate_requests, load_profile
from autotune.cli import cli
from autotune.cost import GPU_H, REPLAY, SOURCE, START, CostTotal, TrialCost, pass_cost, trial_cost
from autotune.errors import BackendError
from autotune.orchestrate import TuneOptions, tune
from autotune.orchestrate.budget import Ledger
from autotune.orchestrate.pool import SerialPool, run_trial
from autotune.orchestrate.servers import REUSED, Servers
from autotune.orchestrate.trials import open_ledger
from autotune.plan import MIXED
from autotune.policy import DEFAULT_POLICY_PATH, load_policy, policy_from_mapping
from autotune.store import Store
from autotune.types import ReplaySchedule, TrialConfig

A = TrialConfig(3, False, 32, 4096)
B = TrialConfig(5, True, 64, 8192)


def _backend():  # type: ignore[no-untyped-def]
    policy = load_policy()
    return create_backend("sim", policy.serve.spec(), policy.sim.model_dump(), 0)


def _requests(n: int = 24, workload: str = "chat") -> list:  # type: ignore[type-arg]
    return list(generate_requests(n, workload=workload, seed=3, rate=2.0))


# ------------------------------------------------------------------------- the trial's cost
def test_a_trial_cost_reads_back_from_its_metrics() -> None:
    cost = TrialCost(start_s=300.0, replay_s=900.0, gpus=8)
    assert cost.replica_h == pytest.approx(1200 / 3600)
    assert cost.gpu_h == pytest.approx(8 * 1200 / 3600)
    back = trial_cost({**cost.metrics(), SOURCE: "x"})
    assert back == cost
    assert trial_cost({}) is None  # a trial stored before cost was recorded
    assert trial_cost({START: float("nan"), REPLAY: 1.0}) is None


def test_a_pass_cost_counts_starts_workloads_and_unknown_trials() -> None:
    fresh = TrialCost(480.0, 100.0, 8).metrics()
    reused = TrialCost(0.0, 50.0, 8).metrics()
    cost = pass_cost([("chat", {**fresh, SOURCE: "profile"}), ("code", {**reused, SOURCE: REUSED}),
                      ("code", {})])
    total = CostTotal.from_json(cost["total"])
    assert (total.trials, total.uncounted, total.starts) == (2, 1, 1)
    assert total.gpu_h == pytest.approx(fresh[GPU_H] + reused[GPU_H], rel=1e-3)
    assert cost["start_sources"] == ["profile"]  # a reused server charged no start
    assert set(cost["workloads"]) == {"chat", "code"}


# ------------------------------------------------------------------------- shared servers
def test_a_server_serves_the_next_trial_of_its_config_and_is_charged_once() -> None:
    backend = _backend()
    profile = load_profile(load_policy().sim.profile)
    assert profile.start is not None and profile.start.seconds > 0
    servers = Servers(backend)
    first, charged = servers.acquire(A)
    assert charged == profile.start.seconds
    assert profile.start.source in (servers.last_source or "")
    servers.release()
    again, charged = servers.acquire(A)
    assert again is first and charged == 0.0 and servers.last_source == REUSED
    servers.release()
    other, charged = servers.acquire(B)  # another config: the first server stops
    assert other is not first and charged == profile.start.seconds
    with pytest.raises(BackendError):
        first.replay(ReplaySchedule(_requests()))
    servers.close()
    assert servers.serving is None


def test_without_reuse_every_trial_starts_its_own_server() -> None:
    servers = Servers(_backend(), reuse=False)
    first, _ = servers.acquire(A)
    servers.release()
    assert servers.serving is None
    second, charged = servers.acquire(A)
    assert second is not first and charged > 0
    servers.close()


def test_a_trial_is_charged_its_start_and_every_reading() -> None:
    policy = load_policy()
    servers = Servers(_backend())
    schedule = policy.replay.schedule(_requests(), seed=1, slo=policy.objective.slo.slo())
    m = run_trial(servers, A, schedule)
    readings = int(m.extra["capacity_replays"])
    assert readings >= 2
    start = load_profile(policy.sim.profile).start
    assert start is not None and m.extra[START] == start.seconds
    # the replica time of several readings, each at least its measured window
    assert m.extra[REPLAY] > m.busy_s
    again = run_trial(servers, A, schedule)
    assert again.extra[START] == 0.0 and servers.last_source == REUSED
    servers.close()


def test_a_replay_that_fails_stops_its_server() -> None:
    servers = Servers(_backend())
    bad = ReplaySchedule(_requests(), time_scale=0.0)  # the sim refuses it mid-trial
    with pytest.raises(Exception, match="time_scale"):
        run_trial(servers, A, bad)
    assert servers.serving is None


# ------------------------------------------------------------------------- the ledger
class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_ledger_refuses_a_trial_once_gpu_hours_are_spent_or_would_be() -> None:
    ledger = Ledger(gpu_hours=10.0, wall_clock_s=1e9, replicas=1, gpus=8, clock=Clock())
    assert ledger.refusal("chat") is None  # nothing to predict from yet
    trial = TrialCost(start_s=0.0, replay_s=1800.0, gpus=8)  # 4 GPU-h
    ledger.charge("chat", "r0", trial)
    assert ledger.refusal("chat") is None  # 4 spent + 4 predicted <= 10
    why = ledger.refusal("chat", in_flight=["chat"])  # + 4 in flight > 10
    assert why is not None and "budget.gpu_hours" in why and "overrun" in why
    ledger.charge("chat", "r0", trial)
    ledger.charge("chat", "r0", trial)
    why = ledger.refusal("code")
    assert why is not None and "budget.gpu_hours (10) spent" in why


def test_the_wall_clock_is_replica_time_on_every_replica() -> None:
    clock = Clock()
    one = Ledger(gpu_hours=None, wall_clock_s=3600.0, replicas=1, gpus=8, wall_clock="1h",
                 clock=clock)
    one.charge("chat", "r0", TrialCost(480.0, 1520.0, 8))  # 2000 s of replica time
    assert one.elapsed_s() == 2000.0  # although no real time passed
    why = one.refusal("chat")  # 2000 + 2000 > 3600
    assert why is not None and "budget.wall_clock (1h)" in why
    two = Ledger(gpu_hours=None, wall_clock_s=3600.0, replicas=2, gpus=8, clock=clock)
    two.charge("chat", "r0", TrialCost(480.0, 1520.0, 8))
    assert two.refusal("chat") is None  # the other replica is free at 0
    clock.now = 4000.0  # real time counts when it is more
    assert two.refusal("chat") is not None


# ------------------------------------------------------------------------- a whole pass
def _sample(tmp_path: Path) -> Path:
    path = tmp_path / "s.jsonl"
    lines = []
    for name in ("chat", "code"):
        for r in generate_requests(30, workload=name, seed=5, rate=3.0):
            lines.append({"id": r.id, "arrival_s": r.arrival_s, "workload": name,
                          "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
                          "acceptance": list(r.acceptance or ())})
    path.write_text("".join(json.dumps(d) + "\n" for d in lines))
    return path


def _policy(**budget: object):  # type: ignore[no-untyped-def]
    """The default policy, cheap to run: one reading per trial (the capacity reading's cost is
    tested above), short replays, the random strategy (what it picks does not matter here)."""
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    data["budget"].update(budget)
    data["replay"].update(max_requests=30, warmup_requests=4, find_capacity=False)
    data["search"] = {"strategy": "random"}
    return policy_from_mapping(data)


def test_a_pass_shares_the_baseline_start_and_records_its_cost(
        tmp_path: Path, db_url: str) -> None:
    store = Store.open(db_url)
    options = TuneOptions(traffic=_sample(tmp_path), policy=_policy(trials=2),
                          export_dir=tmp_path / "exp")
    result = tune(options, store, pool_factory=lambda b, rep: SerialPool(b))
    assert result.budget_stop is None
    trials = store.trials(result.run_id)
    costs = [trial_cost(t.metrics) for t in trials]
    assert all(c is not None for c in costs)
    baselines = [t for t in trials if t.baseline]
    # both workloads read the baseline config one after the other: one start serves both
    assert sorted(t.metrics[START] > 0 for t in baselines) == [False, True]
    assert any(t.metrics[SOURCE] == REUSED for t in baselines)
    run = store.run(result.run_id)
    assert run.cost is not None and run.budget_stop is None
    whole = CostTotal.from_json(run.cost["total"])
    assert whole.trials == len(trials) and whole.starts < len(trials)
    assert whole.gpu_h == pytest.approx(sum(c.gpu_h for c in costs if c), rel=1e-3)
    assert run.to_json()["cost"]["gpus_per_replica"] == 8

    # runs, trials --format json and the report show it
    out = CliRunner().invoke(cli, ["runs", "--db", db_url, "--format", "json"]).stdout
    (row,) = json.loads(out)
    assert row["run"] == result.run_id
    assert row["cost"]["total"]["gpu_h"] == pytest.approx(result.cost["total"]["gpu_h"])
    table = CliRunner().invoke(cli, ["runs", "--db", db_url]).stdout
    assert "GPU-h" in table
    rows = json.loads(CliRunner().invoke(
        cli, ["trials", "--db", db_url, "--format", "json"]).stdout)
    assert all(GPU_H in t["metrics"] for t in rows)
    from autotune.report import load_report_data
    from autotune.report.page import _cost

    data = load_report_data(store, result.run_id)
    assert data.cost().gpu_h == pytest.approx(result.cost["total"]["gpu_h"], rel=1e-3)
    section = _cost(data)
    assert "Cost on real replicas" in section and "Simulated" in section


def test_a_budget_spent_mid_pass_ends_it_with_the_results_so_far(
        tmp_path: Path, db_url: str) -> None:
    store = Store.open(db_url)
    # a trial here costs its server start (the profile's 480 s on 8 GPUs: about 1.1 GPU-h)
    # and a short reading: 3 GPU-h hold a few of the 2 x 12 trials the trial budget allows
    options = TuneOptions(traffic=_sample(tmp_path), policy=_policy(trials=12, gpu_hours=3),
                          export_dir=tmp_path / "exp")
    result = tune(options, store, pool_factory=lambda b, rep: SerialPool(b))
    assert result.budget_stop is not None and "budget.gpu_hours (3)" in result.budget_stop
    trials = store.trials(result.run_id)
    assert 2 <= len(trials) < 24
    costs = [c for c in (trial_cost(t.metrics) for t in trials) if c]
    spent = sum(c.gpu_h for c in costs)
    assert spent - max(c.gpu_h for c in costs) < 3.0  # no trial started once it was spent
    run = store.run(result.run_id)
    assert run.status == "finished" and run.budget_stop == result.budget_stop
    for w in result.workloads:  # each workload: its results so far, and why it stopped
        assert w.recommendation is not None
        assert w.stop_reason


@pytest.mark.parametrize("value", ["0", "-2"])
def test_a_budget_of_zero_or_below_is_an_error_naming_the_key(
        tmp_path: Path, value: str) -> None:
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    data["budget"]["gpu_hours"] = float(value)
    policy = tmp_path / "p.yaml"
    policy.write_text(yaml.safe_dump(data))
    db = tmp_path / "never.db"
    result = CliRunner().invoke(cli, ["start", "--traffic", str(_sample(tmp_path)), "--once",
                                      "--policy", str(policy), "--db", f"sqlite:///{db}"])
    assert result.exit_code != 0
    assert "budget.gpu_hours" in result.stderr and "greater than 0" in result.stderr
    assert "Traceback" not in result.stderr
    assert not db.exists()  # nothing written


def test_the_pass_output_says_what_it_cost_and_why_the_budget_ended_it() -> None:
    from autotune.ui.pass_report import cost_notes

    cost = pass_cost([("chat", {**TrialCost(480.0, 300.0, 8).metrics(), SOURCE: "profile"}),
                      ("code", {**TrialCost(0.0, 120.0, 8).metrics(), SOURCE: REUSED})])
    cost.update(backend="sim", gpus_per_replica=8)
    lines = cost_notes(cost, "budget.gpu_hours (3) would be overrun")
    assert lines[0].startswith("cost: ") and "2 trials, 1 server start" in lines[0]
    assert "chat 1.73" in lines[0] and "code 0.267" in lines[0]  # (480+300)/3600x8, 120/3600x8
    assert "simulated" in lines[0] and "8 GPUs" in lines[0]
    assert lines[1].startswith("budget: the pass ended early") and "budget.gpu_hours" in lines[1]
    assert cost_notes({}) == []


def test_the_ledger_keeps_room_for_the_readings_after_the_searches() -> None:
    ledger = Ledger(gpu_hours=14.0, wall_clock_s=1e9, replicas=1, gpus=8, clock=Clock(),
                    kept_readings=2)
    assert ledger.kept() is None and ledger.refusal("chat") is None  # nothing to predict from
    trial = TrialCost(start_s=0.0, replay_s=1800.0, gpus=8)  # 4 GPU-h
    ledger.charge("chat", "r0", trial)
    kept = ledger.kept()
    assert kept is not None and kept.gpu_h == 8.0  # two readings of the pass's mean trial
    # 4 spent + 8 kept + 4 predicted > 14: the search stops where the readings still fit
    why = ledger.refusal("chat")
    assert why is not None and "8 GPU-h kept for the 2 readings of the mixed sample" in why
    # the searches are over: the room is released and each reading asks for itself, first
    # at the pass's mean trial, then at the mixed readings' own mean
    ledger.kept_readings = 0
    assert ledger.refusal(MIXED) is None
    ledger.charge(MIXED, "r0", TrialCost(start_s=0.0, replay_s=3150.0, gpus=8))  # 7 GPU-h
    why = ledger.refusal(MIXED)  # 11 spent + 7 predicted > 14
    assert why is not None and "would be overrun" in why and "costs about 7 GPU-h" in why
    plain = Ledger(gpu_hours=14.0, wall_clock_s=1e9, replicas=1, gpus=8, clock=Clock())
    plain.charge("chat", "r0", trial)
    assert plain.refusal("chat") is None and plain.kept() is None


def test_a_resumed_pass_is_charged_what_it_read_before(tmp_path: Path, db_url: str) -> None:
    # a trial and a mixed-sample reading made before the stop count; a mixed config the
    # budget left unread does not
    store = Store.open(db_url)
    try:
        sid = store.record_sample(path="s.jsonl", sha256="s" * 64, size_bytes=10, requests=3,
                                  skipped_lines=0, workloads={"chat": {"requests": 3}})
        rid = store.create_run(backend="sim", policy_name="p", policy_sha256="h", policy={},
                               sample_id=sid, seed=0)
        trial, reading = TrialCost(480.0, 300.0, 8), TrialCost(480.0, 600.0, 8)
        store.record_trial(run_id=rid, workload="chat", number=0, state="complete",
                           params=TrialConfig(7, False, 8, 2048).as_dict(), replica="r0",
                           metrics=trial.metrics())
        store.save_plan(rid, shared=[
            {"config": TrialConfig(7, False, 8, 2048).as_dict(), "metrics": reading.metrics(),
             "error": None, "replica": "r0"},
            {"config": TrialConfig(3, False, 8, 2048).as_dict(), "metrics": {}, "error": None,
             "not_read": "the mixed sample was not read on n=3: budget spent"}])
        options = TuneOptions(traffic=_sample(tmp_path), policy=_policy(trials=2),
                              export_dir=tmp_path / "exp")
        ledger = open_ledger(options, store, rid, replicas=1)
    finally:
        store.close()
    assert ledger.spent.trials == 2 and ledger.spent.uncounted == 0
    assert ledger.spent.gpu_h == pytest.approx(trial.gpu_h + reading.gpu_h)
    predicted = ledger.predicted(MIXED)
    assert predicted is not None and predicted.replay_s == pytest.approx(600.0)
