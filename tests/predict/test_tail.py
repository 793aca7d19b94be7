"""The tail model: the sampling law of a measured p99 against a Monte Carlo of gaps drawn
another way, a calibration whose intervals narrow with readings and follow the measured level,
and the readings a trial's summary holds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.acceptance import AcceptanceModel
from autotune.predict import ConfigGrid, ReplicaFactors, StepCostModel, WorkloadModel
from autotune.predict.facts import kimi_h200_facts
from autotune.predict.observation import observed
from autotune.predict.replica import predict_replica
from autotune.predict.tail import (
    TailModel,
    TailReading,
    _p99_cdf,
    replay_tail_keys,
    tail_readings,
)
from autotune.predict.tail_physics import Physics, slow_runs
from autotune.types import Request, Slo, TrialConfig

PLAIN_S, STALL_S, BOUND_S = 0.010, 0.100, 0.050
GAPS = 2000


def _mixture(stalled_share: float, cluster: float) -> Physics:
    """Gaps of a replay: plain 10 ms steps and 100 ms chunk steps, one chunk stalling
    ``cluster`` gaps at once."""
    stalled = stalled_share * GAPS
    return Physics(durations=np.asarray([[PLAIN_S, STALL_S]]),
                    weights=np.asarray([[GAPS - stalled, stalled]]), stall_from=1,
                    cluster=np.asarray([cluster]), ttft=np.zeros((1, 1)), wait=np.zeros((1, 1)),
                    feasible=np.asarray([True]))


def _monte_carlo(stalled_share: float, cluster: int, draws: int = 4000) -> float:
    """Share of replays whose p99 gap meets the bound: chunk steps arrive as a Poisson count,
    each stalls ``cluster`` gaps; the p99 is numpy's quantile of the gaps drawn."""
    rng = np.random.default_rng(3)
    met = 0
    for _ in range(draws):
        chunks = rng.poisson(stalled_share * GAPS / cluster)
        stalled = min(chunks * cluster, GAPS)
        gaps = np.concatenate([np.full(GAPS - stalled, PLAIN_S), np.full(stalled, STALL_S)])
        met += float(np.quantile(gaps, 0.99)) <= BOUND_S
    return met / draws


@pytest.mark.parametrize("cluster", [1, 8, 32])
@pytest.mark.parametrize("share", [0.004, 0.008, 0.010, 0.013, 0.02])
def test_the_chance_a_p99_meets_its_bound_follows_how_stalls_land(share: float,
                                                                  cluster: int) -> None:
    chance = float(_p99_cdf("itl_p99_ms", _mixture(share, cluster),
                            np.asarray([[BOUND_S]]))[0, 0])
    assert chance == pytest.approx(_monte_carlo(share, cluster), abs=0.12)


def test_clustered_stalls_make_a_verdict_near_the_edge_uncertain() -> None:
    # the same 0.6% of gaps stalled: one by one they almost never push past 1%; in clusters
    # of 32 (one chunk step stalls the whole batch) a single chunk does
    alone = float(_p99_cdf("itl_p99_ms", _mixture(0.006, 1), np.asarray([[BOUND_S]]))[0, 0])
    clustered = float(_p99_cdf("itl_p99_ms", _mixture(0.006, 32),
                               np.asarray([[BOUND_S]]))[0, 0])
    assert alone > 0.95
    assert clustered < 0.85


FACTS = kimi_h200_facts()
COST = StepCostModel(FACTS)
SLO = Slo(ttft_p99_ms=3000.0, itl_p99_ms=60.0)
CONFIGS = [TrialConfig(n, False, s, t) for n in (1, 3) for s in (16, 64) for t in (2048, 8192)]


def _workload() -> WorkloadModel:
    rng = np.random.default_rng(5)
    arrivals = np.cumsum(rng.exponential(0.25, 120))
    reqs = [Request(id=str(i), prompt_tokens=int(rng.integers(200, 6000)),
                    output_tokens=int(rng.integers(50, 400)), arrival_s=float(a),
                    acceptance=(0.8,) * 4) for i, a in enumerate(arrivals)]
    return WorkloadModel(reqs, AcceptanceModel.from_requests(reqs, 4), warmup=0, slo=SLO,
                         kv_tokens=FACTS.kv_cache_tokens())


def _readings(wl: WorkloadModel, configs: list[TrialConfig], scales: list[float],
              bias: float) -> list[TailReading]:
    """Readings of a world whose every step and wait is exp(bias) times the physics'."""
    out = predict_replica(wl, ConfigGrid.of(configs), COST, ReplicaFactors(), "goodput",
                          scale=np.asarray(scales))
    return [TailReading(c, s, float(out.itl_p99_ms[i]) * math.exp(bias),
                        float(out.ttft_p99_ms[i]) * math.exp(bias))
            for i, (c, s) in enumerate(zip(configs, scales, strict=True))]


def _width(model: TailModel, config: TrialConfig, scale: float) -> float:
    fc = model.predict([config], [scale])
    return float(np.log(fc.high["itl_p99_ms"][0] / fc.low["itl_p99_ms"][0]))


def test_readings_move_the_forecast_to_the_measured_level_and_narrow_it() -> None:
    wl = _workload()
    bias = 0.4
    scales = [0.5, 1.0, 2.0]
    few = _readings(wl, CONFIGS[:1], scales[:1], bias)
    many = _readings(wl, [c for c in CONFIGS[:3] for _ in scales],
                     [s for _ in CONFIGS[:3] for s in scales], bias)
    prior = TailModel.fit(wl, COST, ReplicaFactors(), SLO, [], block=8)
    one = TailModel.fit(wl, COST, ReplicaFactors(), SLO, few, block=8)
    nine = TailModel.fit(wl, COST, ReplicaFactors(), SLO, many, block=8)
    unread, scale = CONFIGS[5], 1.0
    physics = _readings(wl, [unread], [scale], 0.0)[0]
    for model in (one, nine):
        fc = model.predict([unread], [scale])
        assert fc.median["itl_p99_ms"][0] > physics.itl_p99_ms * math.exp(bias / 2)
        assert fc.low["ttft_p99_ms"][0] <= physics.ttft_p99_ms * math.exp(bias) \
            <= fc.high["ttft_p99_ms"][0]
    assert _width(nine, unread, scale) < _width(one, unread, scale) \
        < _width(prior, unread, scale)
    # a config read is known better than one that was not
    assert _width(nine, CONFIGS[0], 1.0) <= _width(nine, unread, scale)


def test_the_chance_to_meet_falls_as_the_bound_tightens() -> None:
    wl = _workload()
    model = TailModel.fit(wl, COST, ReplicaFactors(), SLO,
                          _readings(wl, CONFIGS[:2], [1.0, 1.0], 0.0), block=8)
    fc = model.predict([CONFIGS[2]], [1.0])
    median = float(fc.median["itl_p99_ms"][0])
    chances = []
    for bound in (median / 2, median, median * 2):
        tight = TailModel(wl, COST, ReplicaFactors(), Slo(itl_p99_ms=bound), model.residuals)
        chances.append(float(tight.predict([CONFIGS[2]], [1.0]).chance_met[0]))
    assert chances[0] < 0.25 < chances[1] < 0.75 < chances[2]


def test_a_summary_gives_every_replay_with_p99s_else_the_kept_and_target_readings() -> None:
    c = CONFIGS[0]
    summary: dict[str, float] = {}
    for i, (scale, itl, ttft) in enumerate([(0.5, 30.0, 400.0), (1.0, 45.0, 900.0),
                                            (2.0, 80.0, 4000.0)]):
        itl_key, ttft_key = replay_tail_keys(i)
        summary.update({f"replay{i}_scale": scale, itl_key: itl, ttft_key: ttft})
    got = tail_readings(c, summary, target=1.0)
    assert [(r.scale, r.itl_p99_ms, r.ttft_p99_ms) for r in got] == [
        (0.5, 30.0, 400.0), (1.0, 45.0, 900.0), (2.0, 80.0, 4000.0)]
    old = {"load_scale": 1.5, "itl_p99_ms": 55.0, "ttft_p99_ms": 2000.0,
           "target_itl_p99_ms": 40.0, "target_ttft_p99_ms": 800.0, "replay0_scale": 1.0}
    got = tail_readings(c, old, target=1.0)
    assert [(r.scale, r.itl_p99_ms) for r in got] == [(1.0, 40.0), (1.5, 55.0)]


def test_an_observation_keeps_every_reading_s_p99s() -> None:
    from autotune.predict import Observation

    summary = {"load_scale": 2.0, "capacity_met_slo": 1.0, "itl_p99_ms": 50.0,
               "ttft_p99_ms": 900.0}
    for i, (scale, itl) in enumerate([(1.0, 30.0), (2.0, 50.0), (4.0, 90.0)]):
        itl_key, ttft_key = replay_tail_keys(i)
        summary.update({f"replay{i}_scale": scale, itl_key: itl, ttft_key: 300.0 * scale})
    obs = Observation.from_result(CONFIGS[0], 5.0, True, summary, slo=SLO, target=1.0)
    assert [(t.scale, t.itl_p99_ms, t.ttft_p99_ms) for t in obs.tails] == [
        (1.0, 30.0, 300.0), (2.0, 50.0, 600.0), (4.0, 90.0, 1200.0)]
    failed = Observation.from_result(CONFIGS[0], None, False, summary, slo=SLO, target=1.0)
    assert failed.tails == ()


def test_an_observation_reads_every_replay_however_many_and_only_what_a_server_reports() -> None:
    from autotune.predict import Observation

    # a capacity reading told to take more replays than the default's (--capacity-replays 20)
    summary: dict[str, float] = {"load_scale": 1.0, "capacity_met_slo": 1.0}
    scales = [0.1 * (i + 1) for i in range(20)]
    for i, scale in enumerate(scales):
        itl_key, ttft_key = replay_tail_keys(i)
        summary.update({f"replay{i}_scale": scale, itl_key: 30.0 + i, ttft_key: 300.0,
                        f"replay{i}_decode_time_s": 2.0, f"replay{i}_decode_tokens": 100.0,
                        f"replay{i}_duration_s": 10.0, f"replay{i}_mean_step_s": 0.02})
    obs = Observation.from_result(CONFIGS[0], 5.0, True, summary, slo=SLO, target=1.0)
    assert [t.scale for t in obs.tails] == scales
    assert [p[0] for p in obs.points] == scales
    # a simulator's own reading of a replay is not what a server reports
    assert observed("replay19_itl_p99_ms") and not observed("replay19_mean_step_s")
    assert not observed("replay_scale") and not observed("replay1_scale_x")


def test_slow_requests_that_queue_together_count_as_one_run() -> None:
    # the four slowest of 200 requests: arriving one after another (one queue episode) they
    # make one run of 4, spread apart four runs of 1
    together = np.ones((1, 200))
    together[0, 50:54] = 10.0
    apart = np.ones((1, 200))
    apart[0, [10, 60, 110, 160]] = 10.0
    assert slow_runs(together)[0] == 4.0
    assert slow_runs(apart)[0] == 1.0


def test_the_batched_size_search_picks_what_one_size_at_a_time_picks() -> None:
    from autotune.predict.tail import _SIZE_PRIOR, _SIZES, _Basis, _best_sizes, _Sizes

    rng = np.random.default_rng(3)
    n = 12
    vecs = rng.normal(size=(4, n, 3))
    basis = _Basis(*(v @ v.T / 3.0 for v in vecs))
    error = rng.normal(scale=0.2, size=n)
    noise = rng.uniform(0.0001, 0.01, size=n)
    median, prior_sd = _SIZE_PRIOR
    best: tuple[float, _Sizes] | None = None
    for config in _SIZES:
        for nugget in _SIZES:
            for knee in _SIZES:
                sizes = _Sizes(float(config), float(nugget), float(knee), 0.5)
                chol = np.linalg.cholesky(sizes.combine(basis) + np.diag(nugget**2 + noise))
                a = np.linalg.solve(chol, error)
                score = (-0.5 * float(a @ a) - float(np.log(np.diag(chol)).sum())
                         - 0.5 * sum((math.log(v / median) / prior_sd) ** 2
                                     for v in (config, nugget, knee)))
                if best is None or score > best[0]:
                    best = (score, sizes)
    assert _best_sizes(basis, error, noise, 0.5) == best
