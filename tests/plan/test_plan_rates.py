"""The rate a plan serves: the mean, the busiest window, and a window longer than the sample."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.errors import PlanError
from autotune.plan import duration_text, traffic_rates


def test_the_busiest_window_counts_a_burst_the_mean_spreads_out() -> None:
    # 1 req/s for 600 s, plus 120 more requests crowded into the minute from 300 s
    calm = np.arange(0.0, 600.0, 1.0)
    burst = np.linspace(300.0, 359.5, 120)
    r = traffic_rates(np.concatenate([calm, burst]).tolist(), 60.0, what="w")
    assert r.basis == "peak" and r.window_s == 60.0
    assert r.peak_per_s == pytest.approx((60 + 120) / 60.0)
    assert r.mean_per_s == pytest.approx((600 + 120 - 1) / 599.0)
    assert r.planned_per_s == r.peak_per_s > r.mean_per_s
    assert "busiest 1m" in r.note


def test_a_steady_traffic_peaks_at_its_mean() -> None:
    r = traffic_rates(np.arange(0.0, 900.0, 0.5).tolist(), 300.0, what="w")
    assert r.peak_per_s == pytest.approx(r.mean_per_s, rel=0.01)


def test_a_sample_shorter_than_the_default_window_is_planned_at_its_mean() -> None:
    r = traffic_rates(np.arange(0.0, 100.0, 0.25).tolist(), None, what="w")
    assert r.basis == "mean" and r.planned_per_s == r.mean_per_s
    assert "shorter than the default peak window (5m)" in r.note


def test_a_window_set_longer_than_the_sample_names_the_key() -> None:
    with pytest.raises(PlanError, match=r"--peak-window 10m is longer than the sample of "
                                        r"workload 'code' \(1m39s\)"):
        traffic_rates(np.arange(0.0, 100.0).tolist(), 600.0, what="workload 'code'",
                      key="--peak-window")


def test_no_arrival_times_is_an_error() -> None:
    with pytest.raises(PlanError, match="arrival times"):
        traffic_rates([3.0, 3.0], None, what="w")


@pytest.mark.parametrize(("seconds", "text"), [(300, "5m"), (166.1, "2m46s"), (40, "40s"),
                                               (5400, "1h30m")])
def test_durations_read_as_people_write_them(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text
