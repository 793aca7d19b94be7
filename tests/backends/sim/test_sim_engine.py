"""The simulator's event loop: determinism, conservation, batching limits, KV and preemption."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import numpy as np
import pytest

from autotune.backends import create_backend
from autotune.backends.sim import SimReplica, generate_requests
from autotune.backends.sim._engine import simulate_replay
from autotune.types import (
    PEAK_IN_FLIGHT,
    SEQS_REACHED,
    TOKENS_REACHED,
    Measurement,
    ReplaySchedule,
    Request,
    ServeSpec,
    TrialConfig,
)

SERVE = ServeSpec(model="moonshotai/Kimi-K2.6", draft_model="novita/kimi-k2.6-dspark",
                  method="dspark", draft_block_size=8)


def _replica(config: TrialConfig, seed: int = 0, serve: ServeSpec = SERVE) -> SimReplica:
    replica = create_backend("sim", serve, {}, seed=seed).start(config)
    assert isinstance(replica, SimReplica)
    return replica


def _requests(count: int = 200, seed: int = 1, rate: float | None = 4.0,
              workload: str = "chat") -> list[Request]:
    return list(generate_requests(count, workload=workload, seed=seed, rate=rate))


def _arrays(m: Measurement) -> list[np.ndarray]:
    return [m.ttft_s, m.tpot_s, m.e2e_s, m.output_tokens, m.ok, m.itl_s]


class _Emits:
    """Records every step's emissions through the engine's test hook."""

    def __init__(self) -> None:
        self.per_request: dict[int, int] = defaultdict(int)
        self.max_per_step = 0
        self.max_rows = 0
        self.times: list[float] = []

    def __call__(self, seqs: np.ndarray, emitted: np.ndarray, t: float) -> None:
        for s, e in zip(seqs.tolist(), emitted.tolist(), strict=True):
            self.per_request[s] += e
        if emitted.size:
            self.max_per_step = max(self.max_per_step, int(emitted.max()))
        self.times.append(t)


@pytest.mark.parametrize("config", [TrialConfig(0, False, 64, 8192),
                                    TrialConfig(5, False, 64, 8192),
                                    TrialConfig(7, True, 16, 2048)])
def test_same_seeds_same_measurement(config: TrialConfig) -> None:
    reqs = _requests()
    a = _replica(config, seed=3).replay(ReplaySchedule(reqs, seed=9, warmup_requests=5))
    b = _replica(config, seed=3).replay(ReplaySchedule(reqs, seed=9, warmup_requests=5))
    for x, y in zip(_arrays(a), _arrays(b), strict=True):
        np.testing.assert_array_equal(x, y)
    assert a.acceptance == b.acceptance
    assert a.duration_s == b.duration_s
    assert {k: v for k, v in a.extra.items()} == {k: v for k, v in b.extra.items()}


def test_other_schedule_seed_other_draws() -> None:
    reqs = _requests()
    config = TrialConfig(5, False, 64, 8192)
    a = _replica(config).replay(ReplaySchedule(reqs, seed=1))
    b = _replica(config).replay(ReplaySchedule(reqs, seed=2))
    assert a.acceptance != b.acceptance
    assert not np.array_equal(a.e2e_s, b.e2e_s)


@pytest.mark.parametrize("config", [TrialConfig(0, False, 32, 4096),
                                    TrialConfig(3, False, 32, 4096),
                                    TrialConfig(7, False, 8, 512),
                                    TrialConfig(6, True, 256, 8192)])
def test_conservation(config: TrialConfig) -> None:
    reqs = _requests(300, rate=8.0) + _requests(40, seed=2, workload="gsm8k", rate=8.0)
    reqs.sort(key=lambda r: r.arrival_s or 0.0)
    emits = _Emits()
    replica = _replica(config)
    m = simulate_replay(replica._engine, ReplaySchedule(reqs, warmup_requests=0), on_emit=emits)
    assert m.requests == len(reqs) and m.ok.all()
    assert sorted(m.output_tokens.tolist()) == sorted(r.output_tokens for r in reqs)
    assert dict(emits.per_request) == {i: r.output_tokens for i, r in enumerate(reqs)}
    assert emits.max_per_step <= config.num_speculative_tokens + 1
    if config.num_speculative_tokens:
        assert emits.max_per_step > 1
    assert emits.times == sorted(emits.times)


def test_closed_mode_keeps_concurrency_in_flight() -> None:
    reqs = _requests(120, rate=None)
    for conc in (1, 4, 16):
        m = _replica(TrialConfig(3, False, 64, 8192)).replay(
            ReplaySchedule(reqs, mode="closed", concurrency=conc))
        assert m.requests == 120
        assert m.extra["mean_batch_size"] <= conc + 1e-9
        assert m.extra["mean_batch_size"] > 0.6 * conc


def test_max_num_seqs_caps_the_batch() -> None:
    reqs = _requests(200, rate=None)
    m8 = _replica(TrialConfig(3, False, 8, 8192)).replay(
        ReplaySchedule(reqs, mode="closed", concurrency=64))
    m64 = _replica(TrialConfig(3, False, 64, 8192)).replay(
        ReplaySchedule(reqs, mode="closed", concurrency=64))
    assert m8.extra["mean_batch_size"] <= 8
    assert m64.extra["mean_batch_size"] > 8
    assert np.median(m8.ttft_s) > np.median(m64.ttft_s)  # the rest queue


def test_a_cap_above_the_peak_in_flight_never_binds() -> None:
    # the replica holds at most the peak in flight (waiting or running): a max_num_seqs at or
    # above it replays the same schedule, one below it queues a request at the peak
    reqs = _requests(150, rate=6.0)
    sched = ReplaySchedule(reqs, mode="trace")
    wide = _replica(TrialConfig(3, False, 1024, 8192)).replay(sched)
    peak = int(wide.extra[PEAK_IN_FLIGHT])
    assert 2 <= peak < 150
    at_peak = _replica(TrialConfig(3, False, peak, 8192)).replay(sched)
    assert at_peak.extra[PEAK_IN_FLIGHT] == peak
    for a, b in zip(_arrays(wide), _arrays(at_peak), strict=True):
        np.testing.assert_array_equal(a, b)
    below = _replica(TrialConfig(3, False, peak - 1, 8192)).replay(sched)
    assert not np.array_equal(below.ttft_s, wide.ttft_s)
    closed = _replica(TrialConfig(3, False, 64, 8192)).replay(
        ReplaySchedule(reqs, mode="closed", concurrency=5))
    assert closed.extra[PEAK_IN_FLIGHT] == 5


@pytest.mark.parametrize(("window", "seqs", "tokens", "rate", "workload"), [
    (3, 256, 16384, 6.0, "chat"),
    (7, 128, 32768, 12.0, "code"),   # long prompts: the queue and the KV cache
    (0, 512, 16384, 20.0, "chat"),   # no drafter: a decode asks one token
])
def test_caps_at_what_a_replay_reached_run_the_same_schedule(
        window: int, seqs: int, tokens: int, rate: float, workload: str) -> None:
    # SEQS_REACHED and TOKENS_REACHED are the smallest caps that refuse nothing the replay
    # asked for: caps set exactly there replay value for value, whatever held requests back
    sched = ReplaySchedule(_requests(160, rate=rate, workload=workload), mode="trace")
    wide = _replica(TrialConfig(window, False, seqs, tokens)).replay(sched)
    s_cap, t_cap = int(wide.extra[SEQS_REACHED]), int(wide.extra[TOKENS_REACHED])
    assert 1 <= s_cap <= wide.extra[PEAK_IN_FLIGHT] and s_cap < seqs and t_cap < tokens
    for cap in (TrialConfig(window, False, s_cap, tokens),
                TrialConfig(window, False, seqs, max(t_cap, s_cap)),
                TrialConfig(window, False, s_cap, max(t_cap, s_cap))):
        tight = _replica(cap).replay(sched)
        for a, b in zip(_arrays(wide), _arrays(tight), strict=True):
            np.testing.assert_array_equal(a, b)


def test_seqs_reached_sees_a_cap_the_clients_count_cannot() -> None:
    # a small token budget keeps most arrivals waiting: more requests are in flight than ever
    # run, so the client's count (PEAK_IN_FLIGHT) cannot clear a cap the scheduler never used
    sched = ReplaySchedule(_requests(160, rate=12.0), mode="trace")
    wide = _replica(TrialConfig(3, False, 256, 512)).replay(sched)
    running = int(wide.extra[SEQS_REACHED])
    assert running < wide.extra[PEAK_IN_FLIGHT]
    at = _replica(TrialConfig(3, False, running, 512)).replay(sched)
    for a, b in zip(_arrays(wide), _arrays(at), strict=True):
        np.testing.assert_array_equal(a, b)
    below = _replica(TrialConfig(3, False, max(running // 2, 1), 512)).replay(sched)
    assert not np.array_equal(below.ttft_s, wide.ttft_s)


def test_token_budget_chunks_long_prefills() -> None:
    reqs = [Request("long", 6000, 4)]
    small = _replica(TrialConfig(0, False, 8, 512)).replay(ReplaySchedule(reqs, mode="closed"))
    big = _replica(TrialConfig(0, False, 8, 8192)).replay(ReplaySchedule(reqs, mode="closed"))
    assert small.extra["steps"] == 12 + 3  # ceil(6000/512) prefill chunks, then 3 decodes
    assert big.extra["steps"] == 1 + 3
    assert small.ttft_s[0] > big.ttft_s[0]


def test_kv_exhaustion_preempts_and_recomputes() -> None:
    serve = ServeSpec(model="m", draft_model=None, method="dspark", draft_block_size=8,
                      max_model_len=20000)
    reqs = [Request(f"r{i}", 14000, 1500) for i in range(64)]
    emits = _Emits()
    replica = _replica(TrialConfig(3, False, 64, 16384), serve=serve)
    m = simulate_replay(replica._engine, ReplaySchedule(reqs, mode="closed", concurrency=64),
               on_emit=emits)
    assert m.extra["preemptions"] > 0
    assert m.extra["kv_peak_utilization"] > 0.9
    assert m.ok.all() and sorted(m.output_tokens.tolist()) == [1500] * 64
    assert all(v == 1500 for v in emits.per_request.values())
    few = _replica(TrialConfig(3, False, 16, 16384), serve=serve).replay(
        ReplaySchedule(reqs[:16], mode="closed", concurrency=16))
    assert few.extra["preemptions"] == 0


def test_trace_arrivals_and_time_scale() -> None:
    reqs = [Request(f"r{i}", 50, 20, arrival_s=10.0 * i) for i in range(5)]
    m1 = _replica(TrialConfig(3, False, 8, 2048)).replay(ReplaySchedule(reqs))
    m2 = _replica(TrialConfig(3, False, 8, 2048)).replay(ReplaySchedule(reqs, time_scale=2.0))
    assert 40.0 < m1.duration_s < 42.0
    assert 20.0 < m2.duration_s < 22.0
    no_arrival = [Request(f"r{i}", 50, 20) for i in range(5)]
    m0 = _replica(TrialConfig(3, False, 8, 2048)).replay(ReplaySchedule(no_arrival))
    assert m0.duration_s < 2.0  # all arrive at 0


def test_out_of_order_arrivals_are_clamped_and_counted() -> None:
    reqs = [Request("a", 50, 20, arrival_s=1.0), Request("b", 50, 20, arrival_s=0.5)]
    m = _replica(TrialConfig(0, False, 8, 2048)).replay(ReplaySchedule(reqs))
    assert m.requests == 2 and m.extra["out_of_order_arrivals"] == 1


class _OneShot:
    """An iterable that may be iterated once and counts what was pulled."""

    def __init__(self, requests: list[Request]) -> None:
        self._requests = requests
        self.used = False
        self.pulled = 0

    def __iter__(self) -> Iterator[Request]:
        assert not self.used, "the simulator iterated the source twice"
        self.used = True
        for r in self._requests:
            self.pulled += 1
            yield r


def test_streams_the_source_in_one_pass() -> None:
    src = _OneShot(_requests(3000, rate=50.0))
    m = _replica(TrialConfig(3, False, 256, 8192)).replay(ReplaySchedule(src))
    assert src.pulled == 3000 and m.requests == 3000


def test_itl_has_one_gap_per_decode_step() -> None:
    reqs = [Request("a", 30, 200)]
    m0 = _replica(TrialConfig(0, False, 8, 2048)).replay(ReplaySchedule(reqs))
    assert m0.itl_s.size == 199  # one gap per token after the first
    m7 = _replica(TrialConfig(7, False, 8, 2048)).replay(ReplaySchedule(reqs))
    steps = m7.extra["steps"]
    assert m7.itl_s.size == steps - 1 < 199
    assert m7.itl_s.sum() == pytest.approx(m7.e2e_s[0] - m7.ttft_s[0])
