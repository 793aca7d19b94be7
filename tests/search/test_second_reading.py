"""What a second reading of a leader read once is worth (autotune/search/second_reading.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.objective import Outcome, pooled_log_sd
from autotune.predict.residual import GP_NOISE
from autotune.search.second_reading import PRIOR_REPEATS, reading_noise, second_reading_worth


def test_a_tie_is_worth_the_move_a_second_reading_makes_and_a_lead_less() -> None:
    s = 0.02 / math.sqrt(2.0)  # how far a second reading moves a mean of one
    assert second_reading_worth(0.0, 0.02) == pytest.approx(s / math.sqrt(2 * math.pi))
    worth = [second_reading_worth(math.log(1 + lead), 0.02) for lead in (0.0, 0.005, 0.01, 0.03)]
    assert worth == sorted(worth, reverse=True) and worth[-1] < 1e-4
    # by Monte Carlo: the leader's true value is its reading's posterior (flat prior), the pick
    # after a second reading is whichever mean is higher; the gain over keeping the leader

    rng = np.random.default_rng(0)
    lead, noise = 0.01, 0.02
    mean_after = lead + rng.normal(0.0, noise / math.sqrt(2.0), 400_000)
    gain = np.maximum(0.0, -mean_after).mean()  # the runner-up (at 0) is picked below it
    assert second_reading_worth(lead, noise) == pytest.approx(gain, rel=0.02)
    # more noise makes a lead worth more; no noise, nothing
    assert second_reading_worth(0.03, 0.08) > second_reading_worth(0.03, 0.02)
    assert second_reading_worth(0.01, 0.0) == 0.0


def out(value: float) -> Outcome:
    return Outcome(value, {})


def test_one_readings_noise_is_the_prior_until_the_run_reads_a_config_twice() -> None:
    assert reading_noise([[out(3.0)], [out(2.0), None]]) == GP_NOISE
    # a config read 5.40 and 4.54: 12% apart, a sd of 12.3% on one degree of freedom, weighed
    # with the prior's one
    spread = math.log(5.40 / 4.54) / math.sqrt(2.0)
    noisy = reading_noise([[out(5.40), out(4.54)], [out(3.0)]])
    assert noisy == pytest.approx(math.sqrt((PRIOR_REPEATS * GP_NOISE**2 + spread**2)
                                            / (PRIOR_REPEATS + 1)))
    quiet = reading_noise([[out(3.0), out(3.003)], [out(2.0), out(2.002)]])
    assert quiet < GP_NOISE < noisy
    # failed and non-positive readings are no evidence of the noise
    assert reading_noise([[out(3.0), None], [out(0.0), out(2.0)]]) == GP_NOISE


def test_the_pooled_spread_counts_each_groups_degrees_of_freedom() -> None:
    assert pooled_log_sd([[1.0], [2.0]]) == (None, 0)
    sd, dof = pooled_log_sd([[1.0, math.e], [5.0, 5.0, 5.0]])
    # one group's logs 0 and 1 (squares about their mean: 0.5), the other's all equal
    assert dof == 3 and sd == pytest.approx(math.sqrt(0.5 / 3))
