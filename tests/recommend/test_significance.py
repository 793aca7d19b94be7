"""The promotion decision: bootstrap intervals over requests of a rate, and what they decide."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from autotune.errors import SearchError
from autotune.recommend.significance import (
    compare_rates,
    decide,
    rate_interval,
    request_rates,
)
from autotune.types import Measurement, Slo

SLO = Slo(ttft_p99_ms=500.0, itl_p99_ms=40.0)
FAST = {"n_resamples": 999}


def closed_loop(rng: np.random.Generator, n: int, *, speed: float = 1.0,
                concurrency: int = 8) -> tuple[dict[str, list[Any]], float]:
    """Requests of a closed-loop replay: duration = total latency / concurrency."""
    tokens = rng.integers(20, 400, n)
    tpot = rng.gamma(4.0, 0.006, n) / speed
    ttft = rng.gamma(2.0, 0.1, n) / speed
    e2e = ttft + tpot * tokens
    per_request = {"ttft_s": ttft.tolist(), "tpot_s": tpot.tolist(), "e2e_s": e2e.tolist(),
                   "output_tokens": tokens.tolist(), "ok": [True] * n}
    return per_request, float(e2e.sum() / concurrency)


def measurement(per_request: dict[str, list[Any]], duration: float) -> Measurement:
    return Measurement(
        ttft_s=np.array(per_request["ttft_s"], float),
        tpot_s=np.array([math.nan if v is None else v for v in per_request["tpot_s"]], float),
        e2e_s=np.array(per_request["e2e_s"], float),
        output_tokens=np.array(per_request["output_tokens"], np.int64),
        ok=np.array(per_request["ok"], bool), itl_s=np.array([0.01]), duration_s=duration,
        wall_time_s=1.0)


@pytest.mark.parametrize("objective", ["goodput", "output_tokens_per_s"])
def test_point_estimate_is_the_measured_rate(objective: str) -> None:
    rng = np.random.default_rng(3)
    per_request, duration = closed_loop(rng, 300)
    per_request["ok"][5] = False
    per_request["tpot_s"][7] = None  # one-token output: no TPOT (stored as null)
    expected = measurement(per_request, duration).summary(SLO)[objective]
    rates = request_rates(per_request, duration, objective, SLO)
    assert rates.value == pytest.approx(expected, rel=1e-12)
    assert expected > 0
    if objective == "goodput":
        assert 0 < rates.contributions.mean() < 1


def test_interval_covers_the_true_rate_about_95_percent_of_the_time() -> None:
    """Coverage of the rate interval over repeated samples from a known population."""
    rng = np.random.default_rng(11)
    concurrency = 8
    # Population: tokens ~ U{20..399}, e2e = ttft + tpot*tokens with known means.
    mean_tokens = (20 + 399) / 2
    mean_e2e = 2.0 * 0.1 + 4.0 * 0.006 * mean_tokens
    true_rate = concurrency * mean_tokens / mean_e2e
    hits = 0
    reps = 120
    for i in range(reps):
        per_request, duration = closed_loop(rng, 150, concurrency=concurrency)
        rates = request_rates(per_request, duration, "output_tokens_per_s", SLO)
        interval = rate_interval(rates, seed=i, **FAST)
        assert interval is not None
        hits += interval.low <= true_rate <= interval.high
    assert 0.86 <= hits / reps <= 0.995  # measured: 0.91 (BCa, n=150, skewed ratio)


def test_no_false_promotion_between_equal_configs() -> None:
    rng = np.random.default_rng(5)
    significant = 0
    for i in range(60):
        a = request_rates(*closed_loop(rng, 200), "goodput", SLO)
        b = request_rates(*closed_loop(rng, 200), "goodput", SLO)
        cmp = compare_rates(a, b, seed=i, **FAST)
        assert cmp is not None
        significant += cmp.better
    assert significant / 60 <= 0.1  # one-sided false positives: ~2.5% expected


def test_a_faster_config_is_promoted_even_when_every_request_meets_the_slo() -> None:
    """Closed loop, every request within the SLO: goodput contributions are all 1, so only
    the time resampled with the requests carries the noise; a 30% faster config must win."""
    rng = np.random.default_rng(8)
    loose = Slo(ttft_p99_ms=1e9, itl_p99_ms=1e9)
    old = request_rates(*closed_loop(rng, 200), "goodput", loose)
    new = request_rates(*closed_loop(rng, 200, speed=1.3), "goodput", loose)
    assert set(new.contributions) == {1.0}
    cmp = compare_rates(new, old, seed=0, **FAST)
    assert cmp is not None and cmp.better
    assert cmp.low < new.value / old.value - 1 < cmp.high


def test_open_loop_rate_set_by_arrivals_is_not_significant() -> None:
    """Open loop with every request on time: goodput is the arrival rate for both configs;
    a slightly shorter tail of the last completion is no reason to switch."""
    rng = np.random.default_rng(9)
    loose = Slo(ttft_p99_ms=1e9, itl_p99_ms=1e9)
    a_req, _ = closed_loop(rng, 300)
    b_req, _ = closed_loop(rng, 300, speed=1.2)  # faster requests, same arrivals
    old = request_rates(a_req, 100.0, "goodput", loose)
    new = request_rates(b_req, 99.0, "goodput", loose)  # span ends 1% sooner
    cmp = compare_rates(new, old, seed=0, **FAST)
    assert cmp is not None and not cmp.better


def test_decide_says_why() -> None:
    rng = np.random.default_rng(1)
    old = request_rates(*closed_loop(rng, 200), "goodput", SLO)
    same = request_rates(*closed_loop(rng, 200), "goodput", SLO)
    faster = request_rates(*closed_loop(rng, 200, speed=1.5), "goodput", SLO)
    slower = request_rates(*closed_loop(rng, 200, speed=0.6), "goodput", SLO)
    common: dict[str, Any] = {"objective": "goodput", "n_resamples": 999, "seed": 0}

    d = decide(feasible=False, constraints={"ttft_p99_ms": 420.0}, new=faster, active_id=None,
               active=None, **common)
    assert not d.promote and "misses the SLOs (ttft_p99_ms +420 ms" in d.reason
    d = decide(feasible=True, constraints={}, new=faster, active_id=None, active=None, **common)
    assert d.promote and d.reason.startswith("first recommendation")
    assert d.value_ci is not None and d.value_ci[0] < faster.value < d.value_ci[1]
    d = decide(feasible=True, constraints={}, new=faster, active_id=4, active=old, **common)
    assert d.promote and "significant, promoted" in d.reason and d.compared_with == 4
    assert d.gain_ci is not None and d.gain_ci[0] > 0
    d = decide(feasible=True, constraints={}, new=same, active_id=4, active=old, **common)
    assert not d.promote and "includes zero" in d.reason and "#4 stays active" in d.reason
    d = decide(feasible=True, constraints={}, new=slower, active_id=4, active=old, **common)
    assert not d.promote and "worse" in d.reason
    d = decide(feasible=True, constraints={}, new=faster, active_id=4, active=None, **common)
    assert not d.promote and "no per-request measurements" in d.reason


def test_seeded_and_deterministic() -> None:
    rng = np.random.default_rng(2)
    a = request_rates(*closed_loop(rng, 100), "output_tokens_per_s", SLO)
    b = request_rates(*closed_loop(rng, 100), "output_tokens_per_s", SLO)
    assert compare_rates(a, b, seed=7, **FAST) == compare_rates(a, b, seed=7, **FAST)


def test_bad_inputs_are_clear_errors() -> None:
    rng = np.random.default_rng(0)
    per_request, duration = closed_loop(rng, 10)
    with pytest.raises(SearchError, match="positive measured duration"):
        request_rates(per_request, 0.0, "goodput", SLO)
    with pytest.raises(SearchError, match="unknown objective"):
        request_rates(per_request, duration, "latency", SLO)
    with pytest.raises(SearchError, match="lack 'e2e_s'"):
        request_rates({k: v for k, v in per_request.items() if k != "e2e_s"}, duration,
                      "goodput", SLO)
    one = request_rates({k: v[:1] for k, v in per_request.items()}, duration, "goodput", SLO)
    assert rate_interval(one) is None
