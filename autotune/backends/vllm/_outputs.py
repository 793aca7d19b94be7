"""The output check on a real server: a trial's check prompts decoded greedily, with the
runner-up token at every position (docs/outputs.md).

Every prompt is one non-streamed ``POST /v1/completions`` with temperature 0, ``max_tokens``
fixed, end-of-sequence ignored, vLLM's ``return_token_ids`` and ``logprobs: 2`` with
``return_tokens_as_token_ids`` (the two most likely tokens at each position, keyed
``token_id:N``). The prompts are sent together, so the server decodes them as one batch, as it
serves traffic. A reply the server refuses raises :class:`~autotune.errors.TrialFailed`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from autotune.errors import TrialFailed
from autotune.types import GreedyOutput, OutputCheck, Request

__all__ = ["UNFAITHFUL_TEMPERATURE", "decode_check", "parse_choice"]

#: Temperature of an output check made unfaithful on purpose (the test-only option
#: ``unfaithful_windows``): the server samples where it should decode greedily.
UNFAITHFUL_TEMPERATURE = 1.0


def _token_id(key: str) -> int:
    """``token_id:123`` (vLLM's ``return_tokens_as_token_ids`` keys) -> 123; -1 otherwise."""
    head, _, tail = key.rpartition(":")
    return int(tail) if head == "token_id" and tail.lstrip("-").isdigit() else -1


def parse_choice(choice: dict[str, Any]) -> GreedyOutput:
    """One completion choice -> its tokens and, per position, the margin over the runner-up
    and the runner-up's id (NaN / -1 where the server gave no second token)."""
    ids = choice.get("token_ids")
    logprobs = choice.get("logprobs") or {}
    top = logprobs.get("top_logprobs") or []
    chosen = logprobs.get("tokens") or []
    if ids is None:
        ids = [_token_id(str(t)) for t in chosen]
    margins: list[float] = []
    runner_up: list[int] = []
    for pos, token in enumerate(ids):
        options = top[pos] if pos < len(top) and isinstance(top[pos], dict) else {}
        ranked = sorted(((float(lp), _token_id(str(k))) for k, lp in options.items()),
                        reverse=True)
        own = next((lp for lp, tid in ranked if tid == int(token)), None)
        other = next(((lp, tid) for lp, tid in ranked if tid != int(token)), None)
        if own is None or other is None:
            margins.append(math.nan)
            runner_up.append(-1)
        else:
            margins.append(own - other[0])
            runner_up.append(other[1])
    if not top:
        return GreedyOutput(tuple(int(t) for t in ids))
    return GreedyOutput(tuple(int(t) for t in ids), tuple(margins), tuple(runner_up))


def _body(model: str, prompt: str | list[int], max_tokens: int, temperature: float,
          seed: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model, "prompt": prompt, "max_tokens": max_tokens,
        "temperature": temperature, "ignore_eos": True, "stream": False,
        "return_token_ids": True, "logprobs": 2, "return_tokens_as_token_ids": True,
    }
    if temperature > 0:
        body["seed"] = seed
    return body


def decode_check(client: Any, base_url: str, model: str, check: OutputCheck,
                 prompt_of: Callable[[Request], str | list[int]], *, timeout_s: float,
                 temperature: float = 0.0, seed: int = 0,
                 in_flight: int | None = None) -> tuple[GreedyOutput, ...]:
    """Decode ``check``'s prompts on the server at ``base_url``, all in flight at once (or
    ``in_flight`` at a time)."""
    requests: Sequence[Request] = check.requests

    def one(index: int) -> GreedyOutput:
        request = requests[index]
        body = _body(model, prompt_of(request), check.max_tokens, temperature, seed + index)
        try:
            resp = client.post(f"{base_url}/v1/completions", json=body, timeout=timeout_s)
        except Exception as e:  # a transport failure: the check cannot be made
            raise TrialFailed(f"output check: request {request.id!r} to {base_url} failed "
                              f"({type(e).__name__}: {e})") from e
        if resp.status_code != 200:
            raise TrialFailed(f"output check: {base_url} answered HTTP {resp.status_code} "
                              f"for request {request.id!r}: {resp.text[:300]}")
        try:
            choices = resp.json().get("choices") or []
        except ValueError as e:  # not the JSON completion asked for
            raise TrialFailed(f"output check: {base_url} answered request {request.id!r} with "
                              f"no JSON completion ({e}): {resp.text[:200]!r}") from e
        if not choices:
            raise TrialFailed(f"output check: {base_url} returned no choice for request "
                              f"{request.id!r}")
        return parse_choice(choices[0])

    if not requests:
        return ()
    with ThreadPoolExecutor(max_workers=min(len(requests), in_flight or 32)) as pool:
        return tuple(pool.map(one, range(len(requests))))
