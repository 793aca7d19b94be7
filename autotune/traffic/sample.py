"""Streaming reader and validator of the traffic sample format (docs/traffic.md).

A sample is JSON Lines (optionally gzip), one request per line. Every field is checked; a bad
line raises :class:`~autotune.errors.TrafficError` naming ``file:line: field: reason``, or, with
``skip_invalid``, is skipped and counted. Reading streams: a :class:`Sample` re-opens its file on
each iteration and holds one line at a time, so a million-request sample costs no more memory
than one request. Lines are read through :mod:`autotune.traffic.lines` (bounded length and
nesting, byte-order mark dropped); a request longer than the server's context
(``max_model_len``: prompt plus output tokens) is a bad line, as a real server rejects it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autotune.errors import TrafficError
from autotune.traffic.lines import MAX_LINE_BYTES, RawLine, iter_lines, json_value
from autotune.types import Request

__all__ = [
    "LENGTH_FIELD",
    "MAX_LABEL_CHARS",
    "MAX_OUTPUT_TOKENS",
    "MAX_PROMPT_TOKENS",
    "MAX_SPAN_S",
    "Sample",
    "estimate_tokens",
    "file_sha256",
    "read_sample",
]

#: Largest accepted token counts (far beyond any served context; catches unit mistakes).
MAX_PROMPT_TOKENS = 10_000_000
MAX_OUTPUT_TOKENS = 1_000_000
#: Largest accepted acceptance list when the caller gives no draft block size.
DEFAULT_MAX_ACCEPTANCE = 64
#: Longest workload label (labels name export files and table rows).
MAX_LABEL_CHARS = 128
#: Longest time a sample may span, first arrival to last (a year; catches unit mistakes, and a
#: replay that would wait for ever).
MAX_SPAN_S = 366 * 86400.0


def estimate_tokens(text: str) -> int:
    """Token count estimate for a prompt given only as text: ~4 characters per token."""
    return max(1, round(len(text) / 4))


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _finite(v: Any) -> float | None:
    """``v`` as a finite float; None for anything else (a string, NaN, an int beyond floats)."""
    if not _number(v):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _describe(v: Any) -> str:
    kind = {str: "a string", bool: "a boolean", list: "a list", dict: "an object",
            type(None): "null"}.get(type(v), type(v).__name__)
    if isinstance(v, dict | list):
        return kind
    try:
        text = json.dumps(v)
    except ValueError:  # an integer too long to print
        return "a number of more than 4,300 digits"
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{kind} {text}" if text != kind else kind


def _digits(v: int) -> str:
    """An integer for a message, cut when long."""
    text = str(v)
    return text if len(text) <= 30 else f"{text[:27]}... ({len(text)} digits)"


def _parse_timestamp(v: Any) -> float:
    """Epoch seconds from an ISO-8601 string (UTC unless it says otherwise) or epoch seconds."""
    if _number(v):
        f = _finite(v)
        if f is None or f < 0:
            raise ValueError(f"must be finite epoch seconds >= 0, got {_describe(v)}")
        return f
    if isinstance(v, str):
        try:
            stamp = datetime.fromisoformat(v.replace("Z", "+00:00"))
            if stamp.tzinfo is None:
                stamp = stamp.replace(tzinfo=UTC)
            return stamp.timestamp()
        except (ValueError, OverflowError):
            pass
    raise ValueError(f"must be ISO-8601 (2026-11-16T18:15:46.68Z) or epoch seconds, "
                     f"got {_describe(v)}")


#: Types of a number that needs no closer look (bool is a type of its own, so it is not here).
_PLAIN_NUMBERS = {float, int}
#: The field a request too long for the server's context is reported under.
LENGTH_FIELD = "prompt_tokens+output_tokens"


@dataclass
class _LineChecker:
    path: str
    max_acceptance: int
    max_model_len: int | None = None
    time_origin: float | None = None
    time_field: str | None = None
    earliest: float | None = None
    latest: float | None = None

    def fail(self, line: int, fld: str | None, reason: str) -> TrafficError:
        return TrafficError.at(self.path, line, fld, reason)

    def _int(self, obj: dict[str, Any], key: str, line: int, low: int, high: int) -> int:
        v = obj[key]
        if not _number(v):
            raise self.fail(line, key, f"must be an integer, got {_describe(v)}")
        if isinstance(v, float) and (not math.isfinite(v) or not v.is_integer()):
            raise self.fail(line, key, f"must be an integer, got {_describe(v)}")
        iv = int(v)
        if iv < low:
            raise self.fail(line, key, f"must be >= {low}, got {_digits(iv)}")
        if iv > high:
            raise self.fail(line, key, f"must be <= {high:,}, got {_digits(iv)}")
        return iv

    def request(self, obj: Any, line: int) -> Request:
        if not isinstance(obj, dict):
            raise self.fail(line, None, f"each line must be a JSON object, got {_describe(obj)}")
        rid = obj.get("id", f"line-{line}")
        if not isinstance(rid, str | int) or isinstance(rid, bool) or rid == "":
            raise self.fail(line, "id", f"must be a non-empty string, got {_describe(rid)}")

        if "output_tokens" not in obj:
            raise self.fail(line, "output_tokens", "required field is missing")
        output_tokens = self._int(obj, "output_tokens", line, 1, MAX_OUTPUT_TOKENS)

        prompt = obj.get("prompt")
        if prompt is not None and not isinstance(prompt, str):
            raise self.fail(line, "prompt", f"must be a string, got {_describe(prompt)}")
        if "prompt_tokens" in obj and obj["prompt_tokens"] is not None:
            prompt_tokens = self._int(obj, "prompt_tokens", line, 1, MAX_PROMPT_TOKENS)
        elif prompt:
            prompt_tokens = estimate_tokens(prompt)
        else:
            raise self.fail(line, "prompt_tokens",
                            "one of prompt (non-empty text) or prompt_tokens is required")
        if self.max_model_len is not None and prompt_tokens + output_tokens > self.max_model_len:
            raise self.fail(line, LENGTH_FIELD,
                            f"{prompt_tokens:,} + {output_tokens:,} = "
                            f"{prompt_tokens + output_tokens:,} tokens, more than max_model_len "
                            f"{self.max_model_len:,} (a server rejects such a request); "
                            "shorten it, raise serve.max_model_len, or pass --skip-invalid to "
                            "skip (and count) such lines")

        arrival = self._arrival(obj, line)
        workload = self._workload(obj.get("workload"), line)

        acceptance = obj.get("acceptance")
        if acceptance is not None:
            acceptance = self._acceptance(acceptance, line)

        temperature = obj.get("temperature", 0.0)
        if temperature is None:
            temperature = 0.0
        t = _finite(temperature)
        if t is None or t < 0:
            raise self.fail(line, "temperature",
                            f"must be a finite number >= 0, got {_describe(temperature)}")

        return Request(
            id=str(rid),
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            arrival_s=arrival,
            workload=workload,
            prompt=prompt,
            acceptance=acceptance,
            temperature=t,
            line=line,
        )

    def _workload(self, v: Any, line: int) -> str | None:
        if v is None:
            return None
        if not isinstance(v, str) or not v.strip():
            raise self.fail(line, "workload", f"must be a non-empty string, got {_describe(v)}")
        label = v.strip()
        if len(label) > MAX_LABEL_CHARS:
            raise self.fail(line, "workload", f"is {len(label):,} characters long, more than "
                                              f"{MAX_LABEL_CHARS}; use a short label")
        if not label.isprintable():
            raise self.fail(line, "workload", f"holds a control or separator character "
                                              f"({_describe(label)}); use printable text")
        return label

    def _arrival(self, obj: dict[str, Any], line: int) -> float | None:
        has_arrival = obj.get("arrival_s") is not None
        has_ts = obj.get("timestamp") is not None
        if not has_arrival and not has_ts:
            if self.time_field is not None:
                raise self.fail(line, self.time_field,
                                "missing here but given on earlier lines; give it on every "
                                "line or on none")
            return None
        fld = "arrival_s" if has_arrival else "timestamp"
        if self.time_field is None:
            self.time_field = fld
        elif self.time_field != fld:
            raise self.fail(line, fld, f"earlier lines use {self.time_field}; use one of "
                                       "arrival_s or timestamp throughout the sample")
        if has_arrival:
            v = obj["arrival_s"]
            arrival = _finite(v)
            if arrival is None:
                raise self.fail(line, "arrival_s",
                                f"must be a finite number of seconds, got {_describe(v)}")
            if arrival < 0:
                raise self.fail(line, "arrival_s",
                                f"must be >= 0 (seconds from sample start), got {_describe(v)}")
        else:
            try:
                ts = _parse_timestamp(obj["timestamp"])
            except ValueError as e:
                raise self.fail(line, "timestamp", str(e)) from None
            if self.time_origin is None:
                self.time_origin = ts
            arrival = ts - self.time_origin
        self._span(arrival, fld, line)
        return arrival

    def _span(self, arrival: float, fld: str, line: int) -> None:
        lo = arrival if self.earliest is None else min(self.earliest, arrival)
        hi = arrival if self.latest is None else max(self.latest, arrival)
        if hi - lo > MAX_SPAN_S:
            raise self.fail(line, fld, f"puts the sample's arrivals {hi - lo:,.0f} s apart, more "
                                       f"than {MAX_SPAN_S:,.0f} s (a year); are the times in "
                                       "seconds?")
        self.earliest, self.latest = lo, hi

    def _acceptance(self, v: Any, line: int) -> tuple[float, ...]:
        if not isinstance(v, list):
            raise self.fail(line, "acceptance",
                            f"must be a list of probabilities, got {_describe(v)}")
        if len(v) > self.max_acceptance:
            raise self.fail(line, "acceptance",
                            f"has {len(v)} positions, more than the draft block size "
                            f"({self.max_acceptance})")
        if set(map(type, v)) <= _PLAIN_NUMBERS and all(0.0 <= p <= 1.0 for p in v):
            return tuple(map(float, v))  # the common case, checked at C speed (NaN fails)
        for k, p in enumerate(v):
            c = _finite(p)
            if c is None or not 0.0 <= c <= 1.0:
                raise self.fail(line, f"acceptance[{k}]",
                                f"must be a probability in [0, 1], got {_describe(p)}")
        return tuple(map(float, v))


@dataclass
class Sample:
    """A traffic sample on disk, read lazily; iterate it (again) to stream its requests.

    ``skipped`` and ``read`` count the lines skipped (with ``skip_invalid``) and the requests
    produced by the most recent complete iteration; ``too_long`` counts the skipped lines whose
    request exceeds ``max_model_len``; ``errors`` keeps the first few skip reasons.

    ``arrival_s`` of a sample given with ``timestamp`` is measured from the first line's; a log
    that is not sorted gives negative ones to the requests before it
    (:func:`autotune.traffic.load.load_sample` re-bases them on the earliest).
    """

    path: Path
    skip_invalid: bool = False
    max_acceptance: int = DEFAULT_MAX_ACCEPTANCE
    max_model_len: int | None = None
    max_line_bytes: int = MAX_LINE_BYTES
    skipped: int = 0
    too_long: int = 0
    read: int = 0
    errors: list[str] = field(default_factory=list)
    time_origin: float | None = None  # the first line's timestamp (``timestamp`` samples)
    time_field: str | None = None  # arrival_s | timestamp | None

    def __iter__(self) -> Iterator[Request]:
        checker = _LineChecker(str(self.path), self.max_acceptance, self.max_model_len)
        skipped = too_long = read = 0
        errors: list[str] = []
        for raw in iter_lines(self.path, max_line_bytes=self.max_line_bytes):
            if raw.blank:
                continue
            try:
                req = checker.request(_json(raw), raw.number)
            except TrafficError as e:
                if not self.skip_invalid:
                    raise
                skipped += 1
                too_long += e.field == LENGTH_FIELD
                if len(errors) < 20:
                    errors.append(str(e))
                continue
            read += 1
            yield req
        self.skipped, self.too_long, self.read, self.errors = skipped, too_long, read, errors
        self.time_origin, self.time_field = checker.time_origin, checker.time_field
        if read == 0:
            what = (f"all {skipped} lines are invalid (first: {errors[0]})" if skipped
                    else "it holds no requests (empty file?)")
            raise TrafficError.at(str(self.path), None, None,
                                  f"{what}; a sample needs at least one valid JSON line")


    def pick(self, lines: Collection[int]) -> Iterator[Request]:
        """The requests on ``lines``, which an earlier complete iteration found valid, read
        again (only those lines are parsed), with arrivals from the same time origin."""
        checker = _LineChecker(str(self.path), self.max_acceptance, self.max_model_len,
                               time_origin=self.time_origin, time_field=self.time_field)
        wanted = set(lines)
        for raw in iter_lines(self.path, max_line_bytes=self.max_line_bytes):
            if raw.number in wanted:
                yield checker.request(_json(raw), raw.number)


def _json(raw: RawLine) -> Any:
    text = raw.text()
    try:
        return json_value(text)
    except ValueError as e:
        raise raw.fail(str(e)) from None


def read_sample(path: str | Path, *, skip_invalid: bool = False,
                max_acceptance: int = DEFAULT_MAX_ACCEPTANCE,
                max_model_len: int | None = None) -> Sample:
    """A lazily read sample; iterate it to stream validated :class:`Request` objects.

    ``max_model_len`` (the server's context, in tokens) makes a request whose prompt plus
    output tokens exceed it a bad line.
    """
    return Sample(Path(path), skip_invalid=skip_invalid, max_acceptance=max_acceptance,
                  max_model_len=max_model_len)
