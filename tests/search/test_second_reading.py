"""What a second reading of a leader read once is worth (autotune/search/second_reading.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.objective import Outcome, pooled_log_sd
from autotune.predict.residual import GP_NOISE
from autotune.search.second_reading import PRIOR_DOF, Noise, reading_noise, second_reading_worth


def _monte_carlo(lead: float, noise: Noise, draws: int = 400_000) -> float:
    """The gain of a second reading drawn as the module doc models it: one reading's variance
    from its scaled inverse-χ² (scale², ν), the leader's mean moved by half the difference of
    two such readings; the runner-up (at 0) is picked when the move puts the leader below it."""
    rng = np.random.default_rng(0)
    sigma = noise.scale * np.sqrt(noise.dof / rng.chisquare(noise.dof, draws))
    mean_after = lead + rng.normal(0.0, 1.0, draws) * sigma / math.sqrt(2.0)
    return float(np.maximum(0.0, -mean_after).mean())


@pytest.mark.parametrize(("lead", "noise"), [(0.0, Noise(0.02, 2.0)), (0.01, Noise(0.02, 2.0)),
                                             (0.01, Noise(0.02, 8.0)),
                                             (0.07, Noise(0.073, 3.0))])
def test_the_worth_is_the_expected_gain_over_the_noise_the_run_is_unsure_of(
        lead: float, noise: Noise) -> None:
    assert second_reading_worth(lead, noise) == pytest.approx(_monte_carlo(lead, noise),
                                                              rel=0.03)


def test_a_tie_is_worth_most_a_lead_less_and_an_unsure_noise_more() -> None:
    worth = [second_reading_worth(math.log(1 + lead), Noise(0.02, 2.0))
             for lead in (0.0, 0.005, 0.01, 0.03, 0.1)]
    assert worth == sorted(worth, reverse=True) and worth[-1] < 0.005 / 4  # 10%: 0.10%
    # with many degrees of freedom it is the normal's knowledge gradient, s·(φ(z) − z·Φ(−z))
    s = 0.02 / math.sqrt(2.0)
    assert second_reading_worth(0.0, Noise(0.02, 1e6)) == pytest.approx(
        s / math.sqrt(2 * math.pi), rel=1e-4)
    # the same noise known on fewer degrees of freedom is worth more; no noise, nothing
    assert second_reading_worth(0.01, Noise(0.02, 2.0)) > second_reading_worth(
        0.01, Noise(0.02, 8.0)) > second_reading_worth(0.01, Noise(0.02, 1e6))
    assert second_reading_worth(0.03, Noise(0.08, 3.0)) > second_reading_worth(
        0.03, Noise(0.02, 3.0))
    assert second_reading_worth(0.01, Noise(0.0, 2.0)) == 0.0


def out(value: float) -> Outcome:
    return Outcome(value, {})


def test_one_readings_noise_is_the_prior_until_the_run_reads_a_config_twice() -> None:
    assert reading_noise([[out(3.0)], [out(2.0), None]]) == Noise(GP_NOISE, PRIOR_DOF)
    # a config read 5.40 and 4.54: 19% apart, a sd of 12.3% on one degree of freedom, weighed
    # with the prior's two
    spread = math.log(5.40 / 4.54) / math.sqrt(2.0)
    noisy = reading_noise([[out(5.40), out(4.54)], [out(3.0)]])
    assert noisy.dof == PRIOR_DOF + 1
    assert noisy.scale == pytest.approx(math.sqrt((PRIOR_DOF * GP_NOISE**2 + spread**2)
                                                  / (PRIOR_DOF + 1)))
    quiet = reading_noise([[out(3.0), out(3.003)], [out(2.0), out(2.002)]])
    assert quiet.scale < GP_NOISE < noisy.scale and quiet.dof == PRIOR_DOF + 2
    # failed and non-positive readings are no evidence of the noise
    assert reading_noise([[out(3.0), None], [out(0.0), out(2.0)]]) == Noise(GP_NOISE, PRIOR_DOF)


def test_the_prior_spans_the_noise_measured_across_worlds() -> None:
    # one reading's noise measured from repeats: 1.1-2.9% on the GPU worlds, 8.9% on one CPU
    # core; the prior puts its 5th and 95th percentiles around that range
    from scipy.stats import chi2

    low, high = (GP_NOISE * math.sqrt(PRIOR_DOF / chi2.ppf(q, PRIOR_DOF)) for q in (0.95, 0.05))
    assert low < 0.012 and 0.085 < high < 0.1


def test_the_pooled_spread_counts_each_groups_degrees_of_freedom() -> None:
    assert pooled_log_sd([[1.0], [2.0]]) == (None, 0)
    sd, dof = pooled_log_sd([[1.0, math.e], [5.0, 5.0, 5.0]])
    # one group's logs 0 and 1 (squares about their mean: 0.5), the other's all equal
    assert dof == 3 and sd == pytest.approx(math.sqrt(0.5 / 3))
