"""What the sample reader tolerates, the server's context limit, and its bounds on hostile files.

Tolerated: a UTF-8 byte-order mark, CRLF line ends, unknown fields, arrivals out of order,
only the required fields, trailing blank lines, gzip. Refused, naming the line: requests longer
than ``max_model_len`` (skipped and counted with ``skip_invalid``). Bounded: line length (with
little memory), nesting depth, files that are not regular files.
"""

from __future__ import annotations

import gzip
import json
import os
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from autotune.cli import cli
from autotune.errors import TrafficError
from autotune.orchestrate import TuneOptions
from autotune.orchestrate.tuning import load_traffic
from autotune.policy import DEFAULT_POLICY_PATH, load_policy
from autotune.traffic import read_sample
from autotune.traffic.importers import import_traffic
from autotune.traffic.lines import MAX_NESTING, json_value
from autotune.traffic.load import load_sample, workload_requests
from autotune.traffic.sample import LENGTH_FIELD, Sample
from autotune.traffic.summary import summarize
from autotune.types import Request

RECORDS = [
    {"id": "a", "arrival_s": 0.0, "workload": "chat", "prompt_tokens": 100, "output_tokens": 20,
     "acceptance": [0.9, 0.8], "temperature": 0.0, "prompt": "héllo wörld"},
    {"id": "b", "arrival_s": 1.5, "workload": "code", "prompt_tokens": 300, "output_tokens": 60},
    {"id": "c", "arrival_s": 4.0, "workload": "chat", "prompt_tokens": 50, "output_tokens": 5},
]


def _plain() -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in RECORDS)


def _key(r: Request) -> tuple[object, ...]:
    return (r.id, r.prompt_tokens, r.output_tokens, r.arrival_s, r.workload, r.acceptance,
            r.prompt, r.temperature)


VARIANTS: dict[str, Callable[[], bytes]] = {
    "utf-8 byte-order mark": lambda: b"\xef\xbb\xbf" + _plain(),
    "CRLF line ends": lambda: _plain().replace(b"\n", b"\r\n"),
    "trailing blank lines": lambda: _plain() + b"\n\n   \n\r\n\t\n",
    "gzip": lambda: gzip.compress(_plain()),
    "gzip of a BOM and CRLF": lambda: gzip.compress(b"\xef\xbb\xbf"
                                                    + _plain().replace(b"\n", b"\r\n")),
    "unknown extra fields": lambda: b"".join(
        json.dumps({**r, "tenant": "t1", "hash_ids": [1, 2], "meta": {"x": [None, {}]}},
                   ensure_ascii=False).encode() + b"\n" for r in RECORDS),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_tolerated_variant_loads_the_same_requests(variant: str, tmp_path: Path) -> None:
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(_plain())
    other = tmp_path / "variant.jsonl"
    other.write_bytes(VARIANTS[variant]())
    expected = [_key(r) for r in read_sample(plain)]
    assert [_key(r) for r in read_sample(other)] == expected
    assert [_key(r) for r in load_sample(other, max_model_len=20000).requests] == expected
    res = CliRunner().invoke(cli, ["traffic", "inspect", str(other), "--format", "json"])
    assert res.exit_code == 0, res.stderr
    assert {row["workload"]: row["requests"] for row in json.loads(res.stdout)} == \
        {"chat": 2, "code": 1, "all": 3}


def test_azure_csv_with_a_byte_order_mark_imports(tmp_path: Path) -> None:
    """Excel writes CSV with a BOM; the header's first column must still be TIMESTAMP."""
    src = tmp_path / "t.csv"
    src.write_bytes(b"\xef\xbb\xbfTIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                    b"2023-11-16 18:15:46.6805900,374,44\r\n2023-11-16 18:15:47.0,10,5\r\n")
    report = import_traffic("azure", src, tmp_path / "o.jsonl")
    assert report.requests == 2
    assert [r.arrival_s for r in read_sample(tmp_path / "o.jsonl")] == \
        [0.0, pytest.approx(0.31941, abs=1e-6)]


def test_only_the_required_fields(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    p.write_text('{"output_tokens": 7, "prompt_tokens": 3}\n'
                 '{"output_tokens": 2, "prompt": "abcd"}\n')
    a, b = read_sample(p)
    assert (a.id, a.arrival_s, a.workload, a.acceptance, a.temperature) == \
        ("line-1", None, None, None, 0.0)
    assert (b.prompt_tokens, b.output_tokens, b.prompt) == (1, 2, "abcd")


def test_unsorted_arrival_s_summarised_and_replayed_in_order(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    arrivals = [5.0, 1.0, 3.0, 2.0]
    p.write_text("".join(json.dumps({"id": str(i), "arrival_s": t, "prompt_tokens": 10,
                                     "output_tokens": 5}) + "\n"
                         for i, t in enumerate(arrivals)))
    (summary,) = summarize(read_sample(p))
    assert summary.arrival_rate_per_s == pytest.approx(3 / 4.0)  # 3 gaps over 1.0 .. 5.0
    gaps = np.array([1.0, 1.0, 2.0])  # between the sorted arrivals 1, 2, 3, 5
    assert summary.burstiness == pytest.approx(gaps.std() / gaps.mean())
    ordered = workload_requests(load_sample(p).requests, 10)
    assert [r.id for r in ordered] == ["1", "3", "2", "0"]
    assert [r.arrival_s for r in ordered] == [0.0, 1.0, 2.0, 4.0]


def test_unsorted_timestamps_are_rebased_on_the_earliest(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    stamps = ["2024-05-01T10:00:10Z", "2024-05-01T10:00:04Z", 1714557607.5]
    p.write_text("".join(json.dumps({"timestamp": t, "prompt_tokens": 10, "output_tokens": 5})
                         + "\n" for t in stamps))
    assert [r.arrival_s for r in read_sample(p)] == [0.0, -6.0, -2.5]  # from the first line
    assert [r.arrival_s for r in load_sample(p).requests] == [6.0, 0.0, 3.5]
    naive = tmp_path / "naive.jsonl"  # without a zone: UTC, whatever the machine's zone
    naive.write_text(json.dumps({"timestamp": "2024-05-01T10:00:00", "prompt_tokens": 1,
                                 "output_tokens": 1}) + "\n" + json.dumps(
        {"timestamp": "2024-05-01T10:00:03+00:00", "prompt_tokens": 1, "output_tokens": 1}))
    assert [r.arrival_s for r in read_sample(naive)] == [0.0, 3.0]


# ------------------------------------------------------------------------- max_model_len
def _lengths(tmp_path: Path, *pairs: tuple[int, int]) -> Path:
    p = tmp_path / "s.jsonl"
    p.write_text("".join(json.dumps({"id": f"r{i}", "prompt_tokens": a, "output_tokens": b})
                         + "\n" for i, (a, b) in enumerate(pairs)))
    return p


def test_request_longer_than_max_model_len_is_an_error_naming_the_line(tmp_path: Path) -> None:
    p = _lengths(tmp_path, (900, 100), (900, 101))
    with pytest.raises(TrafficError) as e:
        list(read_sample(p, max_model_len=1000))
    assert e.value.line == 2 and e.value.field == LENGTH_FIELD
    assert str(e.value).startswith(f"{p}:2: prompt_tokens+output_tokens: 900 + 101 = 1,001 "
                                   "tokens, more than max_model_len 1,000")
    assert len(list(read_sample(p))) == 2  # no limit given: no check


def test_too_long_requests_are_skipped_and_counted(tmp_path: Path) -> None:
    p = _lengths(tmp_path, (10, 10), (5000, 10), (10, 5000), (0, 1), (10, 10))
    sample = read_sample(p, skip_invalid=True, max_model_len=1000)
    assert [r.id for r in sample] == ["r0", "r4"]
    assert (sample.skipped, sample.too_long) == (3, 2)
    loaded = load_sample(p, skip_invalid=True, max_model_len=1000)
    assert (loaded.skipped, loaded.too_long, len(loaded.requests)) == (3, 2, 2)


def test_start_validates_against_the_policys_max_model_len(tmp_path: Path) -> None:
    p = _lengths(tmp_path, (10, 10), (1500, 10))
    policy = load_policy(None, {"serve.max_model_len": 1024})
    with pytest.raises(TrafficError, match=r":2: prompt_tokens\+output_tokens: .* 1,024"):
        load_traffic(TuneOptions(traffic=p, policy=policy))
    loaded = load_traffic(TuneOptions(traffic=p, policy=policy, skip_invalid=True))
    assert (loaded.requests, loaded.too_long) == (1, 1)


def test_inspect_takes_the_limit_from_a_flag_or_a_policy(tmp_path: Path) -> None:
    p = _lengths(tmp_path, (10, 10), (19_990, 20), (1500, 10))
    res = CliRunner().invoke(cli, ["traffic", "inspect", str(p), "--max-model-len", "1024"])
    assert res.exit_code == 2 and f"{p}:2: prompt_tokens+output_tokens" in res.stderr
    res = CliRunner().invoke(cli, ["traffic", "inspect", str(p), "--max-model-len", "1024",
                                   "--skip-invalid"])
    assert res.exit_code == 0
    assert "skipped 2 invalid lines" in res.stderr and "2 longer than max_model_len" in res.stderr
    policy = tmp_path / "p.yaml"
    text = DEFAULT_POLICY_PATH.read_text()
    assert "max_model_len: 20000" in text
    policy.write_text(text.replace("max_model_len: 20000", "max_model_len: 16000"))
    res = CliRunner().invoke(cli, ["traffic", "inspect", str(p), "--policy", str(policy)])
    assert res.exit_code == 2
    assert f"{p}:2: prompt_tokens+output_tokens: 19,990 + 20 = 20,010 tokens, more than " \
           "max_model_len 16,000" in res.stderr


# ------------------------------------------------------------------------------ bounds
def test_an_overlong_line_is_refused_reading_only_the_limit(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    good = json.dumps({"prompt_tokens": 1, "output_tokens": 1}).encode()
    with p.open("wb") as f:
        f.write(good + b"\n" + b'{"prompt": "' + b"x" * (32 << 20) + b'"}\n' + good + b"\n")
    tracemalloc.start()
    try:
        with pytest.raises(TrafficError, match=r":2: longer than 1,048,576 bytes"):
            list(Sample(p, max_line_bytes=1 << 20))
        sample = Sample(p, max_line_bytes=1 << 20, skip_invalid=True)
        assert len(list(sample)) == 2 and sample.skipped == 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"reading a 32 MiB line took {peak / 2**20:.1f} MiB"


def test_a_gzip_bomb_of_one_endless_line_stops(tmp_path: Path) -> None:
    p = tmp_path / "bomb.jsonl.gz"
    with gzip.open(p, "wb") as f:
        for _ in range(64):
            f.write(b"0" * (1 << 20))
    assert p.stat().st_size < 200_000
    with pytest.raises(TrafficError, match=r":1: a line of more than 16,777,216 bytes; this is "
                                           "not a JSON Lines file"):
        list(Sample(p, max_line_bytes=1 << 18, skip_invalid=True))


@pytest.mark.parametrize(("depth", "ok"), [(MAX_NESTING, True), (MAX_NESTING + 1, False)])
def test_nesting_limit(depth: int, ok: bool) -> None:
    text = "[" * depth + "]" * depth
    if ok:
        assert json_value(text) is not None
    else:
        with pytest.raises(ValueError, match=f"nested more than {MAX_NESTING} levels"):
            json_value(text)
    # brackets inside strings do not count; unbalanced ones are the parser's to report
    assert json_value(json.dumps({"prompt": "[" * 10_000})) == {"prompt": "[" * 10_000}
    with pytest.raises(ValueError, match="invalid JSON"):
        json_value("[" * 100 + "}" * 100)


def test_files_that_are_not_regular_files(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opening a FIFO nobody writes to would block for ever
    for path, says in ((fifo, "not a regular file"), (Path("/dev/zero"), "not a regular file"),
                       (tmp_path, "is a directory"), (tmp_path / "nope", "file not found")):
        with pytest.raises(TrafficError, match=says):
            list(read_sample(path))
        with pytest.raises(TrafficError, match=says):
            import_traffic("mooncake", path, tmp_path / "o.jsonl")
