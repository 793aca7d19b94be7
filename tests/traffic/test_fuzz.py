"""Property-based fuzzing of the sample reader and every importer over hostile input.

Random bytes, random JSON and mutated valid lines go through ``read_sample``/``load_sample``
and through each importer (whose output, when it writes one, must read back as a valid sample).
The only exceptions allowed out are the project's own ``TrafficError``, naming the file and,
for anything but a file-level verdict, the line.

CI runs a modest number of examples per property (``AUTOTUNE_FUZZ_EXAMPLES``, default 40) with a
deadline per example; a long run is ``AUTOTUNE_FUZZ_EXAMPLES=20000 pytest tests/traffic/
test_fuzz.py``.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.errors import TrafficError
from autotune.traffic import read_sample
from autotune.traffic.importers import IMPORTERS, import_traffic
from autotune.traffic.load import load_sample

FUZZ = settings(
    max_examples=int(os.environ.get("AUTOTUNE_FUZZ_EXAMPLES", "40")),
    deadline=None,  # a per-example time limit fails on a loaded machine; speed is bench/'s
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=os.environ.get("AUTOTUNE_FUZZ_RANDOM") is None,
    database=None,
)

#: Messages of the few verdicts about a whole file (no line to name).
FILE_LEVEL = ("holds no requests", "nothing to import", "no valid", "all ")

#: One valid line (or header + row) per input kind, the seeds of the mutations.
VALID: dict[str, list[bytes]] = {
    "sample": [
        b'{"id": "r1", "arrival_s": 0.5, "workload": "code", "prompt": "def f(x):", '
        b'"prompt_tokens": 812, "output_tokens": 256, "acceptance": [0.9, 0.8], '
        b'"temperature": 0.0}',
        b'{"id": "r2", "timestamp": "2023-11-16T18:15:46.68Z", "prompt_tokens": 10, '
        b'"output_tokens": 3}',
    ],
    "azure": [b"TIMESTAMP,ContextTokens,GeneratedTokens",
              b"2023-11-16 18:15:46.6805900,374,44"],
    "mooncake": [b'{"timestamp": 27482, "input_length": 6955, "output_length": 52, '
                 b'"hash_ids": [46, 47, 48]}'],
    "openai-log": [
        b'{"id": "c1", "timestamp": "2024-05-01T10:00:00Z", "model": "kimi", '
        b'"request": {"messages": [{"role": "user", "content": [{"type": "text", '
        b'"text": "hi"}]}], "temperature": 0.7}, '
        b'"response": {"usage": {"prompt_tokens": 12, "completion_tokens": 40}}}',
    ],
    "vllm-bench": [b'{"prompt": "Write a poem.", "output_tokens": 64}'],
}

#: Field names the parsers look at, so random objects hit real code paths.
KEYS = ["id", "arrival_s", "timestamp", "workload", "prompt", "prompt_tokens", "output_tokens",
        "acceptance", "temperature", "input_length", "output_length", "hash_ids", "usage",
        "prompt_tokens", "completion_tokens", "messages", "request", "response", "created",
        "role", "content", "text", "type", "model", "tenant"]

#: Byte strings that have broken parsers before: huge numbers, non-finite constants, deep
#: nesting, byte-order marks, control characters, lone surrogates, separators.
SPLICES = [b"1" * 400, b"-" + b"9" * 5000, b"1e400", b"NaN", b"-Infinity", b"[" * 3000,
           b"{\"a\":" * 2000, b"\xef\xbb\xbf", b"\xff\xfe", b"\r", b"\r\n", b"\x00", b"\x1b[31m",
           b'"\\ud800"', b"\xed\xa0\x80", b",", b"}", b"]", b'"', b"\\", b"null", b"true",
           b"0001-01-01T00:00:00+01:00", b"9999-12-31T23:59:59-14:00", b"[/x]", b"\n",
           b"99999999999999999999", b"1.5", b"-1", b"0", "\u2028".encode()]

surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, categories=["Cs"])
scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-(10 ** 30),
           max_value=10 ** 30) | st.floats() | st.text(max_size=30)
           | st.text(st.characters() | surrogates, max_size=6))
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5)
    | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=6),
    max_leaves=25)
json_objects = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), json_values,
                               max_size=8)


def _dump(v: Any) -> bytes:
    return json.dumps(v, allow_nan=True).encode()


@st.composite
def mutated(draw: st.DrawFn, lines: list[bytes]) -> bytes:
    """A valid file with a few random edits: flips, cuts, duplications and splices."""
    out = list(lines)
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(out) - 1))
        line = out[i]
        pos = draw(st.integers(0, len(line)))
        op = draw(st.sampled_from(["splice", "replace", "delete", "truncate", "flip",
                                   "duplicate", "blank"]))
        if op == "splice":
            line = line[:pos] + draw(st.sampled_from(SPLICES)) + line[pos:]
        elif op == "replace":
            end = draw(st.integers(pos, len(line)))
            line = line[:pos] + draw(st.sampled_from(SPLICES) | st.binary(max_size=8)) + line[end:]
        elif op == "delete":
            line = line[:pos] + line[pos + draw(st.integers(1, 8)):]
        elif op == "truncate":
            line = line[:pos]
        elif op == "flip" and line:
            k = min(pos, len(line) - 1)
            line = line[:k] + bytes([line[k] ^ (1 << draw(st.integers(0, 7)))]) + line[k + 1:]
        elif op == "duplicate":
            out.insert(i, line)
        elif op == "blank":
            out.insert(i, b"")
        out[i] = line
    return b"\n".join(out) + draw(st.sampled_from([b"\n", b"", b"\r\n", b"\n\n"]))


def files(kind: str) -> st.SearchStrategy[bytes]:
    valid = VALID[kind]
    return st.one_of(
        st.binary(max_size=600),
        st.lists(st.binary(max_size=80), max_size=6).map(b"\n".join),
        st.lists(json_values.map(_dump), min_size=1, max_size=4).map(b"\n".join),
        st.lists(json_objects.map(_dump), min_size=1, max_size=4).map(b"\n".join),
        mutated(valid),
        mutated(valid).map(gzip.compress),
    )


def _check_error(e: TrafficError, path: Path) -> None:
    text = str(e)
    assert e.path == str(path), text
    if e.line is None:
        assert any(k in text for k in FILE_LEVEL), f"file-level error without a line: {text}"
    else:
        assert text.startswith(f"{path}:{e.line}: "), text
    assert len(text) < 2000, f"error message of {len(text)} characters"


def _run(data: bytes, name: str, action: Callable[[Path, Path], None]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        out = Path(tmp) / "out.jsonl"
        try:
            action(path, out)
        except TrafficError as e:
            _check_error(e, path)
            assert not out.exists(), "a failed import left its output behind"
            assert sorted(p.name for p in Path(tmp).iterdir()) == [name], "temporary files left"


@FUZZ
@given(data=files("sample"))
def test_sample_reader_raises_only_traffic_errors(data: bytes) -> None:
    def read(path: Path, _out: Path) -> None:
        for req in read_sample(path):
            assert req.output_tokens >= 1 and req.prompt_tokens >= 1
        loaded = load_sample(path, max_model_len=4096)
        assert all(r.prompt_tokens + r.output_tokens <= 4096 for r in loaded.requests)
        assert all(r.arrival_s is None or r.arrival_s >= 0 for r in loaded.requests)
    _run(data, "s.jsonl", read)


@FUZZ
@given(data=files("sample"))
def test_sample_reader_skipping_never_fails_on_a_line(data: bytes) -> None:
    """With skip_invalid a bad line is counted, never raised: only file-level errors remain."""
    def read(path: Path, _out: Path) -> None:
        sample = read_sample(path, skip_invalid=True)
        try:
            n = sum(1 for _ in sample)
        except TrafficError as e:
            assert e.line is None or "cannot read" in str(e), str(e)
            raise
        assert n == sample.read and n >= 1
    _run(data, "s.jsonl", read)


def _importer_property(fmt: str) -> Callable[[bytes], None]:
    @FUZZ
    @given(data=files(fmt))
    def prop(data: bytes) -> None:
        def convert(path: Path, out: Path) -> None:
            report = import_traffic(fmt, path, out)
            written = list(read_sample(out))  # what an importer writes is a valid sample
            assert len(written) == report.requests >= 1
        _run(data, "trace.csv" if fmt == "azure" else "trace.jsonl", convert)
    return prop


test_azure_importer_raises_only_traffic_errors = _importer_property("azure")
test_mooncake_importer_raises_only_traffic_errors = _importer_property("mooncake")
test_openai_log_importer_raises_only_traffic_errors = _importer_property("openai-log")
test_vllm_bench_importer_raises_only_traffic_errors = _importer_property("vllm-bench")


def test_every_importer_is_fuzzed() -> None:
    assert set(IMPORTERS) == set(VALID) - {"sample"}
