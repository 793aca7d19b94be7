"""Bounded, sustained capacity readings with p99 verdicts, against replicas built differently
from the simulator: one whose token gap grows with the offered rate (a smooth knee known in
closed form), one whose every request takes a fixed lifetime (never a knee: only how long its
window is limits what a reading can credit), and the FIFO server of test_capacity."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from autotune.cli import cli
from autotune.errors import ConfigError
from autotune.orchestrate.capacity import RESOLUTION, replay_at_capacity
from autotune.orchestrate.capacity_window import (
    SETTLE_LIFETIMES,
    busiest_slice,
    check_window,
    settle_margin,
    warmed_window,
    window_requests,
)
from autotune.policy import DEFAULT_POLICY_PATH
from autotune.slo import MAX_SCALE
from autotune.types import CapacityHint, Measurement, ReplaySchedule, Request, Slo

#: Output tokens of every request.
TOKENS = 50


def _sample(n: int, seed: int = 11) -> list[Request]:
    """``n`` requests arriving about 1 s apart (uniform gaps of 0.5-1.5 s)."""
    arrivals = np.concatenate([[0.0], np.cumsum(np.random.default_rng(seed).uniform(0.5, 1.5,
                                                                                      n - 1))])
    return [Request(f"r{i}", 100, TOKENS, arrival_s=float(a)) for i, a in enumerate(arrivals)]


@dataclass
class RateServer:
    """Serves every request at once (no queue): first token after ``ttft_s``, then one token
    every ``gap_per_rate_s`` × the offered rate (requests/s over the replayed arrivals), the
    gap a batch that grows with the rate would give. ``lifetime_s`` fixes the end-to-end
    latency instead when set. Records what each replay was handed."""

    gap_per_rate_s: float = 0.01
    ttft_s: float = 0.1
    lifetime_s: float | None = None
    spans: list[float] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)

    def replay(self, schedule: ReplaySchedule, progress: object = None) -> Measurement:
        reqs = list(schedule.requests)[schedule.warmup_requests:]
        arrivals = np.array([r.arrival_s for r in reqs]) / schedule.time_scale
        span = float(arrivals[-1] - arrivals[0]) if arrivals.size > 1 else 0.0
        self.spans.append(span)
        self.requests.append(len(reqs))
        rate = (arrivals.size - 1) / span if span > 0 else 0.0
        gap = self.gap_per_rate_s * rate
        n = arrivals.size
        e2e = (np.full(n, self.lifetime_s) if self.lifetime_s is not None else
               np.full(n, self.ttft_s + (TOKENS - 1) * gap))
        return Measurement(ttft_s=np.full(n, self.ttft_s), tpot_s=np.full(n, gap), e2e_s=e2e,
                           output_tokens=np.full(n, TOKENS), ok=np.ones(n, dtype=bool),
                           itl_s=np.full(n * (TOKENS - 1), gap),
                           duration_s=span + float(e2e.max()), wall_time_s=0.0,
                           busy_s=span + float(e2e.max()))

    def stop(self) -> None:
        pass


def _schedule(requests: list[Request], slo: Slo, window_s: float | None,
              hint: CapacityHint | None = None) -> ReplaySchedule:
    return ReplaySchedule(requests, mode="trace", capacity_slo=slo, capacity_window_s=window_s,
                          capacity_hint=hint)


def _readings(extra: dict[str, float]) -> list[tuple[float, float]]:
    """(scale, requests) of every reading, in the order of the replay{i} keys."""
    out = []
    while f"replay{len(out)}_scale" in extra:
        i = len(out)
        out.append((extra[f"replay{i}_scale"], extra[f"replay{i}_requests"]))
    return out


def test_the_busiest_slice_holds_the_most_arrivals_earliest_on_a_tie() -> None:
    arrivals = [0.0, 1.0, 2.0, 2.5, 2.6, 2.7, 10.0]
    assert busiest_slice(arrivals, 0.5) == (3, 6)
    assert busiest_slice(arrivals, 1.0) == (2, 6)
    assert busiest_slice(arrivals, 100.0) == (0, 7)
    assert busiest_slice([0.0, 5.0, 10.0], 1.0) == (0, 1)
    assert busiest_slice([], 1.0) == (0, 0)


def test_a_window_replays_a_slice_starting_at_zero_that_fits_at_the_rate_read() -> None:
    sample = _sample(300)
    for scale in (1 / 64, 0.5, 2.0):
        part = window_requests(sample, scale, 60.0)
        assert part[0].arrival_s == 0.0
        assert (part[-1].arrival_s or 0.0) / scale <= 60.0
        ids = [r.id for r in sample]
        first = ids.index(part[0].id)
        assert [r.id for r in part] == ids[first:first + len(part)]  # contiguous
    assert len(window_requests(sample, 10.0, 60.0)) == 300  # the whole sample fits
    assert window_requests(sample, 1.0, None) == sample


def test_a_reading_at_a_64th_of_the_rate_costs_a_window_not_the_stretched_sample() -> None:
    # A token gap 10 ms per request/s against a 1 ms bound: no rate down to 1/64 meets it.
    # Without a window each reading at 1/64 replays the 200-request sample for ~12,700 s.
    sample = _sample(200)
    slo = Slo(ttft_p99_ms=3000.0, itl_p99_ms=0.001)
    server = RateServer()
    m = replay_at_capacity(server, _schedule(sample, slo, 60.0), slo)
    assert m.extra["capacity_met_slo"] == 0.0
    assert min(scale for scale, _ in _readings(dict(m.extra))) < 1 / 32
    assert max(server.spans) <= 60.0
    readings = int(m.extra["capacity_replays"])
    busy = sum(m.extra[f"replay{i}_busy_s"] for i in range(readings))
    assert busy <= readings * 60.0 * (1 + 1 / SETTLE_LIFETIMES)
    unbounded = RateServer()
    replay_at_capacity(unbounded, _schedule(sample, slo, None), slo)
    assert max(unbounded.spans) > 100 * max(server.spans)


def test_a_rate_drained_from_a_burst_is_not_credited() -> None:
    # Every request lives 5 s and never waits: the SLO holds at any rate, but a reading
    # whose arrivals span less than 4 lifetimes (20 s) only drained a burst. The 120-request
    # sample spans ~120 s, so no rate above ~6x is sustained; without the rule 64x was read.
    sample = _sample(120)
    slo = Slo(ttft_p99_ms=3000.0, itl_p99_ms=100.0)
    span = float(sample[-1].arrival_s or 0.0)
    ceiling = span / (SETTLE_LIFETIMES * 5.0)
    m = replay_at_capacity(RateServer(lifetime_s=5.0), _schedule(sample, slo, 60.0), slo)
    assert m.extra["capacity_met_slo"] == 1.0
    assert m.extra["capacity_sustained"] == 1.0
    assert ceiling / (1 + 2 * RESOLUTION) <= m.extra["load_scale"] <= ceiling
    assert m.extra["capacity_window_s"] >= SETTLE_LIFETIMES * 5.0
    assert "capacity_high_scale" not in m.extra  # nothing missed the SLO: the sample ran out
    assert m.extra["load_scale"] < MAX_SCALE
    assert m.extra["capacity_slice_rate_ratio"] == pytest.approx(1.0, rel=0.02)  # all of it
    # a window shorter than 4 lifetimes sustains no rate: nothing is credited
    short = replay_at_capacity(RateServer(lifetime_s=5.0), _schedule(sample, slo, 15.0), slo)
    assert short.extra["capacity_met_slo"] == 0.0
    assert short.extra["capacity_sustained"] == 0.0


def test_the_capacity_is_bracketed_by_the_slowest_rate_missed() -> None:
    # gap = 10 ms × rate against a 60 ms bound: the knee is at 6 requests/s
    sample = _sample(1000)
    slo = Slo(ttft_p99_ms=3000.0, itl_p99_ms=60.0)
    m = replay_at_capacity(RateServer(), _schedule(sample, slo, 60.0), slo)
    low, high = m.extra["load_scale"], m.extra["capacity_high_scale"]
    assert m.extra["capacity_met_slo"] == 1.0 and m.extra["capacity_sustained"] == 1.0
    assert low < high <= low * 1.03  # the resolution near the knee
    assert 5.0 <= low <= 6.0  # the busiest slice arrives a little faster than the mean
    # in requests/s the reading is the knee: the sample's mean rate × load_scale × how much
    # denser the slice it replayed is
    mean_rate = (len(sample) - 1) / float(sample[-1].arrival_s or 0.0)
    ratio = m.extra["capacity_slice_rate_ratio"]
    assert ratio > 1.0
    assert mean_rate * low * ratio == pytest.approx(6.0, rel=0.03)


def test_an_undecided_p99_is_read_again_with_twice_the_window() -> None:
    # At the knee (~6x) a 30 s window holds ~180 requests: too few to bound a p99 TTFT from
    # above (undecided); twice the window holds ~360, which decide it
    slo = Slo(ttft_p99_ms=3000.0, itl_p99_ms=60.0)
    m = replay_at_capacity(RateServer(), _schedule(_sample(1000), slo, 30.0), slo)
    readings = _readings(dict(m.extra))
    assert len(readings) == m.extra["capacity_replays"]
    scale, requests = readings[-1]
    assert scale == m.extra["load_scale"]
    first = next(n for s, n in readings[:-1] if s == scale)
    assert requests >= 1.8 * first
    assert m.extra["slo_verdict_code"] == 1.0
    assert m.extra["p99_requests"] == requests >= 300
    # a 200-request sample never holds the 299 that bound a p99: no re-read is spent on it,
    # and the verdict stays undecided, and says so
    thin = replay_at_capacity(RateServer(), _schedule(_sample(200), slo, 30.0), slo)
    thin_readings = [s for s, _ in _readings(dict(thin.extra))]
    assert len(set(thin_readings)) == len(thin_readings)
    assert thin.extra["slo_verdict_code"] == 0.5
    assert thin.extra["ttft_p99_high_ms"] == math.inf
    assert thin.extra["capacity_met_slo"] == 1.0


def test_a_hint_reads_the_knee_in_fewer_readings_and_predicts_their_cost() -> None:
    sample = _sample(1000)
    slo = Slo(ttft_p99_ms=3000.0, itl_p99_ms=60.0)
    plain = replay_at_capacity(RateServer(), _schedule(sample, slo, 120.0), slo)
    hinted_server = RateServer()
    hinted = replay_at_capacity(
        hinted_server, _schedule(sample, slo, 120.0, CapacityHint(plain.extra["load_scale"]
                                                                  * 1.1, 0.15)), slo)
    assert hinted.extra["capacity_replays"] <= plain.extra["capacity_replays"]
    assert hinted.extra["load_scale"] == pytest.approx(plain.extra["load_scale"],
                                                       rel=2 * RESOLUTION)
    assert "target_itl_p99_ms" not in hinted.extra  # the rate to serve (1x) was not read
    spent = sum(hinted.extra[f"replay{i}_busy_s"]
                for i in range(int(hinted.extra["capacity_replays"])))
    predicted = hinted.extra["capacity_predicted_busy_s"]
    assert spent / 2 <= predicted <= spent * 2


def test_a_window_too_short_to_hold_a_request_is_an_error_naming_the_key() -> None:
    sample = _sample(100)  # ~1 request/s
    check_window(2.0, 1.0, "chat", sample)
    with pytest.raises(ConfigError, match=r"replay\.window_s: 0\.5 s holds 0\.5\d requests "
                                          r"of workload 'chat'.*set replay\.window_s to 1 s"):
        check_window(0.5, 1.0, "chat", sample)
    check_window(0.5, 4.0, "chat", sample)  # at 4x the rate the window holds two


def test_start_with_a_window_too_short_writes_nothing(tmp_path: Path) -> None:
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    data["replay"]["window_s"] = 0.1
    policy = tmp_path / "short.yaml"
    policy.write_text(yaml.safe_dump(data))
    db = tmp_path / "autotune.db"
    sample = Path(__file__).resolve().parents[2] / "examples" / "small.jsonl"
    result = CliRunner().invoke(cli, ["start", "--traffic", str(sample), "--policy", str(policy),
                                      "--db", f"sqlite:///{db}", "--once"])
    assert result.exit_code == 2, result.output
    assert "replay.window_s: 0.1 s holds" in result.stderr
    assert "Traceback" not in result.stderr
    assert not db.exists()



def test_a_reading_completing_under_four_fifths_of_its_rate_is_not_sustained() -> None:
    # 40 requests over a 20 s window, each living 1 s: sustained when the last completes a
    # lifetime after the last arrival; a drain of 8 s (the reading completed 20/28 = 71% of
    # the offered rate) only drained a burst, however short each request's own lifetime
    n = 40
    m = RateServer(lifetime_s=1.0).replay(ReplaySchedule(
        [Request(f"r{i}", 100, TOKENS, arrival_s=20.0 * i / (n - 1)) for i in range(n)]))
    assert settle_margin(m, 20.0) == pytest.approx(math.log(4 * 1.0 / 20.0))
    drained = replace(m, duration_s=28.0)
    assert settle_margin(drained, 20.0) == pytest.approx(math.log(4 * 8.0 / 20.0))
    assert settle_margin(drained, 20.0) > 0


def test_the_warm_up_is_taken_from_outside_the_window_it_is_judged_on() -> None:
    # a 20 s window at the rate to serve holds ~20 requests of a 1 request/s sample: with 16
    # warm-up requests taken from inside it, the first reading was judged on ~4
    sample = _sample(300)
    window = window_requests(sample, 1.0, 20.0)
    part, lead = warmed_window(sample, 1.0, 20.0, 16)
    assert lead == 16
    assert [r.id for r in part[lead:]] == [r.id for r in window]
    assert not {r.id for r in part[:lead]} & {r.id for r in window}
    arrivals = [float(r.arrival_s or 0.0) for r in part]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0
    assert arrivals[lead] <= 20.0 / SETTLE_LIFETIMES + 1e-9  # squeezed into a quarter window
    # at 1/64 of the rate the warm-up still arrives within a quarter of the window
    slow, lead = warmed_window(sample, 1 / 64, 20.0, 16)
    assert (slow[lead].arrival_s or 0.0) * 64 <= 20.0 / SETTLE_LIFETIMES + 1e-9
    # the capacity reading's first replay measures every request of its window
    slo = Slo(ttft_p99_ms=3000.0, itl_p99_ms=0.001)  # missed at every rate: it reads down
    server = RateServer()
    m = replay_at_capacity(server, replace(_schedule(sample, slo, 20.0), warmup_requests=16),
                           slo)
    assert m.extra["capacity_met_slo"] == 0.0
    assert server.requests[0] == len(window)  # the first replay, at the rate to serve
    # a window whose whole sample fits leaves its own first requests out, one at least measured
    whole, lead = warmed_window(sample[:10], 1.0, 1000.0, 16)
    assert lead == 9 and len(whole) == 10


def test_a_reading_records_its_predicted_and_spent_cost_and_resolution() -> None:
    sample = _sample(1000)
    slo = Slo(ttft_p99_ms=3000.0, itl_p99_ms=60.0)
    m = replay_at_capacity(RateServer(), _schedule(sample, slo, 60.0, CapacityHint(4.0, 0.3)),
                           slo)
    readings = int(m.extra["capacity_replays"])
    assert m.extra["capacity_busy_s"] == pytest.approx(
        sum(m.extra[f"replay{i}_busy_s"] for i in range(readings)))
    assert 1 <= m.extra["capacity_predicted_readings"] <= 7
    assert m.extra["capacity_resolution"] <= RESOLUTION + 1e-9
    assert m.extra["capacity_high_scale"] == pytest.approx(
        m.extra["load_scale"] * (1 + m.extra["capacity_resolution"]))
