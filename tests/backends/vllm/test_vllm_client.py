"""The streaming replay client against a small scripted OpenAI-style SSE server on loopback.

The server's behaviour per request is scripted by the prompt: ``"wait=0.2 gap=0.05 n=5"`` waits
0.2 s before the first chunk and 0.05 s between chunks of ``per`` tokens each. It records when
each request arrived and how many were in flight, so pacing and concurrency can be checked.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from autotune.backends.vllm import SyntheticPromptWarning
from autotune.backends.vllm._client import (
    ReplayTarget,
    ServerDied,
    build_measurement,
    replay,
)
from autotune.backends.vllm._prompts import SyntheticPrompts
from autotune.types import ReplaySchedule, Request, Slo


class _Script(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server: _FakeServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv = self.server
        with srv.lock:
            srv.arrivals.append((time.perf_counter(), body))
            srv.in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
        try:
            self._answer(body)
        finally:
            with srv.lock:
                srv.in_flight -= 1

    def _answer(self, body: dict[str, Any]) -> None:
        prompt = body["prompt"]
        spec = dict(kv.split("=") for kv in prompt.split()) if isinstance(prompt, str) else {}
        if "status" in spec:
            payload = json.dumps({"error": {"message": "max_tokens too large", "code": 400}})
            self.send_response(int(spec["status"]))
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(payload.encode())
            return
        n = int(body["max_tokens"])
        per = int(spec.get("per", 1))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        time.sleep(float(spec.get("wait", 0)))
        sent = 0
        while sent < n:
            k = min(per, n - sent)
            chunk = {"choices": [{"index": 0, "text": "x" * k, "finish_reason": None,
                                  "token_ids": list(range(k))}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
            sent += k
            if sent < n:
                time.sleep(float(spec.get("gap", 0)))
        usage = {"choices": [], "usage": {"completion_tokens": n}}
        self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())


class _FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Script)
        self.lock = threading.Lock()
        self.arrivals: list[tuple[float, dict[str, Any]]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def fake() -> Iterator[_FakeServer]:
    server = _FakeServer()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _target(url: str, base_ids: list[int] | None = None) -> ReplayTarget:
    return ReplayTarget(url, "tiny", 30.0, SyntheticPrompts(base_ids, seed=0))


def _req(i: int, prompt: str | None, out: int = 5, arrival: float | None = None) -> Request:
    return Request(id=f"r{i}", prompt_tokens=7, output_tokens=out, prompt=prompt,
                   arrival_s=arrival)


def test_ttft_gaps_tokens_and_tpot(fake: _FakeServer) -> None:
    reqs = [_req(0, "wait=0.2 gap=0.05 per=2", out=7)]
    results = replay(_target(fake.url), ReplaySchedule(reqs), reqs, None, lambda: True)
    m = build_measurement(results, 0, 1.0, None)
    assert m.ok.tolist() == [True]
    assert m.output_tokens.tolist() == [7]
    assert m.ttft_s[0] == pytest.approx(0.2, abs=0.08)
    # 7 tokens in chunks of 2: 4 chunks, 3 gaps of ~0.05 s
    assert m.itl_s.size == 3
    assert np.all(np.abs(m.itl_s - 0.05) < 0.04)
    assert m.e2e_s[0] == pytest.approx(0.2 + 3 * 0.05, abs=0.1)
    assert m.tpot_s[0] == pytest.approx(3 * 0.05 / 6, abs=0.02)
    body = fake.arrivals[0][1]
    assert body["max_tokens"] == 7 and body["ignore_eos"] is True and body["stream"] is True
    assert body["temperature"] == 0.0 and "seed" not in body


def test_trace_mode_honours_scaled_arrivals(fake: _FakeServer) -> None:
    reqs = [_req(i, "gap=0", out=2, arrival=10.0 + 0.4 * i) for i in range(4)]
    sched = ReplaySchedule(reqs, mode="trace", time_scale=2.0)
    replay(_target(fake.url), sched, reqs, None, lambda: True)
    times = sorted(t for t, _ in fake.arrivals)
    offsets = [t - times[0] for t in times]
    assert offsets == pytest.approx([0.0, 0.2, 0.4, 0.6], abs=0.08)


def test_closed_mode_keeps_concurrency_in_flight(fake: _FakeServer) -> None:
    reqs = [_req(i, "wait=0.15", out=1, arrival=0.0) for i in range(6)]
    sched = ReplaySchedule(reqs, mode="closed", concurrency=2)
    start = time.perf_counter()
    results = replay(_target(fake.url), sched, reqs, None, lambda: True)
    took = time.perf_counter() - start
    assert len(results) == 6 and all(r.ok for r in results)
    assert fake.max_in_flight == 2
    assert took == pytest.approx(3 * 0.15, abs=0.2)


def test_trace_without_arrival_times_runs_closed_loop(fake: _FakeServer) -> None:
    reqs = [_req(i, "wait=0.1", out=1) for i in range(4)]
    replay(_target(fake.url), ReplaySchedule(reqs, mode="trace", concurrency=1), reqs, None,
           lambda: True)
    assert fake.max_in_flight == 1


def test_warmup_excluded_progress_reported(fake: _FakeServer) -> None:
    reqs = [_req(i, "gap=0", out=3, arrival=0.01 * i) for i in range(5)]
    seen: list[tuple[int, int | None]] = []
    results = replay(_target(fake.url), ReplaySchedule(reqs, warmup_requests=2), reqs,
                     lambda d, t: seen.append((d, t)), lambda: True)
    m = build_measurement(results, 2, 1.0, None)
    assert m.requests == 3
    assert seen[-1] == (5, 5) and [d for d, _ in seen] == [1, 2, 3, 4, 5]
    assert m.duration_s > 0


def test_http_error_is_a_failed_request(fake: _FakeServer) -> None:
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


def test_server_death_aborts_the_replay(fake: _FakeServer) -> None:
    reqs = [_req(i, "wait=5", out=1) for i in range(3)]
    deadline = time.monotonic() + 0.3
    start = time.perf_counter()
    with pytest.raises(ServerDied):
        replay(_target(fake.url), ReplaySchedule(reqs, mode="closed", concurrency=3), reqs,
               None, lambda: time.monotonic() < deadline)
    assert time.perf_counter() - start < 2.0


def test_synthetic_prompts_are_exact_token_ids(fake: _FakeServer) -> None:
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


def test_replay_from_inside_a_running_event_loop(fake: _FakeServer) -> None:
    import asyncio

    reqs = [_req(0, "gap=0", out=2)]

    async def inside() -> int:
        return len(replay(_target(fake.url), ReplaySchedule(reqs), reqs, None, lambda: True))

    assert asyncio.run(inside()) == 1


def test_synthetic_warning_category() -> None:
    from autotune.backends.vllm._prompts import warn_synthetic

    with pytest.warns(SyntheticPromptWarning, match="not representative"):
        warn_synthetic(3, 10)
