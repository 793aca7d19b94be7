"""What an importer is: a per-file line parser turning one source line into one :class:`Row`.

An importer module defines a :class:`LineParser` class and an ``IMPORTER`` constant; the
registry in :mod:`autotune.traffic.importers` lists it by name. The framework
(:mod:`autotune.traffic.importers.run`) owns the file: it opens it (plain or gzip), splits and
decodes lines, counts and skips bad rows, turns absolute times into ``arrival_s`` and writes the
sample. A parser only looks at one line at a time and raises :class:`TrafficError` built with
:meth:`LineParser.fail` for a bad one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.errors import TrafficError
from autotune.traffic.lines import json_value
from autotune.traffic.sample import MAX_OUTPUT_TOKENS, MAX_PROMPT_TOKENS

__all__ = ["Importer", "LineParser", "Row", "describe", "is_number"]


@dataclass(frozen=True, slots=True)
class Row:
    """One imported request before it becomes a sample line.

    ``time_s`` is an absolute time in seconds on any origin (epoch seconds, milliseconds from the
    trace start / 1000...); the framework subtracts the earliest one to get ``arrival_s``.
    ``extra`` holds format-specific fields kept in the sample line (e.g. Mooncake's ``hash_ids``);
    the sample reader ignores fields it does not know.
    """

    line: int
    output_tokens: int
    prompt_tokens: int | None = None
    prompt: str | None = None
    time_s: float | None = None
    id: str | None = None
    workload: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


def is_number(v: Any) -> bool:
    """A JSON number that is a finite float (not a bool, NaN, infinity or a huge integer)."""
    if not isinstance(v, int | float) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # an integer beyond the float range
        return False


def describe(v: Any) -> str:
    """A short rendering of a bad value for an error message."""
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list):
        return "a list"
    try:
        text = json.dumps(v) if not isinstance(v, float) or math.isfinite(v) else str(v)
    except ValueError:  # an integer too long to print
        return "a number of more than 4,300 digits"
    return text if len(text) <= 60 else text[:57] + "..."


class LineParser:
    """Parses the lines of one file; a new instance per file (it may keep a CSV header).

    Subclasses implement :meth:`parse`: return a :class:`Row`, ``None`` for a line that holds no
    request (a header), or raise the error of :meth:`fail`.
    """

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, line: int, fld: str | None, reason: str) -> TrafficError:
        return TrafficError.at(self.path, line, fld, reason)

    def parse(self, text: str, line: int) -> Row | None:  # pragma: no cover - abstract
        raise NotImplementedError

    # Helpers shared by the JSON-lines parsers.

    def json_object(self, text: str, line: int) -> dict[str, Any]:
        try:
            obj = json_value(text)
        except ValueError as e:
            raise self.fail(line, None, str(e)) from None
        if not isinstance(obj, dict):
            raise self.fail(line, None, f"each line must be a JSON object, got {describe(obj)}")
        return obj

    def count(self, value: Any, line: int, fld: str, *, low: int = 1,
              output: bool = False) -> int:
        """A token count: an integer (or integral float) from ``low`` to the sample format's
        largest prompt (or, ``output``, output) count."""
        if value is None:
            raise self.fail(line, fld, "required field is missing")
        if not is_number(value) or (isinstance(value, float) and not value.is_integer()):
            raise self.fail(line, fld, f"must be an integer token count, got {describe(value)}")
        high = MAX_OUTPUT_TOKENS if output else MAX_PROMPT_TOKENS
        if int(value) < low:
            raise self.fail(line, fld, f"must be >= {low}, got {describe(int(value))}")
        if int(value) > high:
            raise self.fail(line, fld, f"must be <= {high:,}, got {describe(int(value))}")
        return int(value)


@dataclass(frozen=True, slots=True)
class Importer:
    """A registered input format: its name, a one-line summary and its parser factory.

    ``has_times`` says whether the format carries arrival times (else replay is closed-loop).
    """

    name: str
    summary: str
    parser: Callable[[str], LineParser]
    has_times: bool = True
