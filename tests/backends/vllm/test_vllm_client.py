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
from autotune.types import PEAK_IN_FLIGHT, ReplaySchedule, Request, Slo


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
    # 7 tokens in chunks of 2: 4 chunks, 3 gaps. A second request follows in a closed loop of
    # one, so it is sent only once the first has been measured: its arrival at the server
    # bounds the first one's end from above, as the server's own write times bound every
    # reading from below (one clock, perf_counter, for both sides).
    reqs = [_req(0, "wait=0.3 gap=0.1 per=2", out=7), _req(1, "gap=0", out=1)]
    results = sorted(replay(_target(fake.url), ReplaySchedule(reqs, mode="closed", concurrency=1),
                            reqs, None, lambda: True), key=lambda r: r.index)
    first, after = fake.exchanges
    r = results[0]
    assert r.ok and r.output_tokens == 7
    assert r.sent_s <= first.arrived_s
    # TTFT ends at the first chunk: not before the server wrote it (so the 0.3 s wait counts)
    assert r.first_s >= first.chunks_s[0] and r.ttft_s >= 0.3
    # one gap per later chunk, each chunk read no earlier than it was written
    assert len(r.gaps) == len(first.chunks_s) - 1 == 3
    received = r.first_s + np.cumsum([0.0, *r.gaps])
    assert np.all(received >= np.array(first.chunks_s))
    # E2E ends at the end of the stream: after the server wrote it, before the next request
    assert first.end_s is not None and first.end_s <= r.done_s <= after.arrived_s
    assert received[-1] <= r.done_s

    m = build_measurement(results, 0, 1.0, None)
    assert m.ok.tolist() == [True, True] and m.output_tokens.tolist() == [7, 1]
    assert m.ttft_s[0] == r.ttft_s and m.e2e_s[0] == r.e2e_s
    assert m.itl_s.tolist() == r.gaps  # the one-token request adds no gap
    assert m.tpot_s[0] == pytest.approx((r.done_s - r.first_s) / 6)
    assert m.tpot_s[1] == 0.0
    body = first.body
    assert body["max_tokens"] == 7 and body["ignore_eos"] is True and body["stream"] is True
    assert body["temperature"] == 0.0 and "seed" not in body


def test_trace_mode_sends_on_scaled_arrivals_without_waiting_for_replies(
        fake: FakeServer) -> None:
    # Arrivals 0.2 s apart at half speed are due 0.4 s apart. Each request may only go out
    # once due: reading that from the client's own send times (against a clock read before
    # the replay began) is exact, and a client ignoring time_scale (0.2 s apart) or multiplying
    # by it (0.1 s) would send early. The first two are held until all three have arrived, so
    # a client that waited for replies between sends would never send the others.
    scripts = ["until=3", "until=3", "gap=0"]
    reqs = [_req(i, s, out=2, arrival=10.0 + 0.2 * i) for i, s in enumerate(scripts)]
    sched = ReplaySchedule(reqs, mode="trace", time_scale=0.5)
    before = time.perf_counter()
    results = sorted(replay(_target(fake.url), sched, reqs, None, lambda: True),
                     key=lambda r: r.index)
    assert [r.ok for r in results] == [True] * 3
    due = [0.0, 0.4, 0.8]
    assert all(r.sent_s - before >= d - 1e-3 for r, d in zip(results, due, strict=True))
    assert [r.sent_s for r in results] == sorted(r.sent_s for r in results)
    assert fake.in_flight_at_arrival == [1, 2, 3]
    assert build_measurement(results, 0, 1.0, None).extra[PEAK_IN_FLIGHT] == 3


def test_closed_mode_keeps_concurrency_in_flight(fake: FakeServer) -> None:
    # Two slots. Request 0 is held until request 1 arrives, request 1 until all six have:
    # a closed loop refills request 0's slot at once, so requests 2-5 arrive one at a time
    # while request 1 is in flight. A client sending waves of two leaves request 1 holding
    # and the later ones unsent; a client with a third slot has two of the short requests
    # (each 0.1 s of simulated engine time) in flight beside request 1.
    scripts = ["until=2", "until=6", *["wait=0.1"] * 4]
    reqs = [_req(i, s, out=1, arrival=0.0) for i, s in enumerate(scripts)]
    sched = ReplaySchedule(reqs, mode="closed", concurrency=2)
    results = replay(_target(fake.url), sched, reqs, None, lambda: True)
    assert len(results) == 6 and all(r.ok for r in results)
    assert fake.max_in_flight == 2
    assert fake.in_flight_at_arrival == [1, 2, 2, 2, 2, 2]
    # the client counts what the server held: the most requests in flight at once
    assert build_measurement(results, 0, 1.0, None).extra[PEAK_IN_FLIGHT] == 2


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


def test_server_death_aborts_the_replay_and_cancels_its_requests(fake: FakeServer) -> None:
    # Three requests the server holds; the server "dies" once all three are in flight. The
    # replay must give up on them rather than wait: ServerDied is raised while every request is
    # still held (none can finish before release), and the client closes their connections.
    reqs = [_req(i, "hold", out=1) for i in range(3)]
    with pytest.raises(ServerDied):
        replay(_target(fake.url), ReplaySchedule(reqs, mode="closed", concurrency=3), reqs,
               None, lambda: len(fake.arrivals) < 3)
    assert all(e.end_s is None for e in fake.exchanges)  # nothing was answered
    fake.wait_for("the client close all three held requests",
                  lambda f: sum(e.disconnected for e in f.exchanges) == 3)
    assert len(fake.exchanges) == 3


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
