"""Whether a capacity reading will be a sustained rate: the replica model's request lifetimes
bound the capacity a reading can credit, and readings whose lifetimes run longer than the
model's lower the chance the next one is sustained."""

from __future__ import annotations

import math

import numpy as np

from autotune.acceptance import AcceptanceModel
from autotune.predict import ConfigGrid, ReplicaFactors, StepCostModel, WorkloadModel
from autotune.predict.facts import kimi_h200_facts
from autotune.predict.replica import predict_replica
from autotune.predict.tail import TailModel, TailReading
from autotune.predict.tail_physics import physics
from autotune.slo import MIN_SCALE, SETTLE_LIFETIMES
from autotune.types import Request, Slo, TrialConfig

FACTS = kimi_h200_facts()
COST = StepCostModel(FACTS)
#: loose bounds: the p99s do not bind, so what a reading can credit is set by the lifetimes
SLO = Slo(ttft_p99_ms=60000.0, itl_p99_ms=1000.0)
CONFIG = TrialConfig(3, False, 64, 8192)


def _requests(n: int) -> list[Request]:
    """Chat-like arrivals (4 req/s) with long outputs: requests live several seconds."""
    rng = np.random.default_rng(7)
    arrivals = np.cumsum(rng.exponential(0.25, n))
    return [Request(id=str(i), prompt_tokens=int(rng.integers(200, 3000)),
                    output_tokens=int(rng.integers(300, 900)), arrival_s=float(a),
                    acceptance=(0.7,) * 4) for i, a in enumerate(arrivals)]


def _workload(n: int, window_s: float | None = 60.0) -> WorkloadModel:
    reqs = _requests(n)
    return WorkloadModel(reqs, AcceptanceModel.from_requests(reqs, 4), warmup=0, slo=SLO,
                         kv_tokens=FACTS.kv_cache_tokens(), window_s=window_s)


def _lifetime(wl: WorkloadModel, scale: float) -> tuple[float, float]:
    """The model's lifetime of CONFIG's requests in a capacity reading at ``scale``, and the
    replica seconds the reading's arrivals span."""
    ph = physics(wl, [CONFIG], np.asarray([scale]), COST, ReplicaFactors())
    assert ph.lifetime is not None and ph.span is not None
    return float(ph.lifetime[0]), float(ph.span[0])


def test_a_sample_spanning_few_lifetimes_caps_the_capacity_a_reading_can_credit() -> None:
    grid = ConfigGrid.of([CONFIG])
    long, short = _workload(600), _workload(40)
    capacity = {name: float(predict_replica(wl, grid, COST, ReplicaFactors(), "goodput").scale[0])
                for name, wl in (("long", long), ("short", short))}
    # 40 requests at 4 req/s arrive within ~10 s: at the rate the long sample is credited with,
    # they span fewer than the lifetimes a sustained reading needs
    assert capacity["short"] < capacity["long"] / 1.5, capacity
    life, span = _lifetime(short, capacity["short"])
    assert SETTLE_LIFETIMES * life <= span * 1.01
    # and a little faster, it would not be
    life, span = _lifetime(short, capacity["short"] * 1.1)
    assert SETTLE_LIFETIMES * life > span


def _timed(wl: WorkloadModel, scales: list[float], ratio: float) -> list[TailReading]:
    """Readings of CONFIG whose lifetimes are ``ratio`` times the model's."""
    return [TailReading(CONFIG, s, math.nan, math.nan, _lifetime(wl, s)[0] * ratio,
                        _lifetime(wl, s)[1]) for s in scales]


def test_lifetimes_read_longer_than_the_model_lower_the_chance_a_reading_is_sustained() -> None:
    wl = _workload(40)
    prior = TailModel.fit(wl, COST, ReplicaFactors(), SLO, [], block=4)
    scales = list(np.geomspace(0.05, 4.0, 40))
    chances = prior.predict([CONFIG] * len(scales), scales).sustained
    assert chances is not None
    assert chances[0] > 0.99 and chances[-1] < 0.01  # the settle rule binds in this range
    # a rate the model alone calls likely sustained (about 3 in 4)
    at = scales[int(np.argmin(np.abs(chances - 0.75)))]
    readings = [0.1, 0.2, 0.4]
    right = TailModel.fit(wl, COST, ReplicaFactors(), SLO, _timed(wl, readings, 1.0), block=4)
    slow = TailModel.fit(wl, COST, ReplicaFactors(), SLO, _timed(wl, readings, 1.5), block=4)

    def chance(model: TailModel) -> float:
        fc = model.predict([CONFIG], [at])
        assert fc.sustained is not None
        return float(fc.sustained[0])

    assert chance(slow) < 0.5 < 0.75 < chance(right)
    # the chance a reading credits the rate includes it
    fc = slow.predict([CONFIG], [at])
    assert float(fc.chance_met[0]) <= chance(slow)


def _bursts(n: int) -> WorkloadModel:
    """Bursty traffic: 5 requests within 0.1 s every 10 s, long outputs. At the slowest rate
    a reading tries, its window holds one burst, which arrives in a moment and drains over a
    request's lifetime."""
    rng = np.random.default_rng(11)
    reqs = [Request(id=str(i), prompt_tokens=int(rng.integers(200, 3000)),
                    output_tokens=int(rng.integers(300, 900)),
                    arrival_s=10.0 * (i // 5) + 0.02 * (i % 5), acceptance=(0.7,) * 4)
            for i in range(n)]
    return WorkloadModel(reqs, AcceptanceModel.from_requests(reqs, 4), warmup=0, slo=SLO,
                         kv_tokens=FACTS.kv_cache_tokens(), window_s=60.0)


def test_a_capacity_is_the_fastest_rate_met_though_the_slowest_rate_only_drains_a_burst(
) -> None:
    wl = _bursts(200)
    life, span = _lifetime(wl, MIN_SCALE)
    assert SETTLE_LIFETIMES * life > span  # the slowest rate's reading is not sustained
    out = predict_replica(wl, ConfigGrid.of([CONFIG]), COST, ReplicaFactors(), "goodput")
    # yet faster readings settle: the config has a capacity, well above the slowest rate
    assert bool(out.feasible[0])
    assert float(out.scale[0]) > 4 * MIN_SCALE
    life, span = _lifetime(wl, float(out.scale[0]))
    assert SETTLE_LIFETIMES * life <= span * 1.01
