"""Choosing the best trial: the highest value among those meeting the SLO, else the least
violation."""

from __future__ import annotations

from autotune.objective import Outcome
from autotune.recommend import Scored, select_best
from autotune.types import TrialConfig


def config(n: int) -> TrialConfig:
    return TrialConfig(n, False, 8, 2048)


def test_select_best_prefers_feasible_then_least_violation() -> None:
    a = Scored(0, config(1), Outcome(5.0, {"itl": -1.0}))
    b = Scored(1, config(2), Outcome(9.0, {"itl": 3.0}))
    c = Scored(2, config(3), Outcome(7.0, {"itl": -2.0}))
    failed = Scored(3, config(4), None)
    best = select_best([a, b, c, failed])
    assert best is not None and best.config == config(3)
    only_bad = select_best([b, Scored(4, config(5), Outcome(1.0, {"itl": 1.0})), failed])
    assert only_bad is not None and only_bad.config == config(5)
    assert select_best([failed]) is None


def test_ties_break_towards_the_earlier_trial() -> None:
    first = Scored(0, config(1), Outcome(5.0, {"itl": -1.0}))
    second = Scored(1, config(2), Outcome(5.0, {"itl": -3.0}))
    best = select_best([second, first])
    assert best is not None and best.number == 0


def test_a_trial_serving_the_target_rate_beats_a_higher_value_below_it() -> None:
    below = Scored(0, config(7), Outcome(2.42, {"itl": -1.0},
                                         {"load_scale": 0.958, "capacity_met_slo": 1.0}))
    at = Scored(1, config(4), Outcome(2.40, {"itl": -1.0},
                                      {"load_scale": 1.0, "capacity_met_slo": 1.0}))
    assert select_best([below, at]) is below  # no target: the highest value
    best = select_best([below, at], target=1.0)
    assert best is at
    # when nothing reaches the target, the best below it is still chosen (and judged later)
    assert select_best([below], target=1.0) is below
