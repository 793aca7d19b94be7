"""The streaming replay client against a scripted OpenAI-style SSE server on loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest
from fake_openai import FakeServer, running_fake

from autotune.backends.vllm import SyntheticPromptWarning
from autotune.backends.vllm._client import (
    ReplayTarget,
    ServerDied,
    build_measurement,
    replay,
)
from autotune.backends.vllm._prompts import SyntheticPrompts
from autotune.types import ReplaySchedule, Request, Slo


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    with running_fake() as server:
        yield server


def _target(url: str, base_ids: list[int] | None = None) -> ReplayTarget:
    return ReplayTarget(url, "tiny", 30.0, SyntheticPrompts(base_ids, seed=0))


def _req(i: int, prompt: str | None, out: int = 5, arrival: float | None = None) -> Request:
    return Request(id=f"r{i}", prompt_tokens=7, output_tokens=out, prompt=prompt,
                   arrival_s=arrival)


def test_ttft_gaps_tokens_and_tpot(fake: FakeServer) -> None:
    # The server waits 0.6 s before the first chunk and 0.2 s between chunks: long enough
    # that a loaded machine's scheduling delays (0.1 s seen) stay well inside the bounds. The
    # client cannot read a token before the server sends it, so the lower bounds are exact.
    reqs = [_req(0, "wait=0.6 gap=0.2 per=2", out=7)]
    results = replay(_target(fake.url), ReplaySchedule(reqs), reqs, None, lambda: True)
    m = build_measurement(results, 0, 1.0, None)
    assert m.ok.tolist() == [True]
    assert m.output_tokens.tolist() == [7]
    assert 0.6 <= m.ttft_s[0] < 0.6 + 0.25
    # 7 tokens in chunks of 2: 4 chunks, 3 gaps of ~0.2 s
    assert m.itl_s.size == 3
    assert np.all(np.abs(m.itl_s - 0.2) < 0.15)
    assert 0.6 + 3 * 0.2 <= m.e2e_s[0] < 0.6 + 3 * 0.2 + 0.3
    assert m.tpot_s[0] == pytest.approx(3 * 0.2 / 6, abs=0.05)
    body = fake.arrivals[0][1]
    assert body["max_tokens"] == 7 and body["ignore_eos"] is True and body["stream"] is True
    assert body["temperature"] == 0.0 and "seed" not in body


def test_trace_mode_honours_scaled_arrivals(fake: FakeServer) -> None:
    # Arrivals 1 s apart at twice the speed: sent 0.5 s apart. Read on the client's clock when
    # each request went out (the server's receive times add connection set-up, which a loaded
    # machine stretches by a third of a second); unscaled sends would read 1 s apart.
    reqs = [_req(i, "gap=0", out=2, arrival=10.0 + 1.0 * i) for i in range(4)]
    sched = ReplaySchedule(reqs, mode="trace", time_scale=2.0)
    results = sorted(replay(_target(fake.url), sched, reqs, None, lambda: True),
                     key=lambda r: r.index)
    assert [r.ok for r in results] == [True] * 4 and len(fake.arrivals) == 4
    offsets = [r.sent_s - results[0].sent_s for r in results]
    assert offsets == pytest.approx([0.0, 0.5, 1.0, 1.5], abs=0.2)


def test_closed_mode_keeps_concurrency_in_flight(fake: FakeServer) -> None:
    # One long request beside five short ones: a closed loop refills the short one's slot at
    # once, so every later request arrives while the long one is still in flight (a client
    # that sent waves of two would wait for the long one). Read off the server, not a clock.
    waits = [0.3, 2.0, 0.05, 0.05, 0.05, 0.05]
    reqs = [_req(i, f"wait={w}", out=1, arrival=0.0) for i, w in enumerate(waits)]
    sched = ReplaySchedule(reqs, mode="closed", concurrency=2)
    results = replay(_target(fake.url), sched, reqs, None, lambda: True)
    assert len(results) == 6 and all(r.ok for r in results)
    assert fake.max_in_flight == 2
    assert fake.in_flight_at_arrival == [1, 2, 2, 2, 2, 2]


def test_trace_without_arrival_times_runs_closed_loop(fake: FakeServer) -> None:
    reqs = [_req(i, "wait=0.1", out=1) for i in range(4)]
    replay(_target(fake.url), ReplaySchedule(reqs, mode="trace", concurrency=1), reqs, None,
           lambda: True)
    assert fake.max_in_flight == 1


def test_warmup_excluded_progress_reported(fake: FakeServer) -> None:
    reqs = [_req(i, "gap=0", out=3, arrival=0.01 * i) for i in range(5)]
    seen: list[tuple[int, int | None]] = []
    results = replay(_target(fake.url), ReplaySchedule(reqs, warmup_requests=2), reqs,
                     lambda d, t: seen.append((d, t)), lambda: True)
    m = build_measurement(results, 2, 1.0, None)
    assert m.requests == 3
    assert seen[-1] == (5, 5) and [d for d, _ in seen] == [1, 2, 3, 4, 5]
    assert m.duration_s > 0


def test_http_error_is_a_failed_request(fake: FakeServer) -> None:
    reqs = [_req(0, "status=400"), _req(1, "gap=0"), _req(2, "status=400")]
    results = replay(_target(fake.url), ReplaySchedule(reqs), reqs, None, lambda: True)
    m = build_measurement(results, 0, 1.0, None)
    assert sorted(m.ok.tolist()) == [False, False, True]
    assert np.isnan(m.ttft_s[~m.ok]).all() and np.isnan(m.tpot_s[~m.ok]).all()
    assert m.errors == ("HTTP 400: max_tokens too large (x2)",)
    assert m.summary(Slo())["failed_requests"] == 2


def test_unreachable_server_fails_requests_not_the_replay() -> None:
    reqs = [_req(0, "gap=0")]
    results = replay(_target("http://127.0.0.1:9"), ReplaySchedule(reqs), reqs, None,
                     lambda: True)
    assert not results[0].ok and "Connect" in (results[0].error or "")


def test_server_death_aborts_the_replay(fake: FakeServer) -> None:
    reqs = [_req(i, "wait=5", out=1) for i in range(3)]
    deadline = time.monotonic() + 0.3
    start = time.perf_counter()
    with pytest.raises(ServerDied):
        replay(_target(fake.url), ReplaySchedule(reqs, mode="closed", concurrency=3), reqs,
               None, lambda: time.monotonic() < deadline)
    assert time.perf_counter() - start < 2.0


def test_synthetic_prompts_are_exact_token_ids(fake: FakeServer) -> None:
    reqs = [Request(id="s1", prompt_tokens=23, output_tokens=2, arrival_s=0.0,
                    temperature=0.7)]
    results = replay(_target(fake.url, base_ids=[5, 6, 7, 8]), ReplaySchedule(reqs, seed=4),
                     reqs, None, lambda: True)
    assert results[0].ok
    body = fake.arrivals[0][1]
    assert isinstance(body["prompt"], list) and len(body["prompt"]) == 23
    assert set(body["prompt"]) <= {5, 6, 7, 8}
    assert body["temperature"] == 0.7 and isinstance(body["seed"], int)


def test_synthetic_prompts_fall_back_to_words_and_are_deterministic() -> None:
    req = Request(id="x", prompt_tokens=12, output_tokens=1)
    text = SyntheticPrompts(None, seed=1).prompt(req)
    assert isinstance(text, str) and len(text.split()) == 12
    assert SyntheticPrompts(None, seed=1).prompt(req) == text
    assert SyntheticPrompts([1, 2, 3], seed=1).exact


def test_replay_from_inside_a_running_event_loop(fake: FakeServer) -> None:
    import asyncio

    reqs = [_req(0, "gap=0", out=2)]

    async def inside() -> int:
        return len(replay(_target(fake.url), ReplaySchedule(reqs), reqs, None, lambda: True))

    assert asyncio.run(inside()) == 1


def test_synthetic_warning_category() -> None:
    from autotune.backends.vllm._prompts import warn_synthetic

    with pytest.warns(SyntheticPromptWarning, match="not representative"):
        warn_synthetic(3, 10)
