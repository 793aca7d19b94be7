"""The fluid trace replay against what a replica must do in worlds simple enough to know: a
request alone, a burst through one slot, and rising load."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from autotune.acceptance import AcceptanceModel
from autotune.predict import ConfigGrid, ReplicaFactors, StepCostModel, WorkloadModel
from autotune.predict.facts import kimi_h200_facts
from autotune.predict.latency import PredictedLatency
from autotune.predict.steady_state import solve_steady_state
from autotune.predict.trace_replay import trace_replay_latency
from autotune.types import Request, Slo, TrialConfig

FACTS = kimi_h200_facts()
COST = StepCostModel(FACTS)


def replay(requests: list[Request], configs: list[TrialConfig],
           scale: float = 1.0) -> tuple[WorkloadModel, PredictedLatency]:
    wl = WorkloadModel(requests, AcceptanceModel.from_requests(requests, 8), warmup=0,
                       slo=Slo(3000, 100), kv_tokens=FACTS.kv_cache_tokens())
    grid = ConfigGrid.of(configs)
    scales = np.full(len(grid), scale)
    st = solve_steady_state(wl, grid, COST, ReplicaFactors(), scales * wl.base_rate)
    return wl, trace_replay_latency(wl, grid, COST, ReplicaFactors(), st, scales)


def request(i: int, arrival: float, prompt: int = 500, output: int = 200) -> Request:
    return Request(id=str(i), prompt_tokens=prompt, output_tokens=output, arrival_s=arrival,
                   acceptance=(0.8,) * 8)


def test_a_request_alone_gets_its_first_token_after_one_prefill_step() -> None:
    # requests 100 s apart never meet: each prompt (under the 8192-token budget) is prefilled
    # in one step of an otherwise idle replica
    reqs = [request(i, i * 100.0, prompt=500 + 300 * i, output=100) for i in range(5)]
    wl, lat = replay(reqs, [TrialConfig(3, False, 64, 8192)])
    p = wl.prompt
    idle = np.zeros_like(p)
    one_step = COST.step(p, idle, idle, p * p / 2.0, np.full_like(p, 3.0), p)
    np.testing.assert_allclose(lat.ttft[0], one_step, rtol=1e-9)
    assert lat.feasible.all()


def _burst(slots: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    reqs = [request(i, i * 1e-3) for i in range(8)]
    _, lat = replay(reqs, [TrialConfig(3, False, slots, 8192)])
    assert lat.end is not None
    return lat.ttft[0], lat.end[0]


def test_one_slot_serves_a_burst_one_request_after_another() -> None:
    ttft, end = _burst(1)
    # each request waits for the one before it: its first token comes one service time (the
    # first request's whole stay) after the previous one's
    service = end[0]
    np.testing.assert_allclose(np.diff(ttft), service, rtol=0.1)
    assert (np.diff(end) > 0).all()
    two, _ = _burst(2)
    eight, _ = _burst(8)
    # more slots, shorter waits for every request but the first (which never waits)
    np.testing.assert_allclose([two[0], eight[0]], ttft[0], rtol=1e-3)
    assert (eight[1:] < two[1:]).all() and (two[1:] < ttft[1:]).all()


def test_a_faster_replay_of_the_trace_queues_longer() -> None:
    reqs = [request(i, i * 0.2, prompt=300 + (i % 7) * 200, output=150 + (i % 5) * 40)
            for i in range(120)]
    configs = [TrialConfig(3, False, 64, 2048)]
    p99 = [float(np.quantile(replay(reqs, configs, scale)[1].ttft, 0.99))
           for scale in (0.5, 2.0, 8.0, 32.0)]
    assert p99 == sorted(p99) and p99[-1] > 10 * p99[0]
