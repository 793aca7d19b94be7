"""A small scripted OpenAI-style server on loopback, standing in for vLLM in fast tests.

``POST /v1/completions`` streams SSE chunks scripted by the prompt: ``"wait=0.2 gap=0.05 per=2"``
waits 0.2 s before the first chunk and 0.05 s between chunks of ``per`` tokens each;
``"status=400"`` answers that HTTP error. Two hold points make ordering deterministic without
timing: ``"until=N"`` holds the stream (after the headers) until the server has received ``N``
requests, and ``"hold"`` holds it until :meth:`FakeServer.release` or until the client closes
the connection (noted as :attr:`Exchange.disconnected`). A hold gives up after
:data:`HOLD_GIVE_UP_S` and answers anyway, so a client that waits for the wrong thing fails its
test instead of hanging it. Token-id prompts are answered like an empty script. A request with
``"stream": false`` (the output check's greedy decode) gets one JSON completion: tokens
``0..max_tokens-1``, each leading the next by 1.5 in log-probability.

It also serves ``/health``, ``/v1/models``, ``/version``, ``/tokenize`` and ``/metrics`` (with
speculative-decoding counters that grow by one draft of ``K`` tokens, ``accepted`` of them, per
streamed chunk after the first). Every completion request is an :class:`Exchange` on the
server's ``perf_counter`` clock (the client's clock too, in the same process): when it arrived,
how many were in flight then, and when each chunk and the end of the stream were written. A
client cannot read a chunk before the server starts writing it, so these times bound the
client's measurements from below.

A server made with ``credentials`` and ``query`` answers 401 to any request without that basic
auth and those query parameters (and counts it in ``refused``).
"""

from __future__ import annotations

import base64
import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

__all__ = ["HOLD_GIVE_UP_S", "Exchange", "FakeServer", "running_fake"]

K = 2
#: How long a hold point waits for its condition before answering anyway.
HOLD_GIVE_UP_S = 30.0


@dataclass
class Exchange:
    """One completion request as the server saw it (times on ``time.perf_counter``)."""

    arrived_s: float
    body: dict[str, Any]
    in_flight: int  # requests in flight when this one arrived, itself included
    chunks_s: list[float] = field(default_factory=list)  # before each token chunk was written
    end_s: float | None = None  # before the usage chunk and [DONE] were written
    disconnected: bool = False  # the client closed the connection during a hold


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

    def _route(self) -> str | None:
        """The request's path, or None after answering 401 when the server requires credentials
        (:attr:`FakeServer.credentials`, :attr:`FakeServer.query`) the request lacks."""
        parts = urlsplit(self.path)
        srv = self.server
        basic = (None if srv.credentials is None else
                 "Basic " + base64.b64encode(":".join(srv.credentials).encode()).decode())
        if (basic is not None and self.headers.get("Authorization") != basic) or (
                srv.query is not None and dict(parse_qsl(parts.query)) != srv.query):
            with srv.lock:
                srv.refused += 1
            if self.command == "POST":
                self.rfile.read(int(self.headers["Content-Length"]))
            self._json(401, {"error": {"message": "unauthorized"}})
            return None
        return parts.path

    def do_GET(self) -> None:
        srv = self.server
        path = self._route()
        if path is None:
            return
        if path == "/health":
            self._json(200, "")
        elif path == "/v1/models":
            self._json(200, {"data": [{"id": "fake-model", "max_model_len": 512}]})
        elif path == "/version":
            self._json(200, {"version": "0.0.fake"})
        elif path == "/metrics":
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
        path = self._route()
        if path is None:
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if path == "/tokenize":
            self._json(200, {"tokens": [11, 12, 13, 14, 15], "count": 5})
            return
        srv = self.server
        with srv.changed:
            srv.in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
            exchange = Exchange(time.perf_counter(), body, srv.in_flight)
            srv.exchanges.append(exchange)
            srv.changed.notify_all()
        self._counted = True
        try:
            self._answer(body, exchange)
        finally:
            self._leave()

    def _leave(self) -> None:
        # Called just before the last bytes go out: once the client holds them it may send its
        # next request, which must not find this one still counted in flight.
        if self._counted:
            with self.server.lock:
                self.server.in_flight -= 1
            self._counted = False

    def _client_closed(self) -> bool:
        """Has the client closed its end? (Its request was read whole: EOF is all that comes.)"""
        readable, _, _ = select.select([self.connection], [], [], 0.05)
        if not readable:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _hold(self, spec: dict[str, str], exchange: Exchange) -> None:
        srv = self.server
        deadline = time.monotonic() + HOLD_GIVE_UP_S
        if "until" in spec:
            with srv.changed:
                srv.changed.wait_for(lambda: len(srv.exchanges) >= int(spec["until"]),
                                     timeout=HOLD_GIVE_UP_S)
        if "hold" in spec:
            while not srv.released.is_set() and time.monotonic() < deadline:
                if self._client_closed():
                    with srv.changed:
                        exchange.disconnected = True
                        srv.changed.notify_all()
                    return

    def _answer(self, body: dict[str, Any], exchange: Exchange) -> None:
        prompt = body["prompt"]
        spec = dict(kv.split("=") if "=" in kv else (kv, "") for kv in prompt.split()) \
            if isinstance(prompt, str) else {}
        if "status" in spec:
            self._leave()
            self._json(int(spec["status"]),
                       {"error": {"message": "max_tokens too large", "code": 400}})
            return
        n = int(body["max_tokens"])
        if body.get("stream") is False:  # the output check's greedy decode: one JSON answer
            self._leave()
            self._json(200, {"choices": [{
                "index": 0, "text": "x" * n, "finish_reason": "length",
                "token_ids": list(range(n)),
                "logprobs": {"tokens": [f"token_id:{t}" for t in range(n)],
                             "top_logprobs": [{f"token_id:{t}": -0.5, f"token_id:{t + 1}": -2.0}
                                              for t in range(n)]}}],
                "usage": {"completion_tokens": n}})
            exchange.end_s = time.perf_counter()
            return
        per = int(spec.get("per", 1))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self._hold(spec, exchange)
        if exchange.disconnected:
            return
        time.sleep(float(spec.get("wait", 0)))  # a slow engine (the world, not a sync point)
        sent = 0
        while sent < n:
            k = min(per, n - sent)
            chunk = {"choices": [{"index": 0, "text": "x" * k, "finish_reason": None,
                                  "token_ids": list(range(k))}]}
            exchange.chunks_s.append(time.perf_counter())
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
        exchange.end_s = time.perf_counter()
        self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, accepted: int = 1, credentials: tuple[str, str] | None = None,
                 query: dict[str, str] | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Script)
        #: Required of every request when set: basic auth (user, password), query parameters.
        self.credentials = credentials
        self.query = query
        self.refused = 0  # requests answered 401 for lacking them
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)  # notified on arrivals and disconnects
        self.released = threading.Event()
        self.exchanges: list[Exchange] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.drafts = 0
        self.accepted = accepted

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def arrivals(self) -> list[tuple[float, dict[str, Any]]]:
        """(arrival time, request body) of every completion request, in arrival order."""
        with self.lock:
            return [(e.arrived_s, e.body) for e in self.exchanges]

    @property
    def in_flight_at_arrival(self) -> list[int]:
        with self.lock:
            return [e.in_flight for e in self.exchanges]

    def release(self) -> None:
        """Let every ``hold`` stream go on."""
        self.released.set()

    def wait_for(self, condition: str, predicate: Callable[[FakeServer], bool],
                 timeout_s: float = 60.0) -> None:
        """Wait until ``predicate(self)`` holds (checked on every arrival and disconnect);
        fail naming ``condition`` after ``timeout_s`` (a give-up deadline, not a timing)."""
        with self.changed:
            met = self.changed.wait_for(lambda: predicate(self), timeout=timeout_s)
        assert met, f"the fake server never saw: {condition}"


@contextmanager
def running_fake(accepted: int = 1, credentials: tuple[str, str] | None = None,
                 query: dict[str, str] | None = None) -> Iterator[FakeServer]:
    server = FakeServer(accepted, credentials, query)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release()
        server.shutdown()
        server.server_close()
