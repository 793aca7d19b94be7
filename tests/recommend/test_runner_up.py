"""A recommendation says when its lead over the runner-up is inside the measured noise."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from autotune.cli import cli
from autotune.objective import Outcome
from autotune.orchestrate import TuneOptions, tune
from autotune.policy import DEFAULT_POLICY_PATH, load_policy
from autotune.recommend import Scored, select_best
from autotune.recommend.runner_up import reading_spread, runner_up_race
from autotune.recommend.significance import Comparison, RequestRates, compare_rates
from autotune.store import Store
from autotune.types import TrialConfig

A = TrialConfig(1, False, 16, 8192)
B = TrialConfig(3, False, 16, 8192)
C = TrialConfig(3, False, 4, 8192)


def trial(number: int, config: TrialConfig, value: float, feasible: bool = True) -> Scored:
    constraints = {"itl_p99_ms": -5.0 if feasible else 5.0}
    return Scored(number, config, Outcome(value, constraints, {}), trial_id=number)


def no_requests(a: int, b: int) -> Comparison | None:
    return None


def test_a_lead_smaller_than_the_repeats_spread_is_a_close_race() -> None:
    # the eps002 shape: A read 76.6 and 70.1, B 72.7 and 67.7 -> A leads by ~4% on the means,
    # while one config's readings differ by ~8%
    trials = [trial(0, A, 76.6), trial(1, B, 72.7), trial(2, A, 70.1), trial(3, B, 67.7)]
    race = runner_up_race(trials, trial(2, A, (76.6 + 70.1) / 2), None, 1.0, no_requests)
    assert race is not None and race.runner_up == B
    assert race.lead == pytest.approx(73.35 / 70.2 - 1)
    assert race.readings == (2, 2) and race.repeated_configs == 2
    assert race.source == "repeated readings"
    assert race.low is not None and race.high is not None
    assert race.low < 0 < race.lead < race.high
    assert race.close and "a close race" in race.describe()
    assert race.as_dict()["close_race"] is True


def test_a_lead_well_beyond_the_repeats_spread_is_not() -> None:
    trials = [trial(0, C, 100.0), trial(1, C, 101.0), trial(2, A, 130.0), trial(3, B, 99.0)]
    race = runner_up_race(trials, trial(2, A, 130.0), None, 1.0, no_requests)
    assert race is not None and race.runner_up == C  # mean 100.5 beats B's 99
    assert race.low is not None and race.low > 0
    assert not race.close and "close race" not in race.describe()


def test_the_spread_is_pooled_over_repeated_configs() -> None:
    trials = [trial(0, A, 100.0), trial(1, A, 110.0), trial(2, B, 50.0), trial(3, B, 50.0),
              trial(4, C, 70.0)]
    sd, configs = reading_spread(trials)
    a = np.log([100.0, 110.0])
    assert configs == 2
    # B's two identical readings add a degree of freedom and no spread
    assert sd == pytest.approx(math.sqrt(((a - a.mean()) ** 2).sum() / 2))
    assert reading_spread([trial(0, A, 1.0), trial(1, B, 2.0)]) == (None, 0)


def test_a_runner_up_missing_the_slo_is_no_race() -> None:
    trials = [trial(0, A, 100.0), trial(1, B, 99.0, feasible=False)]
    assert runner_up_race(trials, trials[0], None, 1.0, no_requests) is None


def test_without_repeats_the_requests_bootstrap_sets_the_interval() -> None:
    rng = np.random.default_rng(0)

    def rates(mean: float, n: int) -> RequestRates:
        return RequestRates(rng.gamma(2.0, mean / 2.0, n), np.full(n, 1.0))

    stored = {0: rates(101.0, 40), 1: rates(100.0, 40), 2: rates(150.0, 400),
              3: rates(100.0, 400)}

    def compare(a: int, b: int) -> Comparison | None:
        return compare_rates(stored[a], stored[b], n_resamples=999)

    near = [trial(0, A, stored[0].value), trial(1, B, stored[1].value)]
    best = select_best(near)
    assert best is not None
    race = runner_up_race(near, best, None, 1.0, compare)
    assert race is not None and race.source == "requests" and race.close
    assert "nothing was read twice" in race.describe()

    far = [trial(2, A, stored[2].value), trial(3, B, stored[3].value)]
    race = runner_up_race(far, far[0], None, 1.0, compare)
    assert race is not None and race.source == "requests" and not race.close


def _policy(knob: str, values: list[int], trials: int) -> object:
    space = {"space.num_speculative_tokens": [3], "space.max_num_seqs": [8],
             "space.enable_adaptive_verification": [False],
             "space.max_num_batched_tokens": [8192]}
    space[f"space.{knob}"] = values
    return load_policy(None, {
        "budget.trials": trials, "replay.max_requests": 60, "replay.warmup_requests": 4,
        "replay.mode": "closed", "replay.concurrency": 8, "search.strategy": "grid",
        "objective.maximize": "output_tokens_per_s",
        "objective.slo.ttft_p99_ms": 100_000, "objective.slo.itl_p99_ms": 1_000,
        **space,
        "baseline": {"num_speculative_tokens": 3, "enable_adaptive_verification": False,
                     "max_num_seqs": 8, "max_num_batched_tokens": 8192}})


def _race_of(db_url: str, sample: Path, tmp_path: Path, pol: object) -> Any:
    store = Store.open(db_url)
    result = tune(TuneOptions(traffic=sample, policy=pol, seed=1,  # type: ignore[arg-type]
                              workloads=["chat"], export_dir=tmp_path / "exports",
                              resume=False, replicas=1), store)
    (w,) = result.workloads
    assert w.recommendation is not None
    stored = store.recommendation(w.recommendation.id)
    assert stored is not None
    race = stored.provenance["runner_up"]
    assert race == (w.race.as_dict() if w.race else None)  # the database says what the pass did
    return race


def test_a_pass_with_a_clear_winner_is_no_close_race(db_url: str, small_sample: Path,
                                                     tmp_path: Path) -> None:
    # one sequence at a time against eight: throughput differs several-fold
    race = _race_of(db_url, small_sample, tmp_path, _policy("max_num_seqs", [1, 8], 3))
    assert race is not None and race["close_race"] is False
    assert race["lead"] > 0.5 and race["lead_ci"][0] > 0


def test_the_cli_says_a_close_race_in_the_pass_and_the_listing(
        tmp_path: Path, small_sample: Path) -> None:
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    data.update(budget={"trials": 4}, search={"strategy": "grid"},
                space={"num_speculative_tokens": [3], "max_num_seqs": [8],
                       "enable_adaptive_verification": [False],
                       "max_num_batched_tokens": [8192, 16384]},
                baseline={"num_speculative_tokens": 3, "enable_adaptive_verification": False,
                          "max_num_seqs": 8, "max_num_batched_tokens": 8192})
    data["replay"].update(max_requests=60, warmup_requests=4, mode="closed", concurrency=8)
    data["objective"].update(maximize="output_tokens_per_s",
                             slo={"ttft_p99_ms": 100_000, "itl_p99_ms": 1_000})
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(data))
    db = f"sqlite:///{tmp_path / 'a.db'}"
    runner = CliRunner()
    # one sim replica, in this process: no local Ray to start (the Ray pool has its own tests)
    res = runner.invoke(cli, ["start", "--traffic", str(small_sample), "--policy", str(policy),
                              "--db", db, "--once", "--replicas", "1",
                              "--export-dir", str(tmp_path / "x")])
    assert res.exit_code == 0, res.stderr
    assert "a close race: it leads the runner-up" in res.stdout
    listed = runner.invoke(cli, ["recommendations", "--db", db])
    assert listed.exit_code == 0 and "a close race: leads" in listed.stdout
    rows = json.loads(runner.invoke(cli, ["recommendations", "--db", db, "--format",
                                          "json"]).stdout)
    races = [r["provenance"]["runner_up"] for r in rows]
    assert races and all(r["close_race"] for r in races)
    for race in races:  # 8192 against 16384 tokens on short chat prompts: the same schedule
        low, high = race["lead_ci"]
        assert low <= 0 <= high and race["config"]["max_num_batched_tokens"] in (8192, 16384)
