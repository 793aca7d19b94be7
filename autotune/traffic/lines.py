"""Reading traffic files line by line, safely: what every reader of samples and traces shares.

A sample, a trace or a prompt set may be anything a user points at: a device, a gzip bomb, a
line of a million ``[``, a file an editor saved with a byte-order mark. :func:`iter_lines`
opens regular files only (plain or gzip), yields one line at a time with its number, never
holds more than :data:`MAX_LINE_BYTES` of one line, and drops a UTF-8 byte-order mark on the
first line. :meth:`RawLine.text` decodes a line (naming UTF-16 files as such) and
:func:`json_value` parses it with a bounded nesting depth (Python's JSON parser recurses; a deep
enough line would end in ``RecursionError``). Every failure is a
:class:`~autotune.errors.TrafficError` naming ``file:line``.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import stat
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from autotune.errors import TrafficError

__all__ = ["MAX_LINE_BYTES", "MAX_NESTING", "RawLine", "iter_lines", "json_value",
           "open_traffic"]

#: Longest line read, in bytes (16 MiB: about four million tokens of prompt text).
MAX_LINE_BYTES = 16 * 1024 * 1024
#: Deepest JSON nesting accepted (a sample line needs 2 levels, a gateway log line about 6).
MAX_NESTING = 64
#: An overlong line is skipped (with ``skip_invalid``) up to this many times the line limit;
#: beyond that the file is not line-oriented text (a gzip bomb, a binary) and reading stops.
_SKIP_FACTOR = 64

_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_GZIP_MAGIC = b"\x1f\x8b"
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_INNERMOST = re.compile(r"\[\]|\{\}")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
#: One decoder for every line (``json.loads`` with an option builds a new one per call).
_DECODER = json.JSONDecoder(parse_constant=float)


@dataclass(frozen=True, slots=True)
class RawLine:
    """One line of a file as read: its bytes (up to the limit) and where it is."""

    path: str
    number: int
    data: bytes
    overlong: bool = False

    @property
    def blank(self) -> bool:
        return not self.overlong and not self.data.strip()

    def fail(self, reason: str, fld: str | None = None) -> TrafficError:
        return TrafficError.at(self.path, self.number, fld, reason)

    def text(self) -> str:
        """The line decoded as UTF-8; TrafficError for an overlong or undecodable one."""
        if self.overlong:
            raise self.fail(f"longer than {len(self.data) - 1:,} bytes, the longest line "
                            "accepted; is this a JSON Lines file (one request a line)?")
        try:
            return self.data.decode("utf-8")
        except UnicodeDecodeError as e:
            if self.number == 1 and self.data.startswith(_UTF16_BOMS):
                raise self.fail("the file is UTF-16 (it starts with a UTF-16 byte-order mark); "
                                "save it as UTF-8") from None
            raise self.fail(f"invalid UTF-8 at byte {e.start}; samples are UTF-8 text"
                            ) from None


def json_value(text: str) -> Any:
    """Parse one JSON line; ValueError with the reason when it is invalid or nested too deep.

    NaN and Infinity parse as floats so that field checks name the field holding one. A string
    with a lone surrogate escape (``"\\ud800"``: valid JSON, not valid Unicode) is refused: it
    would fail later, when the text is encoded to be written or sent.
    """
    if text.startswith("\ufeff"):
        raise ValueError("starts with a UTF-8 byte-order mark, which belongs at the start of a "
                         "file only (were files joined with cat?); remove it")
    if _deeper_than(text, MAX_NESTING):
        raise ValueError(f"JSON nested more than {MAX_NESTING} levels deep; a request line "
                         "needs a few")
    try:
        value = _DECODER.decode(text.rstrip("\r\n"))
    except RecursionError:  # pragma: no cover - _deeper_than bounds the depth first
        raise ValueError("JSON nested too deep") from None
    except json.JSONDecodeError as e:  # its "line 1 column 5" would be read as the file's line
        raise ValueError(f"invalid JSON: {e.msg.removesuffix(' at')} at character "
                         f"{e.pos + 1}") from None
    except ValueError as e:  # an integer of more than 4,300 digits
        raise ValueError(f"invalid JSON: {str(e).split(';')[0]}") from None
    if _SURROGATE_ESCAPE.search(text) and not _unicode(value):
        raise ValueError("a string holds a lone surrogate escape (\\ud800 to \\udfff without "
                         "its pair), which is not Unicode text and cannot be written back")
    return value


def _unicode(value: Any) -> bool:
    """Whether every string in ``value`` is valid Unicode (no lone surrogate)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _deeper_than(text: str, limit: int) -> bool:
    """Whether the arrays/objects of ``text`` nest more than ``limit`` deep (strings ignored).

    Cheap on ordinary lines: at most ``limit`` brackets cannot nest deeper. Otherwise the
    strings are cut out and innermost bracket pairs removed ``limit`` times over; brackets left
    that still pair up nest deeper. Mismatched brackets are left for the parser to report.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    for _ in range(limit):
        brackets, removed = _INNERMOST.subn("", brackets)
        if not brackets or not removed:
            return False
    return _INNERMOST.search(brackets) is not None


@contextmanager
def open_traffic(path: str | Path, what: str = "a JSONL sample") -> Iterator[IO[bytes]]:
    """The file at ``path`` opened for reading bytes, decompressed when it is gzip.

    Only regular files: a directory, device or FIFO is a TrafficError (reading /dev/zero or a
    pipe nobody writes to would never end).
    """
    p = str(path)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        raise TrafficError.at(p, None, None, f"file not found; pass {what}") from None
    except OSError as e:
        raise TrafficError.at(p, None, None, f"cannot open ({e.strerror or e})") from None
    if stat.S_ISDIR(mode):
        raise TrafficError.at(p, None, None, f"is a directory; pass {what}")
    if not stat.S_ISREG(mode):
        raise TrafficError.at(p, None, None, f"is not a regular file (a device, pipe or "
                                             f"socket); pass {what}")
    try:
        f = open(p, "rb")  # noqa: SIM115 - closed below
    except OSError as e:
        raise TrafficError.at(p, None, None, f"cannot open ({e.strerror or e})") from None
    with f:
        if f.read(2) == _GZIP_MAGIC:
            f.seek(0)
            with gzip.GzipFile(fileobj=f, mode="rb") as gz:
                yield cast(IO[bytes], gz)
        else:
            f.seek(0)
            yield f


def iter_lines(path: str | Path, *, max_line_bytes: int = MAX_LINE_BYTES,
               what: str = "a JSONL sample") -> Iterator[RawLine]:
    """The lines of ``path`` (plain or gzip), numbered from 1, blank ones included.

    A line longer than ``max_line_bytes`` comes out ``overlong`` with only its first bytes;
    the rest of it is skipped when the caller asks for the next line. A first line's UTF-8
    byte-order mark is dropped. Unreadable data (a corrupt gzip stream) is a TrafficError.
    """
    p = str(path)
    with open_traffic(path, what) as fh:
        number = 0
        while True:
            number += 1
            data = _read(fh, p, number, max_line_bytes + 1)
            if not data:
                return
            if number == 1 and data.startswith(_BOM):
                data = data[len(_BOM):]
            overlong = len(data) > max_line_bytes and not data.endswith(b"\n")
            yield RawLine(p, number, data, overlong)
            if overlong:
                _skip_rest(fh, p, number, max_line_bytes)


def _read(fh: IO[bytes], path: str, number: int, limit: int) -> bytes:
    try:
        return fh.readline(limit)
    except (OSError, EOFError, zlib.error) as e:
        raise TrafficError.at(path, number, None,
                              f"cannot read (corrupt or truncated gzip?): {e}") from e


def _skip_rest(fh: IO[bytes], path: str, number: int, max_line_bytes: int) -> None:
    budget = max_line_bytes * _SKIP_FACTOR
    while budget > 0:
        chunk = _read(fh, path, number, min(1 << 20, budget))
        if not chunk or chunk.endswith(b"\n"):
            return
        budget -= len(chunk)
    raise TrafficError.at(path, number, None,
                          f"a line of more than {max_line_bytes * _SKIP_FACTOR:,} bytes; this "
                          "is not a JSON Lines file")
