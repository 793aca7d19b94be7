"""The one SLO rule: per request (goodput) and per replay (feasibility, capacity)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.objective import score_measurement
from autotune.slo import (
    Slo,
    itl_independent_gaps,
    p99_interval_ms,
    quantile_ms,
    values_to_bound,
)
from autotune.types import Measurement


def measurement(ttft_ms: list[float], tpot_ms: list[float], itl_ms: list[float],
                ok: list[bool]) -> Measurement:
    n = len(ttft_ms)
    return Measurement(
        ttft_s=np.asarray(ttft_ms) / 1000.0, tpot_s=np.asarray(tpot_ms) / 1000.0,
        e2e_s=np.full(n, 1.0), output_tokens=np.full(n, 10, dtype=np.int64),
        ok=np.asarray(ok, dtype=bool), itl_s=np.asarray(itl_ms) / 1000.0, duration_s=10.0,
        wall_time_s=1.0)


def test_a_request_meets_the_slo_only_when_completed_and_within_both_bounds() -> None:
    slo = Slo(ttft_p99_ms=100.0, itl_p99_ms=20.0)
    met = slo.met_by_requests(np.array([True, True, True, False, True]),
                              np.array([0.05, 0.2, 0.05, 0.05, math.nan]),
                              np.array([0.01, 0.01, 0.03, 0.01, 0.01]))
    assert met.tolist() == [True, False, False, False, False]


def test_a_replay_meets_the_slo_when_its_p99s_are_within_bounds() -> None:
    slo = Slo(ttft_p99_ms=100.0, itl_p99_ms=20.0)
    check = slo.check(np.ones(200, dtype=bool), np.full(200, 0.05), np.full(1000, 0.015))
    assert check.met
    assert check.constraints == {"ttft_p99_ms": -50.0, "itl_p99_ms": -5.0,
                                 "failed_requests": 0.0}


def test_one_failed_request_makes_a_replay_miss_the_slo() -> None:
    slo = Slo(ttft_p99_ms=100.0, itl_p99_ms=20.0)
    ok = np.ones(200, dtype=bool)
    ok[3] = False
    check = slo.check(ok, np.full(200, 0.05), np.full(1000, 0.015))
    assert not check.met
    assert check.failed_requests == 1
    assert check.missed() == ["1 request(s) failed"]


def test_a_replay_with_no_sample_misses_every_bound() -> None:
    slo = Slo(ttft_p99_ms=100.0, itl_p99_ms=20.0)
    check = slo.check(np.zeros(0, dtype=bool), np.zeros(0), np.zeros(0))
    assert not check.met
    assert check.constraints["ttft_p99_ms"] == 100.0
    assert check.constraints["itl_p99_ms"] == 20.0
    assert "no request was measured" in check.missed()


def test_the_p99_is_read_over_completed_requests_and_names_the_bound_missed() -> None:
    slo = Slo(ttft_p99_ms=100.0, itl_p99_ms=20.0)
    check = slo.check(np.ones(100, dtype=bool), np.full(100, 0.05),
                      np.concatenate([np.full(900, 0.01), np.full(100, 0.07)]))
    assert not check.met
    assert check.itl_p99_ms == 70.0
    assert check.missed() == ["itl_p99_ms 70 > 20"]


def test_the_objective_and_the_goodput_use_the_same_rule() -> None:
    slo = Slo(ttft_p99_ms=100.0, itl_p99_ms=20.0)
    m = measurement([50, 50, 150, 50], [10, 30, 10, 10], [10] * 40, [True, True, True, False])
    out = score_measurement(m, "goodput", slo)
    assert out.summary["goodput"] == 0.1  # one request in 10 s met the SLO
    assert out.constraints == m.slo_check(slo).constraints
    assert not out.feasible  # a request failed


def test_the_p99_interval_covers_the_true_p99_as_often_as_it_says() -> None:
    # Exponential values (p99 = ln 100 s) in 400 independent draws of 1,000: each end of the
    # interval is on the right side of the truth in about 95% of draws (at least; the order
    # statistics are discrete), and not in every draw (an interval that cannot miss says
    # nothing)
    truth_ms = math.log(100.0) * 1000.0
    rng = np.random.default_rng(3)
    below = above = 0
    draws = 400
    for _ in range(draws):
        low, high = p99_interval_ms(rng.exponential(1.0, 1000))
        below += low <= truth_ms
        above += high >= truth_ms
    assert 0.93 <= below / draws <= 0.995
    assert 0.93 <= above / draws <= 0.995


def test_a_p99_of_a_few_hundred_values_has_no_upper_bound() -> None:
    # Under ~300 values, the chance that none exceeds the p99 is over 5%: nothing bounds it
    values = np.linspace(0.001, 0.1, 250)
    low, high = p99_interval_ms(values)
    assert high == math.inf
    assert 0 < low <= 100.0
    low, high = p99_interval_ms(np.linspace(0.001, 0.1, 2000))
    assert low < quantile_ms(np.linspace(0.001, 0.1, 2000), 0.99) < high < math.inf
    assert all(math.isnan(v) for v in p99_interval_ms(np.zeros(0)))


def test_the_fewest_values_that_bound_a_p99_are_the_first_with_a_finite_high_end() -> None:
    n = values_to_bound()
    assert 0.99**n <= 0.05 < 0.99 ** (n - 1)
    assert p99_interval_ms(np.linspace(0.001, 0.1, n))[1] < math.inf
    assert p99_interval_ms(np.linspace(0.001, 0.1, n - 1))[1] == math.inf


def test_fewer_independent_observations_widen_the_interval() -> None:
    values = np.random.default_rng(4).exponential(1.0, 20_000)
    low, high = p99_interval_ms(values)
    low_few, high_few = p99_interval_ms(values, independent=500)
    assert low_few < low < high < high_few


def test_the_token_gaps_of_one_step_count_once() -> None:
    # 30 requests decoding together for 400 steps of 25 ms: 12,000 gaps, 400 observations
    itl = np.full(12_000, 0.025)
    assert itl_independent_gaps(itl, 400 * 0.025) == pytest.approx(400)
    # one request alone, idle half the time: every gap is its own step
    assert itl_independent_gaps(np.full(400, 0.025), 400 * 0.025 * 2) == 400
    assert itl_independent_gaps(np.zeros(0), 10.0) == 0


def test_a_verdict_is_met_missed_or_undecided_by_where_the_interval_lies() -> None:
    slo = Slo(ttft_p99_ms=100.0, itl_p99_ms=20.0)
    ok = np.ones(2000, dtype=bool)
    ttft = np.random.default_rng(5).uniform(0.01, 0.09, 2000)
    gaps = np.random.default_rng(6).uniform(0.005, 0.015, 20_000)
    met = slo.verdict(ok, ttft, gaps, duration_s=1000.0)
    assert met.code == 1.0 and met.label == "met"
    assert met.requests == 2000 and met.itl_gaps == 20_000
    assert met.ttft_p99_high_ms <= 100.0
    missed = slo.verdict(ok, ttft + 0.02, gaps, duration_s=1000.0)  # p99 TTFT ~ 109 ms
    assert missed.code == 0.0 and missed.ttft_p99_low_ms > 100.0
    near = Slo(ttft_p99_ms=quantile_ms(ttft, 0.99), itl_p99_ms=20.0)
    assert near.verdict(ok, ttft, gaps, duration_s=1000.0).code == 0.5
    # 150 requests far inside the bound: their p99 cannot be bounded from above
    thin = slo.verdict(ok[:150], ttft[:150], gaps, duration_s=1000.0)
    assert thin.code == 0.5 and thin.label == "undecided"
    failed = ok.copy()
    failed[0] = False
    assert slo.verdict(failed, ttft, gaps, duration_s=1000.0).code == 0.0
    keys = met.as_metrics()
    assert {"slo_verdict_code", "p99_requests", "p99_itl_gaps", "ttft_p99_low_ms",
            "ttft_p99_high_ms", "itl_p99_low_ms", "itl_p99_high_ms"} <= set(keys)
    assert all(isinstance(v, float) for v in keys.values())
