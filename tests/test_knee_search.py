"""The knee search against margins it was not built on: a queue whose p99 TTFT explodes past the
knee (flat then steep), a p99 that sits just over its bound for a wide range of rates (regula
falsi's worst case), and noise that makes readings disagree with their neighbours."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from autotune.knee_search import (
    MAX_SCALE,
    MIN_SCALE,
    RESOLUTION,
    Probe,
    first_step,
    predict,
    predicted_readings,
    search,
)

Read = Callable[[float], Probe]


def _queue(knee: float) -> Read:
    """An M/M/1-like TTFT against a bound: the margin log(p99 / bound) with p99 ∝ 1 / (1 - ρ),
    ρ = rate / (1.2 knee), scaled so the bound is met exactly at ``knee``; past 1.2 knee the
    replica falls behind and says what share it sustains."""
    def read(scale: float) -> Probe:
        rho = scale / (1.2 * knee)
        if rho >= 1:
            return Probe(False, math.log(10.0), 1.2 * knee / scale)
        margin = math.log((1 - 1 / 1.2) / (1 - rho))
        return Probe(margin <= 0, margin)
    return read


def _flat(knee: float) -> Read:
    """A p99 a hair under its bound below the knee and a hair over it above (interpolation
    learns nothing from the margins)."""
    return lambda scale: Probe(scale <= knee, -1e-3 if scale <= knee else 1e-3)


def _noisy(knee: float, seed: int) -> Read:
    rng = np.random.default_rng(seed)

    def read(scale: float) -> Probe:
        margin = 0.7 * math.log(scale / knee) + float(rng.normal(0, 0.01))
        return Probe(margin <= 0, margin)
    return read


KNEES = (0.05, 0.3, 0.9, 2.5, 8.0, 20.0)
BUDGET = 12


def _bisection_readings(width: float) -> int:
    """Readings bisection takes to bring a bracket of log ``width`` within the resolution."""
    return max(0, math.ceil(math.log2(width / math.log1p(RESOLUTION))))


@pytest.mark.parametrize("world", [_queue, _flat])
def test_the_knee_is_pinned_within_the_resolution_around_the_truth(world: Callable[[float],
                                                                               Read]) -> None:
    for knee in KNEES:
        for start, sd in ((1.0, None), (knee * 3, 0.3), (knee / 3, 0.3), (knee * 1.05, 0.1)):
            found = search(world(knee), start, sd, BUDGET)
            assert found.low is not None and found.high is not None, (knee, start)
            assert found.low <= knee < found.high * (1 + 1e-9), (knee, start, found)
            assert found.resolution <= RESOLUTION + 1e-9, (knee, start, found)
            assert len({s for s, _ in found.probes}) == len(found.probes)  # never read twice


def test_the_pin_never_takes_more_than_one_reading_beyond_bisection() -> None:
    # the flat margin defeats interpolation: the projection keeps the pin within bisection + 1
    for knee in KNEES:
        for start in (knee * 1.4, knee / 1.4):
            found = search(_flat(knee), start, None, 40)
            scales = [s for s, _ in found.probes]
            assert found.low is not None and found.high is not None
            # the bracket is the first met/missed pair read
            bracket = next(i for i, s in enumerate(scales)
                           if (s <= knee) != (scales[0] <= knee)) + 1
            lo, hi = sorted(scales[bracket - 2:bracket])
            pins = len(scales) - bracket
            assert pins <= _bisection_readings(math.log(hi / lo)) + 1, (knee, start, scales)


def test_a_hint_off_by_three_costs_about_what_no_hint_does() -> None:
    # the no-hint search starts at the rate to serve (1x); the hinted one at 3x or 1/3 of the
    # knee with a log sd of 0.3 (the error is 3.7 sd). Over knees spread log-uniformly on both
    # sides of 1x, the hint that far off costs at most one reading more on average, and a hint
    # near the knee costs fewer
    knees = np.geomspace(1 / 32, 32, 25)
    for world in (_queue, _flat, lambda k: _noisy(k, 3)):
        plain = np.mean([len(search(world(k), 1.0, None, BUDGET).probes) for k in knees])
        for factor in (3.0, 1 / 3):
            off = np.mean([len(search(world(k), k * factor, 0.3, BUDGET).probes)
                           for k in knees])
            assert off <= plain + 1, (factor, off, plain)
        near = np.mean([len(search(world(k), k * 1.05, 0.1, BUDGET).probes) for k in knees])
        assert near < plain - 2


def test_the_first_step_follows_the_hint_within_the_resolution_and_the_plain_step() -> None:
    assert first_step(None) is None and first_step(math.nan) is None
    assert first_step(0.0) == pytest.approx(1 + 2 * RESOLUTION)
    assert first_step(0.2) == pytest.approx(math.exp(0.2))
    assert first_step(5.0) == 2.0


def test_the_predicted_cost_is_the_search_on_the_hints_knee() -> None:
    # a surer hint is expected to take fewer readings; the cost is what the rates read cost
    sure, unsure = predicted_readings(0.05, 7), predicted_readings(0.8, 7)
    assert sure < unsure <= 7
    assert predicted_readings(None, 7) <= 7
    per_rate = predict(2.0, 0.3, 7, lambda scale: 1.0 / scale)
    flat = predict(2.0, 0.3, 7, lambda scale: 1.0)
    assert flat.cost == pytest.approx(flat.readings)
    assert per_rate.readings == flat.readings
    assert 1 / (2.0 * math.exp(2)) < per_rate.cost / per_rate.readings < 1 / (2.0 * math.exp(-2))
    # in a world built otherwise (a queue's flat-then-steep p99), the mean over knees drawn
    # from the hint is within 1.5 readings of the prediction (0.1, 1.0 and 1.3 too few at sd
    # 0.1, 0.3, 0.6), nearer than a margin linear to the knee predicts (0.4, 1.6, 1.9)
    rng = np.random.default_rng(0)
    for sd in (0.1, 0.3, 0.6):
        knees = np.exp(rng.normal(math.log(2.0), sd, 200)).clip(MIN_SCALE, MAX_SCALE)
        spent = float(np.mean([len(search(_queue(float(k)), 2.0, sd, 7).probes)
                               for k in knees]))
        linear = float(np.mean([len(search(lambda s, k=float(k): Probe(s <= k, math.log(s / k)),
                                           2.0, sd, 7).probes) for k in knees]))
        predicted = predict(2.0, sd, 7, lambda s: 0.0).readings
        assert abs(spent - predicted) <= 1.5 and abs(spent - predicted) < abs(spent - linear)


def test_the_pin_interpolates_on_the_constraint_that_missed() -> None:
    # a p99 flat well inside its bound and a settle-like constraint crossing linearly: the
    # overall margin (their max) is flat below the knee, the settle margin is not
    def read(knee: float) -> Read:
        def probe(scale: float) -> Probe:
            settle = math.log(scale / knee)
            return Probe(settle <= 0, max(-0.2, settle), parts=(-0.2, settle))
        return probe

    with_parts = [len(search(read(k), 1.0, None, 12).probes) for k in KNEES]
    without = [len(search(lambda s, k=k: replace(read(k)(s), parts=()), 1.0, None,
                          12).probes) for k in KNEES]
    assert sum(with_parts) < sum(without)
    for k in KNEES:
        found = search(read(k), 1.0, None, 12)
        assert found.low is not None and found.low <= k and found.resolution <= RESOLUTION + 1e-9


def test_a_start_a_rounding_above_the_slowest_scale_brackets_and_predicts() -> None:
    # a hint clamped just above MIN_SCALE by floating point, the knee at MIN_SCALE: the two
    # ends of the bracket share their log, and the search and its prediction still return
    start = MIN_SCALE * (1.0 + 4e-16)
    assert start > MIN_SCALE and math.log(start) - math.log(MIN_SCALE) <= 0.0

    def read(scale: float) -> Probe:
        return Probe(scale <= MIN_SCALE, -0.1 if scale <= MIN_SCALE else 0.1)

    found = search(read, start, 1.7, 7)
    assert found.low == MIN_SCALE and found.high == start
    assert predict(start, 1.7, 7, lambda _: 1.0).readings >= 2
