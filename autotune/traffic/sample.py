"""Streaming reader and validator of the traffic sample format (DESIGN §4).

A sample is JSON Lines (optionally gzip), one request per line. Every field is checked; a bad
line raises :class:`~autotune.errors.TrafficError` naming ``file:line: field: reason``, or, with
``skip_invalid``, is skipped and counted. Reading streams: a :class:`Sample` re-opens its file on
each iteration and holds one line at a time, so a million-request sample costs no more memory
than one request.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from autotune.errors import TrafficError
from autotune.types import Request

__all__ = [
    "MAX_OUTPUT_TOKENS",
    "MAX_PROMPT_TOKENS",
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


def estimate_tokens(text: str) -> int:
    """Token count estimate for a prompt given only as text: ~4 characters per token."""
    return max(1, round(len(text) / 4))


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _nonfinite(name: str) -> float:
    """JSON's NaN/Infinity become floats so the field check names the field that holds one."""
    return float(name)


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _describe(v: Any) -> str:
    kind = {str: "a string", bool: "a boolean", list: "a list", dict: "an object",
            type(None): "null"}.get(type(v), type(v).__name__)
    text = json.dumps(v) if not isinstance(v, dict | list) else kind
    return f"{kind} {text}" if text != kind else kind


def _parse_timestamp(v: Any) -> float:
    """Epoch seconds from an ISO-8601 string or a number of epoch seconds."""
    if _number(v):
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"must be finite epoch seconds >= 0, got {v}")
        return float(v)
    if isinstance(v, str):
        try:
            return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    raise ValueError(f"must be ISO-8601 (2026-11-16T18:15:46.68Z) or epoch seconds, "
                     f"got {_describe(v)}")


@dataclass
class _LineChecker:
    path: str
    max_acceptance: int
    time_origin: float | None = None
    time_field: str | None = None

    def fail(self, line: int, fld: str | None, reason: str) -> TrafficError:
        return TrafficError.at(self.path, line, fld, reason)

    def _int(self, obj: dict[str, Any], key: str, line: int, low: int, high: int) -> int:
        v = obj[key]
        if not _number(v):
            raise self.fail(line, key, f"must be an integer, got {_describe(v)}")
        if isinstance(v, float) and (not math.isfinite(v) or not v.is_integer()):
            raise self.fail(line, key, f"must be an integer, got {json.dumps(v)}")
        iv = int(v)
        if iv < low:
            raise self.fail(line, key, f"must be >= {low}, got {iv}")
        if iv > high:
            raise self.fail(line, key, f"must be <= {high:,}, got {iv:,}")
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

        arrival = self._arrival(obj, line)

        workload = obj.get("workload")
        if workload is not None and (not isinstance(workload, str) or not workload.strip()):
            raise self.fail(line, "workload", f"must be a non-empty string, got "
                                              f"{_describe(workload)}")

        acceptance = obj.get("acceptance")
        if acceptance is not None:
            acceptance = self._acceptance(acceptance, line)

        temperature = obj.get("temperature", 0.0)
        if temperature is None:
            temperature = 0.0
        if not _number(temperature) or not math.isfinite(temperature) or temperature < 0:
            raise self.fail(line, "temperature",
                            f"must be a finite number >= 0, got {_describe(temperature)}")

        return Request(
            id=str(rid),
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            arrival_s=arrival,
            workload=workload.strip() if workload else None,
            prompt=prompt,
            acceptance=acceptance,
            temperature=float(temperature),
            line=line,
        )

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
            if not _number(v) or not math.isfinite(v):
                raise self.fail(line, "arrival_s",
                                f"must be a finite number of seconds, got {_describe(v)}")
            if v < 0:
                raise self.fail(line, "arrival_s",
                                f"must be >= 0 (seconds from sample start), got {v}")
            return float(v)
        try:
            ts = _parse_timestamp(obj["timestamp"])
        except ValueError as e:
            raise self.fail(line, "timestamp", str(e)) from None
        if self.time_origin is None:
            self.time_origin = ts
        if ts < self.time_origin:
            raise self.fail(line, "timestamp",
                            f"is {self.time_origin - ts:.3f} s before the first request's; "
                            "timestamps must not precede the first line's")
        return ts - self.time_origin

    def _acceptance(self, v: Any, line: int) -> tuple[float, ...]:
        if not isinstance(v, list):
            raise self.fail(line, "acceptance",
                            f"must be a list of probabilities, got {_describe(v)}")
        if len(v) > self.max_acceptance:
            raise self.fail(line, "acceptance",
                            f"has {len(v)} positions, more than the draft block size "
                            f"({self.max_acceptance})")
        out = []
        for k, p in enumerate(v):
            if not _number(p) or not math.isfinite(p) or not 0.0 <= p <= 1.0:
                raise self.fail(line, f"acceptance[{k}]",
                                f"must be a probability in [0, 1], got {_describe(p)}")
            out.append(float(p))
        return tuple(out)


@dataclass
class Sample:
    """A traffic sample on disk, read lazily; iterate it (again) to stream its requests.

    ``skipped`` and ``read`` count the lines skipped (with ``skip_invalid``) and the requests
    produced by the most recent complete iteration; ``errors`` keeps the first few skip reasons.
    """

    path: Path
    skip_invalid: bool = False
    max_acceptance: int = DEFAULT_MAX_ACCEPTANCE
    skipped: int = 0
    read: int = 0
    errors: list[str] = field(default_factory=list)

    def __iter__(self) -> Iterator[Request]:
        checker = _LineChecker(str(self.path), self.max_acceptance)
        skipped = read = 0
        errors: list[str] = []
        with self._open() as raw:
            lineno = 0
            while True:
                lineno += 1
                try:
                    data = raw.readline()
                except (OSError, EOFError, zlib.error) as e:
                    raise TrafficError.at(str(self.path), lineno, None,
                                          f"cannot read (corrupt or truncated gzip?): {e}") from e
                if not data:
                    break
                if not data.strip():
                    continue
                try:
                    req = self._parse(checker, data, lineno)
                except TrafficError as e:
                    if not self.skip_invalid:
                        raise
                    skipped += 1
                    if len(errors) < 20:
                        errors.append(str(e))
                    continue
                read += 1
                yield req
        self.skipped, self.read, self.errors = skipped, read, errors
        if read == 0:
            what = (f"all {skipped} lines are invalid (first: {errors[0]})" if skipped
                    else "it holds no requests (empty file?)")
            raise TrafficError.at(str(self.path), None, None,
                                  f"{what}; a sample needs at least one valid JSON line")

    @staticmethod
    def _parse(checker: _LineChecker, data: bytes, lineno: int) -> Request:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise checker.fail(lineno, None, f"invalid UTF-8 at byte {e.start}") from None
        try:
            obj = json.loads(text, parse_constant=_nonfinite)
        except ValueError as e:
            raise checker.fail(lineno, None, f"invalid JSON: {e}") from None
        return checker.request(obj, lineno)

    @contextmanager
    def _open(self) -> Iterator[IO[bytes] | gzip.GzipFile]:
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            raise TrafficError.at(str(self.path), None, None,
                                  "file not found; pass --traffic with a JSONL sample") from None
        except IsADirectoryError:
            raise TrafficError.at(str(self.path), None, None,
                                  "is a directory, not a JSONL sample") from None
        except OSError as e:
            raise TrafficError.at(str(self.path), None, None, f"cannot open: {e}") from None
        try:
            if f.read(2) == b"\x1f\x8b":
                f.seek(0)
                with gzip.GzipFile(fileobj=f, mode="rb") as gz:
                    yield gz
            else:
                f.seek(0)
                yield f
        finally:
            f.close()


def read_sample(path: str | Path, *, skip_invalid: bool = False,
                max_acceptance: int = DEFAULT_MAX_ACCEPTANCE) -> Sample:
    """A lazily read sample; iterate it to stream validated :class:`Request` objects."""
    return Sample(Path(path), skip_invalid=skip_invalid, max_acceptance=max_acceptance)
