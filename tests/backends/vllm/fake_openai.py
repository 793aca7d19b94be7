"""A small scripted OpenAI-style server on loopback, standing in for vLLM in fast tests.

``POST /v1/completions`` streams SSE chunks scripted by the prompt: ``"wait=0.2 gap=0.05 per=2"``
waits 0.2 s before the first chunk and 0.05 s between chunks of ``per`` tokens each;
``"status=400"`` answers that HTTP error. Token-id prompts are answered like an empty script.
It also serves ``/health``, ``/v1/models``, ``/version``, ``/tokenize`` and ``/metrics`` (with
speculative-decoding counters that grow by one draft of ``K`` tokens, ``accepted`` of them, per
streamed chunk after the first). It records when each request arrived and how many were in
flight, so pacing and concurrency can be checked.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeServer", "running_fake"]

K = 2


class _Script(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server: FakeServer
    _counted = False

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, status: int, payload: object, content_type: str = "application/json"
              ) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.end_headers()
        self.wfile.write(data.encode())

    def do_GET(self) -> None:
        srv = self.server
        if self.path == "/health":
            self._json(200, "")
        elif self.path == "/v1/models":
            self._json(200, {"data": [{"id": "fake-model", "max_model_len": 512}]})
        elif self.path == "/version":
            self._json(200, {"version": "0.0.fake"})
        elif self.path == "/metrics":
            with srv.lock:
                drafts, acc = srv.drafts, srv.drafts * srv.accepted
                per_pos = [srv.drafts if k < srv.accepted else 0 for k in range(K)]
            lines = [f"vllm:spec_decode_num_drafts_total{{engine=\"0\"}} {drafts}",
                     f"vllm:spec_decode_num_draft_tokens_total{{engine=\"0\"}} {drafts * K}",
                     f"vllm:spec_decode_num_accepted_tokens_total{{engine=\"0\"}} {acc}"]
            lines += [f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine=\"0\","
                      f"position=\"{k}\"}} {v}" for k, v in enumerate(per_pos)]
            self._json(200, "\n".join(lines) + "\n", "text/plain")
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            self._json(200, {"tokens": [11, 12, 13, 14, 15], "count": 5})
            return
        srv = self.server
        with srv.lock:
            srv.arrivals.append((time.perf_counter(), body))
            srv.in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
            srv.in_flight_at_arrival.append(srv.in_flight)
        self._counted = True
        try:
            self._answer(body)
        finally:
            self._leave()

    def _leave(self) -> None:
        # Called just before the last bytes go out: once the client holds them it may send its
        # next request, which must not find this one still counted in flight.
        if self._counted:
            with self.server.lock:
                self.server.in_flight -= 1
            self._counted = False

    def _answer(self, body: dict[str, Any]) -> None:
        prompt = body["prompt"]
        spec = dict(kv.split("=") for kv in prompt.split()) if isinstance(prompt, str) else {}
        if "status" in spec:
            self._leave()
            self._json(int(spec["status"]),
                       {"error": {"message": "max_tokens too large", "code": 400}})
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
            if sent:
                with self.server.lock:
                    self.server.drafts += 1
            sent += k
            if sent < n:
                time.sleep(float(spec.get("gap", 0)))
        usage = {"choices": [], "usage": {"completion_tokens": n}}
        self._leave()
        self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, accepted: int = 1) -> None:
        super().__init__(("127.0.0.1", 0), _Script)
        self.lock = threading.Lock()
        self.arrivals: list[tuple[float, dict[str, Any]]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.in_flight_at_arrival: list[int] = []
        self.drafts = 0
        self.accepted = accepted

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@contextmanager
def running_fake(accepted: int = 1) -> Iterator[FakeServer]:
    server = FakeServer(accepted)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
