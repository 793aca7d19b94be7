"""The one SLO rule: per request (goodput) and per replay (feasibility, capacity)."""

from __future__ import annotations

import math

import numpy as np

from autotune.objective import score_measurement
from autotune.slo import Slo
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
