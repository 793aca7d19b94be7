"""Acceptance curves against closed forms: geometric profiles (constant conditional c).

With c_k = c for every position, survival is s_k = c^k and the expected tokens per verify step
at window n is 1 + Σ_{k≤n} c^k = (1 - c^(n+1)) / (1 - c).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from verify_loop import simulate_counts

from autotune.acceptance import (
    AcceptanceModel,
    curve_from_counts,
    curve_from_predictions,
    prior_conditional,
)
from autotune.types import AcceptanceCounts, Request


def geometric_expected(c: float, n: int) -> float:
    return (1.0 - c ** (n + 1)) / (1.0 - c)


def req(i: int, c: float, block: int = 8, out: int = 100) -> Request:
    return Request(id=f"r{i}", prompt_tokens=10, output_tokens=out, acceptance=(c,) * block)


@pytest.mark.parametrize("c", [0.3, 0.7, 0.9])
def test_single_geometric_profile_matches_closed_form(c: float) -> None:
    model = AcceptanceModel.from_requests([req(0, c)], 8)
    surv = model.survival()[0]
    assert np.allclose(surv, [c**k for k in range(1, 9)])
    for n in range(1, 9):
        assert model.expected()[0, n - 1] == pytest.approx(geometric_expected(c, n))
        assert model.tokens_per_step(n) == pytest.approx(geometric_expected(c, n))
    curve = model.curve()
    assert curve.expected_tokens(0) == 1.0
    assert curve.expected_tokens(5) == pytest.approx(geometric_expected(c, 5))
    assert curve.conditional == pytest.approx((c,) * 8)


def test_mixed_traffic_averages_curves_not_probabilities() -> None:
    # half the requests accept with c=0.9, half with c=0.5
    reqs = [req(i, 0.9 if i % 2 else 0.5) for i in range(200)]
    curve = curve_from_predictions(reqs, 8)
    assert curve is not None
    for n in range(1, 9):
        mean_of_curves = (geometric_expected(0.9, n) + geometric_expected(0.5, n)) / 2
        curve_of_mean = geometric_expected(0.7, n)
        assert curve.expected_tokens(n) == pytest.approx(mean_of_curves)
        if n >= 2:  # by Jensen the curve of the mean probability understates the mixture
            assert curve.expected_tokens(n) > curve_of_mean + 0.01
    # the reported conditional is that of the mean survival: s̄_k / s̄_{k-1}
    s = [(0.9**k + 0.5**k) / 2 for k in range(1, 9)]
    assert curve.conditional[2] == pytest.approx(s[2] / s[1])


def test_confidence_interval_closed_form() -> None:
    reqs = [req(i, 0.9 if i % 2 else 0.5) for i in range(100)]
    curve = curve_from_predictions(reqs, 8, z=1.96)
    assert curve is not None and curve.samples == 100
    n = 4
    a, b = geometric_expected(0.9, n), geometric_expected(0.5, n)
    values = np.array([a, b] * 50)
    se = values.std(ddof=1) / math.sqrt(100)
    assert curve.expected_lo[n - 1] == pytest.approx((a + b) / 2 - 1.96 * se)
    assert curve.expected_hi[n - 1] == pytest.approx((a + b) / 2 + 1.96 * se)
    same = curve_from_predictions([req(i, 0.8) for i in range(10)], 8)
    assert same is not None and same.expected_lo == pytest.approx(same.expected_hi)


def test_draft_weighted_survival_is_what_a_runs_counters_read() -> None:
    # c=0.9 emits its tokens in few steps, c=0.2 in many: a run's counters see more drafts of
    # the latter. The model's step-weighted survival must read what a verify loop's counters
    # read (up to the last, partly used step of each request: about 1% here).
    reqs = [req(i, 0.9 if i % 2 else 0.2, out=401) for i in range(400)]
    model = AcceptanceModel.from_requests(reqs, 8)
    n = 3
    truth = np.array([r.acceptance for r in reqs])
    counts = simulate_counts(reqs, truth, n, seed=1)
    read = np.array(counts.accepted_per_pos) / counts.drafts
    assert model.draft_survival(n) == pytest.approx(read, rel=0.03)
    assert model.tokens_per_step(n) == pytest.approx(counts.mean_accepted_length, rel=0.03)
    # the counters' mean accepted length is below the request average of the curve
    assert model.tokens_per_step(n) < model.curve().expected_tokens(n)


def test_requests_without_predictions_get_the_workload_mean_or_the_prior() -> None:
    reqs = [req(0, 0.8), Request(id="x", prompt_tokens=5, output_tokens=5)]
    model = AcceptanceModel.from_requests(reqs, 8)
    assert model.with_predictions == 1
    assert np.allclose(model.conditional[1], 0.8)
    none = AcceptanceModel.from_requests([Request(id="y", prompt_tokens=5, output_tokens=5)], 8)
    assert np.allclose(none.conditional[0], prior_conditional(8))
    # a placeholder until runs measure the drafter's counters, not another model's curve
    assert np.allclose(prior_conditional(8), 0.6)


def test_short_prediction_lists_continue_with_their_last_value() -> None:
    r = Request(id="s", prompt_tokens=5, output_tokens=5, acceptance=(0.9, 0.6))
    model = AcceptanceModel.from_requests([r], 5)
    assert model.conditional[0] == pytest.approx([0.9, 0.6, 0.6, 0.6, 0.6])


@pytest.mark.parametrize("c", [0.5, 0.85])
def test_curve_from_counts_gives_every_window_up_to_the_measured_one(c: float) -> None:
    drafts, window = 100_000, 6
    per_pos = tuple(round(drafts * c**k) for k in range(1, window + 1))
    counts = AcceptanceCounts(drafts, drafts * window, sum(per_pos), per_pos)
    curve = curve_from_counts(counts)
    assert curve is not None and curve.samples == drafts
    for n in range(1, window + 1):
        assert curve.expected_tokens(n) == pytest.approx(geometric_expected(c, n), rel=1e-4)
        assert curve.expected_lo[n - 1] < curve.expected_tokens(n) < curve.expected_hi[n - 1]
    assert curve.conditional == pytest.approx((c,) * window, rel=1e-3)
    assert counts.mean_accepted_length == pytest.approx(curve.expected_tokens(window), rel=1e-4)


def test_curve_from_counts_interval_is_the_standard_error_over_the_drafts() -> None:
    # Drafts of a window of 6, each accepting its first k tokens (c=0.7 per position). At
    # every window n the counters give 1 + the mean of min(accepted, n) over the drafts, and
    # an interval of 1.96 standard errors of that mean: read here off the drafts themselves.
    rng = np.random.default_rng(5)
    drafts, window = 20_000, 6
    accepted = np.cumprod(rng.random((drafts, window)) < 0.7, axis=1).sum(axis=1)
    per_pos = tuple(int((accepted >= k).sum()) for k in range(1, window + 1))
    curve = curve_from_counts(AcceptanceCounts(drafts, drafts * window, int(accepted.sum()),
                                               per_pos))
    assert curve is not None
    for n in range(1, window + 1):
        x = np.minimum(accepted, n)
        se = x.std() / math.sqrt(drafts)
        assert curve.expected_tokens(n) == pytest.approx(1.0 + x.mean())
        assert curve.expected_lo[n - 1] == pytest.approx(1.0 + x.mean() - 1.96 * se)
        assert curve.expected_hi[n - 1] == pytest.approx(1.0 + x.mean() + 1.96 * se)


def test_curve_from_counts_without_drafts_is_none() -> None:
    assert curve_from_counts(AcceptanceCounts(0, 0, 0, (0, 0))) is None
