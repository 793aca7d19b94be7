"""A corpus of malformed samples: each kind, the line it breaks and what the error must say.

Every kind is a small file (one valid line first, so line numbers are checked beyond 1) that
``autotune traffic inspect`` and ``autotune start --once`` must refuse with exit code 2 and a
message naming ``file:line``; ``tests/traffic/test_corpus.py`` runs them. ``FILE_KINDS`` are
the few that are wrong as a whole (no line to name). ``python tests/traffic/sample_corpus.py``
prints the table of kinds and messages.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GOOD: dict[str, Any] = {"id": "r1", "arrival_s": 0.0, "workload": "chat", "prompt_tokens": 120,
                        "output_tokens": 40, "acceptance": [0.9, 0.8, 0.7]}
GOOD_LINE = json.dumps(GOOD).encode()


def _with(**changes: Any) -> bytes:
    """The good line with fields changed (a value of ``...`` removes the field)."""
    rec = {**GOOD, "id": "r2", "arrival_s": 1.0, **changes}
    return json.dumps({k: v for k, v in rec.items() if v is not ...}).encode()


def _raw(text: str) -> bytes:
    """The good line with a raw JSON fragment in place of output_tokens' value."""
    return GOOD_LINE.replace(b'"output_tokens": 40', f'"output_tokens": {text}'.encode())


@dataclass(frozen=True)
class Kind:
    """One kind of malformed input: its lines (or whole bytes), where it breaks, what it says."""

    name: str
    content: bytes | Callable[[], bytes]
    line: int | None  # None: the file as a whole; 0: the line where the stream breaks
    says: str
    skippable: bool = True  # with --skip-invalid, the good lines load and this one is counted

    def data(self) -> bytes:
        return self.content() if callable(self.content) else self.content


def _lines(*lines: bytes) -> bytes:
    return b"\n".join(lines) + b"\n"


def _second(line: bytes) -> bytes:
    return _lines(GOOD_LINE, line)


def _overlong() -> bytes:
    from autotune.traffic.lines import MAX_LINE_BYTES

    prompt = "x" * (MAX_LINE_BYTES + 10)
    return _second(_with(prompt=prompt))


def _gzip_truncated() -> bytes:
    data = gzip.compress(_lines(*[_with(id=f"r{i}") for i in range(200)]), mtime=0)
    return data[: len(data) // 2]


KINDS: list[Kind] = [
    Kind("truncated JSON object", _second(GOOD_LINE[:-10]), 2, "invalid JSON"),
    Kind("JSON array instead of an object", _second(b"[1, 2, 3]"), 2,
         "must be a JSON object, got a list"),
    Kind("bare number", _second(b"42"), 2, "must be a JSON object, got int"),
    Kind("bare string", _second(b'"hello"'), 2, "must be a JSON object, got a string"),
    Kind("null line", _second(b"null"), 2, "must be a JSON object, got null"),
    Kind("arrays nested 5,000 deep", _second(b"[" * 5000 + b"]" * 5000), 2,
         "nested more than 64 levels"),
    Kind("objects nested 3,000 deep", _second(b'{"a":' * 3000 + b"1" + b"}" * 3000), 2,
         "nested more than 64 levels"),
    Kind("invalid UTF-8 bytes", _second(GOOD_LINE.replace(b'"chat"', b'"ch\xff\xfet"')), 2,
         "invalid UTF-8 at byte"),
    Kind("UTF-16 file", "\ufeff".encode("utf-16-le") + GOOD_LINE.decode().encode("utf-16-le"),
         1, "the file is UTF-16", skippable=False),
    Kind("line over 16 MiB", _overlong, 2, "the longest line accepted"),
    Kind("NUL byte inside the line", _second(GOOD_LINE[:20] + b"\x00" + GOOD_LINE[20:]), 2,
         "invalid JSON"),
    Kind("two objects on one line", _second(GOOD_LINE + GOOD_LINE), 2, "Extra data"),
    Kind("trailing comma", _second(GOOD_LINE[:-1] + b", }"), 2, "invalid JSON"),
    Kind("single quotes (a Python dict)", _second(str(GOOD).encode()), 2, "invalid JSON"),
    Kind("UTF-8 byte-order mark on line 2", _second(b"\xef\xbb\xbf" + GOOD_LINE), 2,
         "starts with a UTF-8 byte-order mark, which belongs at the start of a file only"),
    Kind("lone surrogate escape", _second(_with(prompt="a\ud800b")), 2, "lone surrogate"),
    Kind("CR-only line ends (classic Mac)", GOOD_LINE + b"\r" + _with() + b"\r", 1,
         "Extra data", skippable=False),
    Kind("output_tokens missing", _second(_with(output_tokens=...)), 2,
         "output_tokens: required field is missing"),
    Kind("empty object", _second(b"{}"), 2, "output_tokens: required field is missing"),
    Kind("output_tokens zero", _second(_with(output_tokens=0)), 2, "output_tokens: must be >= 1"),
    Kind("output_tokens negative", _second(_with(output_tokens=-5)), 2,
         "output_tokens: must be >= 1"),
    Kind("output_tokens a string", _second(_with(output_tokens="40")), 2,
         'output_tokens: must be an integer, got a string "40"'),
    Kind("output_tokens fractional", _second(_with(output_tokens=2.5)), 2,
         "output_tokens: must be an integer, got float 2.5"),
    Kind("output_tokens boolean", _second(_with(output_tokens=True)), 2,
         "output_tokens: must be an integer, got a boolean"),
    Kind("output_tokens beyond any context", _second(_with(output_tokens=10 ** 30)), 2,
         "output_tokens: must be <= 1,000,000"),
    Kind("output_tokens of 400 digits", _second(_raw("9" * 400)), 2,
         "output_tokens: must be <= 1,000,000"),
    Kind("output_tokens of 5,000 digits", _second(_raw("9" * 5000)), 2,
         "Exceeds the limit (4300 digits)"),
    Kind("output_tokens NaN", _second(_raw("NaN")), 2, "output_tokens: must be an integer"),
    Kind("prompt_tokens Infinity", _second(GOOD_LINE.replace(b'"prompt_tokens": 120',
                                                             b'"prompt_tokens": Infinity')), 2,
         "prompt_tokens: must be an integer"),
    Kind("neither prompt nor prompt_tokens", _second(_with(prompt_tokens=...)), 2,
         "prompt_tokens: one of prompt (non-empty text) or prompt_tokens is required"),
    Kind("prompt not a string", _second(_with(prompt=["a", "b"])), 2,
         "prompt: must be a string, got a list"),
    Kind("prompt_tokens an object", _second(_with(prompt_tokens={"n": 3})), 2,
         "prompt_tokens: must be an integer, got an object"),
    Kind("request longer than max_model_len", _second(_with(prompt_tokens=19_990)), 2,
         "19,990 + 40 = 20,030 tokens, more than max_model_len 20,000"),
    Kind("acceptance above 1", _second(_with(acceptance=[0.9, 1.5])), 2,
         "acceptance[1]: must be a probability in [0, 1]"),
    Kind("acceptance not a list", _second(_with(acceptance="high")), 2,
         "acceptance: must be a list of probabilities"),
    Kind("acceptance longer than the draft block", _second(_with(acceptance=[0.5] * 9)), 2,
         "more than the draft block size (8)"),
    Kind("acceptance holding a string", _second(_with(acceptance=[0.9, "0.8"])), 2,
         'acceptance[1]: must be a probability in [0, 1], got a string "0.8"'),
    Kind("arrival_s negative", _second(_with(arrival_s=-1.0)), 2, "arrival_s: must be >= 0"),
    Kind("arrival_s a string", _second(_with(arrival_s="00:01")), 2,
         "arrival_s: must be a finite number of seconds"),
    Kind("arrival_s a year and more away", _second(_with(arrival_s=4e7)), 2,
         "apart, more than 31,622,400 s"),
    Kind("arrival_s missing after lines that had it", _second(_with(arrival_s=...)), 2,
         "arrival_s: missing here but given on earlier lines"),
    Kind("timestamp mixed with arrival_s", _second(_with(arrival_s=..., timestamp=12.0)), 2,
         "timestamp: earlier lines use arrival_s"),
    Kind("timestamp not a time", _lines(_with(arrival_s=..., timestamp="2024-05-01T10:00:00Z"),
                                        _with(arrival_s=..., timestamp="yesterday")), 2,
         "timestamp: must be ISO-8601"),
    Kind("temperature negative", _second(_with(temperature=-0.5)), 2,
         "temperature: must be a finite number >= 0"),
    Kind("workload empty", _second(_with(workload="  ")), 2, "workload: must be a non-empty"),
    Kind("workload with a terminal escape", _second(_with(workload="chat\x1b[2J")), 2,
         "workload: holds a control or separator character"),
    Kind("workload of 200 characters", _second(_with(workload="w" * 200)), 2,
         "workload: is 200 characters long, more than 128"),
    Kind("id a boolean", _second(_with(id=True)), 2, "id: must be a non-empty string"),
    Kind("truncated gzip", _gzip_truncated, 0, "cannot read (corrupt or truncated gzip?)",
         skippable=False),
    Kind("bad line inside a gzip file", lambda: gzip.compress(_second(b"{oops"), mtime=0), 2,
         "invalid JSON"),
]

#: Files wrong as a whole: the message names the file (there is no line to name).
FILE_KINDS: list[Kind] = [
    Kind("empty file", b"", None, "holds no requests"),
    Kind("only blank lines", b"\n\n  \n\r\n", None, "holds no requests"),
    Kind("every line invalid (with --skip-invalid)", _lines(b"{oops", b"[]"), None,
         "all 2 lines are invalid"),
]


def write(kind: Kind, directory: Path) -> Path:
    suffix = ".jsonl.gz" if "gzip" in kind.name else ".jsonl"
    path = directory / ("sample" + suffix)
    path.write_bytes(kind.data())
    return path


if __name__ == "__main__":  # the corpus table: kind, line, message (from traffic inspect)
    import tempfile

    from click.testing import CliRunner

    from autotune.cli import cli
    from autotune.policy import DEFAULT_POLICY_PATH

    with tempfile.TemporaryDirectory() as tmp:
        print("| kind | line | `autotune traffic inspect` says |\n|---|---|---|")
        for kind in KINDS + FILE_KINDS:
            path = write(kind, Path(tmp))
            args = ["traffic", "inspect", str(path), "--policy", str(DEFAULT_POLICY_PATH)]
            if kind in FILE_KINDS and "skip" in kind.name:
                args.append("--skip-invalid")
            res = CliRunner().invoke(cli, args)
            message = res.stderr.strip().splitlines()[-1].replace(str(path), "sample.jsonl")
            print(f"| {kind.name} | {kind.line or '-'} | `{message[:150]}` |")
