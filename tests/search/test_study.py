from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.objective import Outcome, Scored, select_best
from autotune.policy import Policy, policy_from_mapping
from autotune.search import PastTrial, Searcher
from autotune.types import TrialConfig


def make_policy(**over: Any) -> Policy:
    data: dict[str, Any] = {
        "name": "t",
        "serve": {"model": "m", "draft_model": "d", "draft_block_size": 8},
        "space": {"num_speculative_tokens": [1, 2, 3, 4], "enable_adaptive_verification": [False],
                  "max_num_seqs": [8, 64], "max_num_batched_tokens": [4096]},
        "baseline": {"num_speculative_tokens": 7, "max_num_seqs": 1024,
                     "max_num_batched_tokens": 8192},
        "budget": {"trials": 6},
    }
    for k, v in over.items():
        data[k] = {**data.get(k, {}), **v} if isinstance(v, dict) else v
    return policy_from_mapping(data)


def score(c: TrialConfig) -> Outcome:
    # Best at n=3, seqs=64; n=4 violates the ITL SLO.
    value = 10 - abs(c.num_speculative_tokens - 3) + (c.max_num_seqs == 64)
    itl = 50.0 if c.num_speculative_tokens < 4 else 80.0
    return Outcome(value=float(value), constraints={"itl_p99_ms": itl - 60.0})


def drive(s: Searcher) -> list[tuple[int, TrialConfig, bool]]:
    seen = []
    while (sug := s.ask()) is not None:
        seen.append((sug.number, sug.config, sug.is_baseline))
        s.tell(sug, score(sug.config))
    return seen


def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'o.db'}"


@pytest.mark.parametrize("strategy", ["tpe", "random", "grid"])
def test_baseline_first_budget_respected_no_duplicates(tmp_path: Path, strategy: str) -> None:
    policy = make_policy(search={"strategy": strategy})
    s = Searcher(policy=policy, run_id="r1", workload="code", storage_url=url(tmp_path), seed=3)
    seen = drive(s)
    assert seen[0][2] and seen[0][1] == TrialConfig(7, False, 1024, 8192)
    assert [n for n, _, _ in seen] == list(range(6))
    configs = [c for _, c, _ in seen]
    assert len(set(configs)) == len(configs)
    assert all(c in set(policy.space.configs()) for c in configs[1:])
    assert s.done()


def test_small_space_is_exhausted_not_repeated(tmp_path: Path) -> None:
    policy = make_policy(budget={"trials": 50})
    s = Searcher(policy=policy, run_id="r1", workload="w", storage_url=url(tmp_path))
    seen = drive(s)
    # the baseline lies outside the space: 8 configs + baseline, then it stops
    assert len(seen) == policy.space.size() + 1
    assert {c for _, c, b in seen if not b} == set(policy.space.configs())


def test_parallel_asks_never_hand_out_the_same_config(tmp_path: Path) -> None:
    s = Searcher(policy=make_policy(budget={"trials": 9}), run_id="r", workload="w",
                 storage_url=url(tmp_path))
    first = [s.ask() for _ in range(4)]
    assert all(x is not None for x in first)
    assert len({x.config for x in first if x}) == 4
    for x in first:
        assert x is not None
        s.tell(x, score(x.config))
    rest = drive(s)
    assert len({x.config for x in first if x} | {c for _, c, _ in rest}) == 9


def test_resume_skips_finished_trials(tmp_path: Path) -> None:
    policy = make_policy()
    s = Searcher(policy=policy, run_id="r", workload="w", storage_url=url(tmp_path))
    done = []
    for _ in range(3):
        sug = s.ask()
        assert sug is not None
        s.tell(sug, score(sug.config))
        done.append(PastTrial(sug.number, sug.config, sug.is_baseline, score(sug.config)))
    # a "crash": an asked trial never told
    assert s.ask() is not None
    resumed = Searcher(policy=policy, run_id="r", workload="w", storage_url=url(tmp_path),
                       past=done)
    rest = drive(resumed)
    assert [n for n, _, _ in rest] == [3, 4, 5]
    assert not any(b for _, _, b in rest)
    assert not {c for _, c, _ in rest} & {p.config for p in done}


def test_select_best_prefers_feasible_then_least_violation() -> None:
    a = Scored(0, "a", Outcome(5.0, {"itl": -1.0}))
    b = Scored(1, "b", Outcome(9.0, {"itl": 3.0}))
    c = Scored(2, "c", Outcome(7.0, {"itl": -2.0}))
    failed = Scored(3, "d", None)
    best = select_best([a, b, c, failed])
    assert best is not None and best.config == "c"
    only_bad = select_best([b, Scored(4, "e", Outcome(1.0, {"itl": 1.0})), failed])
    assert only_bad is not None and only_bad.config == "e"
    assert select_best([failed]) is None


def test_grid_covers_the_whole_space_once_then_stops(tmp_path: Path) -> None:
    policy = make_policy(search={"strategy": "grid"}, budget={"trials": 100})
    s = Searcher(policy=policy, run_id="r", workload="w", storage_url=url(tmp_path), seed=5)
    seen = drive(s)
    grid = [c for _, c, b in seen if not b]
    assert sorted(grid) == sorted(policy.space.configs())
    assert s.ask() is None and s.done()
