"""Every registered strategy behind the Searcher: the contract all of them must keep.

The objective is a made-up landscape (best at window 3 with 64 sequences; window 5 misses the
ITL bound), so the checks are about the search's bookkeeping, not its skill: the baseline
first, the budget, no config twice (also with parallel asks), a reason when it stops, every
trial in the study, and a resumed search that repeats nothing.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest

from autotune.objective import Outcome
from autotune.policy import Policy, Search, policy_from_mapping
from autotune.search import PastTrial, Searcher, available_strategies, open_search
from autotune.types import Request, TrialConfig

BASELINE = TrialConfig(7, False, 1024, 8192)


def make_policy(strategy: str, trials: int) -> Policy:
    return policy_from_mapping({
        "name": "t",
        "serve": {"model": "moonshotai/Kimi-K2.6", "draft_model": "novita/kimi-k2.6-dspark",
                  "draft_block_size": 8},
        "hardware": {"gpu": "H200", "count": 8},
        "space": {"num_speculative_tokens": [1, 3, 5], "enable_adaptive_verification": [False],
                  "max_num_seqs": [8, 64], "max_num_batched_tokens": [4096]},
        "objective": {"slo": {"ttft_p99_ms": 3000, "itl_p99_ms": 60}},
        "replay": {"warmup_requests": 2},
        "budget": {"trials": trials},
        # guided reads on while any trial is expected to gain; the best leads by 10%, which no
        # second reading is expected to overturn (worth 1e-13: autotune/search/second_reading)
        "search": {"strategy": strategy, "epsilon": 1e-9},
    })


def workload() -> list[Request]:
    return [Request(id=str(i), prompt_tokens=300, output_tokens=120, arrival_s=i * 0.3,
                    acceptance=(0.8,) * 8) for i in range(40)]


def score(c: TrialConfig) -> Outcome:
    value = 10.0 - abs(c.num_speculative_tokens - 3) + (c.max_num_seqs == 64)
    itl = 80.0 if c.num_speculative_tokens == 5 else 40.0
    return Outcome(value, {"itl_p99_ms": itl - 60.0, "failed_requests": 0.0},
                   {"goodput": value, "itl_p99_ms": itl, "ttft_p99_ms": 100.0})


def search(strategy: str, tmp_path: Path, trials: int, **kw: Any) -> Searcher:
    return open_search(make_policy(strategy, trials), "run", "w", f"sqlite:///{tmp_path}/s.db",
                       seed=4, requests=workload(), **kw)


def drive(s: Searcher) -> list[tuple[int, TrialConfig, bool]]:
    seen = []
    while (sug := s.ask()) is not None:
        seen.append((sug.number, sug.config, sug.is_baseline))
        s.tell(sug, score(sug.config))
    return seen


def study_configs(s: Searcher, url: str) -> set[TrialConfig]:
    """Configs of the study's completed trials (a sampler's duplicate draw, answered with
    the known outcome, completes a trial of a config already run)."""
    import optuna

    study = optuna.load_study(study_name=s.study.name, storage=url)
    return {TrialConfig.from_dict(t.params)
            for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))}


STRATEGIES = available_strategies()


def test_the_policy_accepts_exactly_the_registered_strategies() -> None:
    allowed = typing.get_args(Search.model_fields["strategy"].annotation)
    assert sorted(allowed) == STRATEGIES


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_baseline_first_then_distinct_configs_within_the_budget(strategy: str,
                                                                tmp_path: Path) -> None:
    s = search(strategy, tmp_path, trials=4)
    assert s.strategy.kind == strategy
    seen = drive(s)
    assert seen[0][1:] == (BASELINE, True)
    assert [n for n, _, _ in seen] == list(range(len(seen)))
    assert len(seen) <= 4
    configs = [c for _, c, _ in seen]
    assert len(set(configs)) == len(configs)
    assert s.done() and s.stop_reason
    # every trial inside the space is in the study (the baseline lies outside it)
    assert study_configs(s, f"sqlite:///{tmp_path}/s.db") == set(configs[1:])


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_parallel_asks_never_hand_out_the_same_config(strategy: str, tmp_path: Path) -> None:
    s = search(strategy, tmp_path, trials=7)
    first = [s.ask() for _ in range(3)]
    pending = [x for x in first if x is not None]
    assert len({x.config for x in pending}) == len(pending) >= 2
    for x in pending:
        s.tell(x, score(x.config))
    told = [x.config for x in pending]
    while (sug := s.ask()) is not None:
        # a config is handed out again only as the searcher's flagged second reading of one
        # already measured (a leader's close call, narrow lead or surprise)
        assert (sug.config in told) == sug.is_repeat, sug
        told.append(sug.config)
        s.tell(sug, score(sug.config))
    assert len(told) > len(pending)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_resumed_search_repeats_no_finished_trial(strategy: str, tmp_path: Path) -> None:
    s = search(strategy, tmp_path, trials=5)
    done = []
    for _ in range(2):  # guided may find this landscape's best with its third trial and stop
        sug = s.ask()
        assert sug is not None
        s.tell(sug, score(sug.config))
        done.append(PastTrial(sug.number, sug.config, sug.is_baseline, score(sug.config)))
    assert s.ask() is not None  # a "crash": asked, never told
    resumed = search(strategy, tmp_path, trials=5, past=done)
    rest = drive(resumed)
    assert [n for n, _, _ in rest][:1] == [2]
    assert not any(b for _, _, b in rest)
    assert not {c for _, c, _ in rest} & {p.config for p in done}


def test_a_config_enqueued_by_a_killed_process_is_not_handed_out_again(tmp_path: Path) -> None:
    """A process killed between enqueueing a config and asking for it leaves a WAITING trial;
    the resumed study asks for other configs and gets exactly those."""
    import optuna

    url = f"sqlite:///{tmp_path}/s.db"
    name = search("grid", tmp_path, trials=5).study.name
    wanted = TrialConfig(1, False, 64, 4096)  # not the config the killed process enqueued
    optuna.load_study(study_name=name, storage=url).enqueue_trial(
        {"num_speculative_tokens": 5, "enable_adaptive_verification": False,
         "max_num_seqs": 8, "max_num_batched_tokens": 4096})
    number = search("grid", tmp_path, trials=5).study.ask_for(wanted)
    trials = optuna.load_study(study_name=name, storage=url).trials
    assert TrialConfig.from_dict(trials[number].params) == wanted
    assert not [t for t in trials if t.state == optuna.trial.TrialState.WAITING]


@pytest.mark.parametrize("strategy", ["grid", "random"])
def test_a_budget_larger_than_the_space_measures_it_all_once(strategy: str,
                                                             tmp_path: Path) -> None:
    s = search(strategy, tmp_path, trials=50)
    seen = drive(s)
    policy = make_policy(strategy, 50)
    assert {c for _, c, b in seen if not b} == set(policy.space.configs())
    assert len(seen) == policy.space.size() + 1
    assert s.stop_reason == "every config of the space is measured"


def test_the_budget_is_a_stop_reason(tmp_path: Path) -> None:
    s = search("random", tmp_path, trials=3)
    drive(s)
    assert s.stop_reason == "budget of 3 trials spent"


def test_an_unknown_strategy_lists_the_known_ones() -> None:
    from autotune.errors import SearchError
    from autotune.search import StrategySetup, create_strategy

    with pytest.raises(SearchError, match="known: gp, grid, guided, random, tpe"):
        create_strategy("anneal", typing.cast(StrategySetup, None))
