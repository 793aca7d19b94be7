"""Calibration of miscalibrated confidence-head predictions against acceptance counters."""

from __future__ import annotations

import numpy as np
import pytest
from verify_loop import simulate_counts

from autotune.acceptance import (
    AcceptanceModel,
    CountsObservation,
    HeadCalibration,
    calibrate,
    ece,
    usable,
)
from autotune.acceptance.calibration import split_counts
from autotune.types import AcceptanceCounts, Request

BLOCK = 8


def logit(p: np.ndarray) -> np.ndarray:
    return np.log(p / (1 - p))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def synthetic(seed: int, n: int = 300, temperature: float = 0.75, bias: float = 0.3
              ) -> tuple[list[Request], np.ndarray]:
    """Requests whose predictions are an overconfident, biased view of their true profile."""
    rng = np.random.default_rng(seed)
    true_logit = (1.3 - 0.12 * np.arange(BLOCK) + 0.5 * rng.standard_normal((n, 1))
                  + 0.15 * rng.standard_normal((n, BLOCK)))
    head = sigmoid(true_logit / temperature + bias + 0.2 * rng.standard_normal((n, BLOCK)))
    out = rng.integers(40, 400, n)
    reqs = [Request(id=str(i), prompt_tokens=10, output_tokens=int(out[i]),
                    acceptance=tuple(float(x) for x in head[i])) for i in range(n)]
    return reqs, sigmoid(true_logit)


def test_calibration_lowers_ece_on_miscalibrated_predictions() -> None:
    reqs, truth = synthetic(1)
    model = AcceptanceModel.from_requests(reqs, BLOCK)
    run = CountsObservation(7, simulate_counts(reqs, truth, 7, seed=2))
    cal = calibrate(model, [run])
    assert cal.method in ("temperature", "isotonic")
    assert cal.ece_before is not None and cal.ece_after is not None
    assert cal.ece_before > 0.03                       # the head is off by several points
    assert cal.ece_after < cal.ece_before / 3          # held out (two-fold over the drafts)
    # a run the calibration never saw, at another window, agrees with it too
    other = CountsObservation(4, simulate_counts(reqs, truth, 4, seed=3))
    before, after = ece(model, [other]), ece(cal.apply_to(model), [other])
    assert before is not None and after is not None and after < before / 3
    # overconfident predictions need temperatures above 1 (they are pulled towards 0.5)
    if cal.method == "temperature":
        assert np.mean(cal.temperatures[:7]) > 1.0
    params = cal.params()
    assert params["scheme"] == "two-fold split of the drafts"
    assert set(params["heldout_ece"]) == {"identity", "temperature", "isotonic"}


def test_several_runs_are_held_out_one_at_a_time() -> None:
    reqs, truth = synthetic(4, temperature=1.4, bias=-0.3)    # underconfident, biased low
    model = AcceptanceModel.from_requests(reqs, BLOCK)
    runs = [CountsObservation(w, simulate_counts(reqs, truth, w, seed=10 + w)) for w in (7, 5, 3)]
    cal = calibrate(model, runs)
    assert cal.scheme == "leave-one-run-out" and cal.runs == 3
    assert cal.ece_before is not None and cal.ece_after is not None
    assert cal.ece_after < cal.ece_before / 2
    calibrated = cal.apply_to(model).conditional
    assert np.abs(calibrated - truth).mean() < np.abs(model.conditional - truth).mean()


def test_calibrated_predictions_are_left_alone() -> None:
    reqs, truth = synthetic(5, temperature=1.0, bias=0.0)
    honest = [Request(id=r.id, prompt_tokens=10, output_tokens=r.output_tokens,
                      acceptance=tuple(float(x) for x in t)) for r, t in zip(reqs, truth,
                                                                              strict=True)]
    model = AcceptanceModel.from_requests(honest, BLOCK)
    run = CountsObservation(7, simulate_counts(honest, truth, 7, seed=6))
    cal = calibrate(model, [run])
    assert cal.ece_before is not None and cal.ece_before < 0.015  # sampling noise only
    assert cal.ece_after is not None and cal.ece_after <= cal.heldout["identity"] + 1e-12


def test_isotonic_map_is_monotone_and_applies_to_every_position() -> None:
    cal = HeadCalibration(method="isotonic", knots_x=(0.0, 0.5, 1.0), knots_y=(0.0, 0.6, 0.9))
    c = np.array([[0.25, 0.5, 0.75, 1.0]])
    assert cal.apply(c) == pytest.approx(np.array([[0.3, 0.6, 0.75, 0.9]]))
    reqs, truth = synthetic(7)
    model = AcceptanceModel.from_requests(reqs, BLOCK)
    from autotune.acceptance.calibration import _fit_isotonic
    fitted = _fit_isotonic(model, [CountsObservation(7, simulate_counts(reqs, truth, 7, 8))],
                           [np.ones(7)])
    assert np.all(np.diff(fitted.knots_y) >= -1e-12)


def test_temperature_past_the_measured_window_repeats_the_last_one() -> None:
    cal = HeadCalibration(method="temperature", temperatures=(1.0, 2.0))
    c = np.full((1, 4), 0.8)
    out = cal.apply(c)[0]
    assert out[0] == pytest.approx(0.8)
    assert out[1:] == pytest.approx([sigmoid(logit(np.array(0.8)) / 2.0)] * 3)


def test_counters_of_cut_windows_are_not_used() -> None:
    full = AcceptanceCounts(100, 700, 300, (80, 60, 50, 40, 30, 25, 15))
    cut = AcceptanceCounts(100, 500, 300, (80, 60, 50, 40, 30, 25, 15))  # adaptive / budget
    assert usable(CountsObservation(7, full))
    assert not usable(CountsObservation(7, cut))
    assert not usable(CountsObservation(7, AcceptanceCounts(0, 0, 0, (0,) * 7)))
    reqs, _ = synthetic(9, n=20)
    assert calibrate(AcceptanceModel.from_requests(reqs, BLOCK),
                     [CountsObservation(7, cut)]).ece_before is None


def test_split_counts_partitions_the_drafts() -> None:
    counts = AcceptanceCounts(1000, 5000, 2100, (800, 600, 400, 200, 100))
    a, b = split_counts(counts, 5, seed=3)
    assert a.drafts + b.drafts == 1000
    assert tuple(x + y for x, y in zip(a.accepted_per_pos, b.accepted_per_pos,
                                       strict=True)) == counts.accepted_per_pos
    assert a.accepted + b.accepted == counts.accepted
    for half in (a, b):
        assert list(half.accepted_per_pos) == sorted(half.accepted_per_pos, reverse=True)
