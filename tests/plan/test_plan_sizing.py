"""Replicas for a rate at a measured capacity: the count, its flip inside the interval, the
probability the SLO holds, and what lies outside the readings."""

from __future__ import annotations

import math

import pytest

from autotune.plan import capacity_of, replicas_for, size_for
from autotune.plan.measured import LEGACY_RESOLUTION, MeasuredCapacity
from autotune.slo import RESOLUTION, Slo
from autotune.types import TrialConfig

CONFIG = TrialConfig(3, False, 64, 8192)
SLO = Slo(ttft_p99_ms=3000, itl_p99_ms=60)


def reading(low: float, high: float | None = None, sustained: float | None = 1.0,
            scales: tuple[float, ...] = (), slice_rate: float | None = 2.0
            ) -> dict[str, float]:
    """A trial's metrics; ``slice_rate``: the rate (req/s at scale 1) of the slice its kept
    reading replayed, 61 requests (None: a reading that records no window)."""
    m = {"load_scale": low, "capacity_met_slo": 1.0}
    if slice_rate is not None:
        m.update(requests=61.0, capacity_window_s=60.0 / (low * slice_rate))
    if high is not None:
        m["capacity_high_scale"] = high
    if sustained is not None:
        m["capacity_sustained"] = sustained
    for i, s in enumerate(scales):
        m[f"replay{i}_scale"] = s
    return m


def capacity(m: dict[str, float], rate: float = 2.0) -> MeasuredCapacity:
    c = capacity_of(CONFIG, m, rate)
    assert isinstance(c, MeasuredCapacity)
    return c


def test_replicas_cover_the_rate_with_headroom() -> None:
    assert replicas_for(10.0, 5.0, 0.1) == 3  # 11 / 5
    assert replicas_for(9.0, 5.0, 0.1) == 2  # 9.9 / 5
    assert replicas_for(0.1, 5.0, 0.1) == 1


def test_the_interval_comes_from_the_missed_rate_or_the_resolution() -> None:
    c = capacity(reading(1.5, 1.8))
    assert (c.low_per_s, c.high_per_s, c.high_measured) == (3.0, 3.6, True)
    old = capacity(reading(1.5, sustained=None))  # a row from before the capacity keys
    # read by the search of its time, to 2%
    assert old.high_per_s == pytest.approx(3.0 * (1 + LEGACY_RESOLUTION))
    assert not old.high_measured
    pinned = capacity({**reading(1.5), "capacity_predicted_readings": 4.0})  # 3%, unrecorded
    assert pinned.high_per_s == pytest.approx(3.0 * (1 + RESOLUTION))
    recorded = capacity({**reading(1.5), "capacity_predicted_readings": 4.0,
                         "capacity_resolution_target": 0.01})
    assert recorded.high_per_s == pytest.approx(3.0 * 1.01)
    assert old.sustained is None and "unknown" in old.trusted
    assert "burst" in capacity(reading(1.5, 1.8, sustained=0.0)).trusted
    assert capacity(reading(1.5, 1.8)).trusted == ""
    undecided = capacity({**reading(1.5, 1.8), "slo_verdict_code": 0.5})
    assert "undecided" in undecided.trusted and undecided.as_dict()["slo_verdict_code"] == 0.5


def test_a_count_that_flips_inside_the_interval_says_so() -> None:
    c = capacity(reading(1.0, 1.5, scales=(1.0, 2.0)))  # 2 to 3 req/s per replica
    s = size_for(5.0, c, 0.1, 8, SLO)  # 5.5 / 2 -> 3 replicas; 5.5 / 3 -> 2
    assert (s.replicas, s.replicas_if_high, s.gpus, s.gpus_if_high) == (3, 2, 24, 16)
    assert s.flips and any("flips inside the interval" in n for n in s.notes())
    steady = size_for(3.0, c, 0.1, 8, SLO)  # 3.3/2 -> 2 ; 3.3/3 -> 2
    assert not steady.flips


def test_the_slo_probability_falls_as_each_replica_nears_its_capacity() -> None:
    c = capacity(reading(1.0, 1.2))  # 2 req/s per replica
    light = size_for(2.0, c, 1.0, 8, SLO)  # 2 replicas at 1 req/s each
    edge = size_for(1.99, c, 1e-6, 8, SLO)  # 1 replica at 1.99 req/s: at the capacity
    assert light.replicas == 2 and edge.replicas == 1
    assert light.probability is not None and edge.probability is not None
    assert light.probability > 0.99 and 0.4 < edge.probability < 0.6


def test_a_rate_faster_than_any_replay_lies_outside_what_was_measured() -> None:
    c = capacity(reading(1.0, 1.5, scales=(1.0, 2.0, 1.5)))  # replays up to 4 req/s
    assert not size_for(4.0, c, 0.1, 8, SLO).outside_measured
    far = size_for(16.0, c, 0.1, 8, SLO)
    assert far.outside_measured and any("outside what was measured" in n for n in far.notes())


def test_the_capacity_is_the_rate_sustained_on_the_slice_the_reading_replayed() -> None:
    # the kept reading replayed a slice 2.5x denser than the sample's mean of 2 req/s
    c = capacity(reading(1.5, 1.8, slice_rate=5.0), rate=2.0)
    assert c.unit == "sustained" and c.slice_rate_ratio == pytest.approx(2.5)
    assert c.low_per_s == pytest.approx(1.5 * 5.0) and c.high_per_s == pytest.approx(1.8 * 5.0)
    assert c.covered_per_s >= c.low_per_s and c.trusted == ""
    # the same reading without its window: the mean-rate conversion, said so
    old = capacity(reading(1.5, 1.8, slice_rate=None), rate=2.0)
    assert old.unit == "mean" and old.slice_rate_ratio is None
    assert (old.low_per_s, old.high_per_s) == (3.0, 3.6)
    assert "mean rate" in old.trusted and old.as_dict()["capacity_unit"] == "mean"
    rate = 20.0
    assert size_for(rate, c, 0.1, 8, SLO).replicas == replicas_for(rate, 7.5, 0.1) == 3
    assert size_for(rate, old, 0.1, 8, SLO).replicas == replicas_for(rate, 3.0, 0.1) == 8


def test_the_slo_probability_is_read_in_the_capacitys_own_unit() -> None:
    # one replica at its capacity is a coin flip, whichever unit the capacity is in
    for slice_rate in (2.0, 5.0, None):
        c = capacity(reading(1.0, 1.2, slice_rate=slice_rate))
        edge = size_for(c.low_per_s * 0.999, c, 1e-6, 8, SLO)
        assert edge.replicas == 1 and edge.probability is not None
        assert 0.4 < edge.probability < 0.6


def test_no_capacity_says_why() -> None:
    assert "no capacity reading" in str(capacity_of(CONFIG, {"goodput": 1.0}, 2.0))
    missed = capacity_of(CONFIG, {"load_scale": 0.25, "capacity_met_slo": 0.0}, 2.0)
    assert isinstance(missed, str) and "meets the SLO at no rate" in missed
    assert math.isfinite(capacity(reading(1.0)).covered_per_s)
