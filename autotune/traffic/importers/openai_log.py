"""Request log of an OpenAI-compatible gateway, JSON Lines, one request a line.

Read from each line (top level, or nested under ``request`` / ``response`` as gateways that
log the request and response bodies do):

- time: ``timestamp`` (ISO-8601 string, or epoch seconds; numbers above 1e11 are read as epoch
  milliseconds) or OpenAI's ``created`` (epoch seconds); optional, but on every line or none;
- text: ``prompt`` (a string, or a list holding one string) for ``/v1/completions``, or
  ``messages`` (``[{"role", "content"}]``, content a string or a list of ``{"type": "text",
  "text"}`` parts) for ``/v1/chat/completions``, rendered as ``role: content`` paragraphs;
- ``usage.prompt_tokens`` (else estimated from the text) and ``usage.completion_tokens``
  (required, > 0: a failed or empty completion is a bad row);
- optional ``id``, ``model``, ``tenant`` (kept in the sample line), ``temperature`` (the
  request's sampling temperature) and ``workload``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from autotune.traffic.importers.base import Importer, LineParser, Row, describe, is_number

__all__ = ["IMPORTER", "OpenAILogParser", "parse_log_timestamp", "render_messages"]

_MS_THRESHOLD = 1e11


def parse_log_timestamp(v: Any) -> float:
    """Epoch seconds from an ISO-8601 string or epoch seconds/milliseconds."""
    if is_number(v):
        if v < 0:
            raise ValueError(f"must be epoch seconds >= 0, got {describe(v)}")
        return float(v) / 1000.0 if v > _MS_THRESHOLD else float(v)
    if isinstance(v, str):
        try:
            stamp = datetime.fromisoformat(v.strip().replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            if stamp.tzinfo is None:
                stamp = stamp.replace(tzinfo=UTC)
            return stamp.timestamp()
    raise ValueError(f"must be ISO-8601 (2026-11-16T18:15:46.68Z) or epoch seconds, got "
                     f"{describe(v)}")


def _content_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        texts = [t for t in parts if isinstance(t, str)]
        return "\n".join(texts) if texts else None
    return None


def render_messages(messages: list[Any]) -> str:
    """Chat messages as one completion-style text: ``role: content`` paragraphs.

    Raises ValueError naming the first message that has no role or no text content.
    """
    out = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise ValueError(f"message {i} must be an object with a string role")
        text = _content_text(msg.get("content"))
        if text is None:
            raise ValueError(f"message {i} has no text content (a string or text parts)")
        out.append(f"{msg['role']}: {text}")
    return "\n\n".join(out)


class OpenAILogParser(LineParser):
    def parse(self, text: str, line: int) -> Row | None:
        obj = self.json_object(text, line)
        nested = [v for k in ("request", "response") if isinstance(v := obj.get(k), dict)]

        def pick(key: str) -> Any:
            for src in (obj, *nested):
                if src.get(key) is not None:
                    return src[key]
            return None

        usage = pick("usage")
        if not isinstance(usage, dict):
            raise self.fail(line, "usage", "required object with prompt_tokens and "
                                           f"completion_tokens is missing (got {describe(usage)})")
        output_tokens = self.count(usage.get("completion_tokens"), line,
                                   "usage.completion_tokens", output=True)
        prompt = self._prompt(pick("prompt"), pick("messages"), line)
        prompt_tokens = None
        if usage.get("prompt_tokens") is not None:
            prompt_tokens = self.count(usage["prompt_tokens"], line, "usage.prompt_tokens")
        elif not prompt:
            raise self.fail(line, "usage.prompt_tokens",
                            "missing, and the line has no prompt or messages text to estimate "
                            "it from")

        time_s = None
        for key in ("timestamp", "created"):
            value = pick(key)
            if value is not None:
                try:
                    time_s = parse_log_timestamp(value)
                except ValueError as e:
                    raise self.fail(line, key, str(e)) from None
                break

        extra: dict[str, Any] = {
            k: v for k in ("model", "tenant") if isinstance(v := pick(k), str) and v}
        temperature = pick("temperature")
        if temperature is not None:
            if not is_number(temperature) or temperature < 0:
                raise self.fail(line, "temperature",
                                f"must be a number >= 0, got {describe(temperature)}")
            extra["temperature"] = float(temperature)
        rid, workload = pick("id"), pick("workload")
        return Row(
            line=line,
            time_s=time_s,
            prompt=prompt,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            id=str(rid) if isinstance(rid, str | int) and not isinstance(rid, bool) else None,
            workload=workload if isinstance(workload, str) and workload.strip() else None,
            extra=extra,
        )

    def _prompt(self, prompt: Any, messages: Any, line: int) -> str | None:
        if prompt is not None:
            if isinstance(prompt, list) and len(prompt) == 1:
                prompt = prompt[0]
            if not isinstance(prompt, str):
                raise self.fail(line, "prompt", f"must be a string (token-id prompts are not "
                                                f"supported), got {describe(prompt)}")
            return prompt
        if messages is not None:
            if not isinstance(messages, list) or not messages:
                raise self.fail(line, "messages",
                                f"must be a non-empty list of messages, got {describe(messages)}")
            try:
                return render_messages(messages)
            except ValueError as e:
                raise self.fail(line, "messages", str(e)) from None
        return None


IMPORTER = Importer(
    name="openai-log",
    summary="OpenAI-compatible gateway log JSONL: timestamp, prompt|messages, usage.*_tokens",
    parser=OpenAILogParser,
)
