"""The predictor's check on its own spread (autotune/predict/prequential.py): a first reading
scored against the prediction held for it, and an unread config's spread widened by what the
scores show."""

from __future__ import annotations

import math

import pytest

from autotune.predict import Observation, Prediction
from autotune.predict.prequential import PRIOR_CHECKS, check_score, checks_prediction, spread_factor
from autotune.predict.residual import GP_NOISE
from autotune.types import TrialConfig
from tests.predict.test_predictor import predictor, requests


def test_a_reading_at_the_median_scores_zero_and_one_sd_off_scores_one() -> None:
    config = TrialConfig(3, False, 32, 8192)
    held = Prediction(config, 5.0, 4.0, 6.0, math.log(5.0), 0.3, 0.0, {"model_sd": 0.1})
    total = math.hypot(0.1, GP_NOISE)  # the residual process's own sd, not the widened one

    def z(value: float) -> float:
        return check_score(Observation(config, value, True), held)

    assert z(5.0) == 0.0
    assert z(5.0 * math.exp(total)) == pytest.approx(1.0)
    assert z(5.0 * math.exp(-2 * total)) == pytest.approx(-2.0)


def test_only_a_config_first_reading_after_some_run_is_a_test() -> None:
    a, b = TrialConfig(7, False, 1024, 8192), TrialConfig(1, False, 32, 8192)
    assert not checks_prediction(Observation(a, 5.0, True), [])
    assert not checks_prediction(Observation(b, 5.0, True),
                                 [Observation(a, None, False)])  # it failed
    assert checks_prediction(Observation(b, 5.0, True), [Observation(a, 4.0, True)])
    assert not checks_prediction(Observation(b, 5.0, True), [Observation(a, 4.0, True),
                                                  Observation(b, 6.0, True)])
    assert not checks_prediction(Observation(b, 0.0, False), [Observation(a, 4.0, True)])


def test_the_factor_is_the_shrunk_root_mean_square_and_never_narrows() -> None:
    assert spread_factor([]) == 1.0
    assert spread_factor([0.1, -0.2, 0.3]) == 1.0          # predictions too wide: kept
    assert spread_factor([3.0]) == pytest.approx(math.sqrt((PRIOR_CHECKS + 9) / (PRIOR_CHECKS + 1)))
    # a miss below counts as one above: the search reads where predictions look best
    assert spread_factor([-3.0, -3.0]) == spread_factor([3.0, 3.0]) > spread_factor([3.0])


def test_a_first_reading_far_from_its_prediction_widens_only_the_unread_configs() -> None:
    configs = [TrialConfig(n, False, s, 8192) for n in (1, 3, 5, 7) for s in (8, 64)]
    base, second, third = configs[7], configs[0], configs[2]
    p = predictor(requests(), configs)
    preds = p.predict()
    p.observe(Observation(base, preds[base].value, True))
    assert p.checks == []                                   # no run before it: a prior, untested
    held = p.predict()[second]
    p.observe(Observation(second, held.value * 2.0, True))  # twice what it was predicted at
    assert [c for c, _ in p.checks] == [second]
    z = p.checks[0][1]
    assert z == pytest.approx(math.log(2.0) / math.hypot(held.detail["model_sd"], GP_NOISE))
    assert z == check_score(Observation(second, held.value * 2.0, True), held)
    after = p.predict()
    assert p.spread == pytest.approx(spread_factor([z])) and p.spread > 1.0
    unread = after[third]
    assert unread.log_sd == pytest.approx(unread.detail["model_sd"] * p.spread)
    for c in (base, second):
        assert after[c].log_sd == pytest.approx(after[c].detail["model_sd"])
    # a second reading of a config read before tests the reading noise, not a prediction
    p.observe(Observation(second, held.value * 2.0, True))
    assert len(p.checks) == 1
