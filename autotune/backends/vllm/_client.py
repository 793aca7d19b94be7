"""The asyncio streaming client that replays a schedule against one OpenAI-compatible server.

Every request is a streaming ``POST /v1/completions`` with ``max_tokens = output_tokens``,
``ignore_eos`` and the request's temperature. The client notes when each streamed chunk arrives:
the first gives TTFT, the gaps between chunks are the inter-token latencies (one per decode step
that emitted tokens, which with speculative decoding can emit several), the last gives E2E.
``return_token_ids`` asks vLLM to say how many tokens each chunk carries, and the final usage
chunk gives the exact output token count.

``trace`` mode sends each request at its ``arrival_s`` (relative to the first) divided by
``time_scale``; ``closed`` mode (also used when requests have no arrival times) keeps
``concurrency`` requests in flight. The first ``warmup_requests`` run but are left out of the
statistics. A failed request counts as not ok, with NaN TTFT/TPOT and its error message.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.backends.vllm._prompts import SyntheticPrompts
from autotune.errors import DependencyError
from autotune.redact import redact_text
from autotune.types import (
    PEAK_IN_FLIGHT,
    AcceptanceCounts,
    Measurement,
    Progress,
    ReplaySchedule,
    Request,
)

if TYPE_CHECKING:
    import httpx

__all__ = [
    "ReplayTarget",
    "RequestResult",
    "ServerDied",
    "build_measurement",
    "replay",
]


class ServerDied(Exception):
    """The server process exited while requests were in flight."""


@dataclass(frozen=True, slots=True)
class ReplayTarget:
    """Where and how to send requests."""

    base_url: str
    model: str
    request_timeout_s: float
    prompts: SyntheticPrompts
    #: Sent with every request: the endpoint's user-info and query (never in a repr).
    auth: tuple[str, str] | None = field(default=None, repr=False)
    params: tuple[tuple[str, str], ...] = field(default=(), repr=False)


@dataclass(slots=True)
class RequestResult:
    """What one request measured; times in seconds on the client's monotonic clock."""

    index: int
    sent_s: float
    done_s: float = math.nan
    first_s: float = math.nan
    output_tokens: int = 0
    gaps: list[float] = field(default_factory=list)
    ok: bool = False
    error: str | None = None

    @property
    def ttft_s(self) -> float:
        return self.first_s - self.sent_s

    @property
    def e2e_s(self) -> float:
        return self.done_s - self.sent_s

    @property
    def tpot_s(self) -> float:
        if not self.ok:
            return math.nan
        if self.output_tokens <= 1:
            return 0.0
        return (self.done_s - self.first_s) / (self.output_tokens - 1)


def _import_httpx() -> Any:
    try:
        import httpx
    except ImportError as e:
        raise DependencyError.missing("httpx", "vllm", "The vllm backend's client") from e
    return httpx


def _error_text(status: int, body: bytes) -> str:
    text = body.decode("utf-8", errors="replace")
    try:
        message = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = text.strip()
    return f"HTTP {status}: {str(message)[:300]}"


def _body(target: ReplayTarget, request: Request, index: int, seed: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": target.model,
        "prompt": request.prompt if request.prompt is not None
        else target.prompts.prompt(request),
        "max_tokens": request.output_tokens,
        "temperature": request.temperature,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
    }
    if request.temperature > 0:
        body["seed"] = (seed * 1_000_003 + index) % 2**31
    return body


def _chunk_tokens(choice: dict[str, Any]) -> int:
    """Tokens a streamed choice carries (vLLM's ``token_ids`` when present, else 1 per chunk)."""
    ids = choice.get("token_ids")
    if isinstance(ids, list):
        return len(ids)
    if not choice.get("text") and choice.get("finish_reason") is not None:
        return 0  # a bare finish marker
    return 1


async def _one(client: httpx.AsyncClient, target: ReplayTarget, request: Request, index: int,
               seed: int) -> RequestResult:
    httpx = _import_httpx()
    result = RequestResult(index=index, sent_s=time.perf_counter())
    last = math.nan
    counted = 0
    usage_tokens: int | None = None
    try:
        async with asyncio.timeout(target.request_timeout_s), client.stream(
                "POST", f"{target.base_url}/v1/completions",
                json=_body(target, request, index, seed)) as resp:
            if resp.status_code != 200:
                result.error = _error_text(resp.status_code, await resp.aread())
            else:
                async for line in resp.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    obj = json.loads(data)
                    if "error" in obj:
                        err = obj["error"]
                        msg = err.get("message", err) if isinstance(err, dict) else err
                        result.error = f"stream error: {str(msg)[:300]}"
                        break
                    for choice in obj.get("choices") or []:
                        n = _chunk_tokens(choice)
                        if n:
                            now = time.perf_counter()
                            if counted == 0:
                                result.first_s = now
                            else:
                                result.gaps.append(now - last)
                            last = now
                            counted += n
                    usage = obj.get("usage")
                    if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
                        usage_tokens = int(usage["completion_tokens"])
    except TimeoutError:
        result.error = f"timed out after {target.request_timeout_s:g} s (request_timeout_s)"
    except httpx.HTTPError as e:
        result.error = redact_text(f"{type(e).__name__}: {e}")[:300]
    except ValueError as e:  # malformed JSON in the stream
        result.error = f"malformed stream: {e}"[:300]
    result.done_s = time.perf_counter()
    result.output_tokens = usage_tokens if usage_tokens is not None else counted
    if result.error is None and counted == 0:
        result.error = "the stream ended without any token"
    result.ok = result.error is None
    if not result.ok:
        result.first_s = math.nan
    return result


async def _drive(target: ReplayTarget, schedule: ReplaySchedule, requests: Sequence[Request],
                 progress: Progress | None, alive: Callable[[], bool]) -> list[RequestResult]:
    httpx = _import_httpx()
    results: list[RequestResult] = []
    total = len(requests)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    timeout = httpx.Timeout(target.request_timeout_s, connect=30.0)

    def finished(res: RequestResult) -> None:
        results.append(res)
        if progress is not None:
            progress(len(results), total)

    async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False,
                                 auth=target.auth, params=list(target.params)) as client:

        async def send(index: int, request: Request) -> None:
            finished(await _one(client, target, request, index, schedule.seed))

        async def trace() -> None:
            first = min(r.arrival_s for r in requests if r.arrival_s is not None)
            t0 = time.perf_counter()
            async with asyncio.TaskGroup() as group:
                for index, request in enumerate(requests):
                    due = ((request.arrival_s or first) - first) / schedule.time_scale
                    delay = due - (time.perf_counter() - t0)
                    if delay > 0:
                        await asyncio.sleep(delay)
                    group.create_task(send(index, request))

        async def closed() -> None:
            queue = iter(enumerate(requests))

            async def worker() -> None:
                for index, request in queue:
                    await send(index, request)

            async with asyncio.TaskGroup() as group:
                for _ in range(max(1, schedule.concurrency)):
                    group.create_task(worker())

        async def watch() -> None:
            while alive():
                await asyncio.sleep(0.5)
            raise ServerDied

        timed = schedule.mode == "trace" and any(r.arrival_s is not None for r in requests)
        main = asyncio.create_task(trace() if timed else closed())
        watcher = asyncio.create_task(watch())
        try:
            await asyncio.wait({main, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (main, watcher):
                task.cancel()
            await asyncio.gather(main, watcher, return_exceptions=True)
        if watcher.done() and not watcher.cancelled() and isinstance(watcher.exception(),
                                                                     ServerDied):
            raise ServerDied
        main.result()
    return results


def replay(target: ReplayTarget, schedule: ReplaySchedule, requests: Sequence[Request],
           progress: Progress | None, alive: Callable[[], bool]) -> list[RequestResult]:
    """Replay ``requests`` per ``schedule``; raises :class:`ServerDied` if ``alive()`` turns
    False. Runs its own event loop (in a helper thread when this thread already runs one)."""
    coro_args = (target, schedule, requests, progress, alive)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_drive(*coro_args))
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="vllm-replay") as pool:
        return pool.submit(asyncio.run, _drive(*coro_args)).result()


def _peak_in_flight(results: Sequence[RequestResult]) -> int:
    """The most requests sent and not yet finished at once (one unfinished counts to the end);
    a request finishing as another is sent frees its place first."""
    events = sorted([(r.sent_s, 1) for r in results]
                    + [(r.done_s, -1) for r in results if math.isfinite(r.done_s)])
    peak = held = 0
    for _, step in events:
        held += step
        peak = max(peak, held)
    return peak


def build_measurement(results: Sequence[RequestResult], warmup: int, wall_time_s: float,
                      acceptance: AcceptanceCounts | None,
                      extra: dict[str, float] | None = None) -> Measurement:
    """The :class:`Measurement` of the requests with index >= ``warmup``, in completion order."""
    measured = sorted((r for r in results if r.index >= warmup), key=lambda r: r.done_s)
    f64 = np.float64
    errors = Counter(r.error for r in measured if r.error)
    if measured:
        duration = max(r.done_s for r in measured) - min(r.sent_s for r in measured)
    else:
        duration = 0.0
    gaps = [g for r in measured for g in r.gaps]
    busy = (max(r.done_s for r in results) - min(r.sent_s for r in results)) if results else 0.0
    return Measurement(
        ttft_s=np.array([r.ttft_s for r in measured], dtype=f64),
        tpot_s=np.array([r.tpot_s for r in measured], dtype=f64),
        e2e_s=np.array([r.e2e_s for r in measured], dtype=f64),
        output_tokens=np.array([r.output_tokens for r in measured], dtype=np.int64),
        ok=np.array([r.ok for r in measured], dtype=np.bool_),
        itl_s=np.array(gaps, dtype=f64),
        duration_s=float(duration),
        wall_time_s=float(wall_time_s),
        acceptance=acceptance,
        errors=tuple(f"{msg} (x{n})" if n > 1 else msg for msg, n in errors.most_common(20)),
        extra={**(extra or {}), PEAK_IN_FLIGHT: float(_peak_in_flight(results))},
        busy_s=float(busy),
    )
