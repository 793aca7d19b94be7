from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest

from autotune.errors import TrafficError
from autotune.traffic import read_sample
from autotune.traffic.load import load_sample, split_workloads, workload_requests
from autotune.traffic.summary import summarize

GOOD = {"id": "r1", "arrival_s": 0.5, "workload": "code", "prompt": "def f(x):",
        "prompt_tokens": 812, "output_tokens": 256, "acceptance": [0.9, 0.8], "temperature": 0.0}


def write_lines(path: Path, lines: list[str | bytes]) -> Path:
    with open(path, "wb") as f:
        for line in lines:
            f.write(line if isinstance(line, bytes) else line.encode())
            f.write(b"\n")
    return path


def one_bad(tmp_path: Path, **changes: object) -> TrafficError:
    bad = {**GOOD, **changes}
    bad = {k: v for k, v in bad.items() if v is not _DROP}
    p = write_lines(tmp_path / "s.jsonl", [json.dumps(GOOD), json.dumps(bad)])
    with pytest.raises(TrafficError) as e:
        list(read_sample(p, max_acceptance=8))
    assert e.value.line == 2, str(e.value)
    assert str(e.value).startswith(f"{p}:2: ")
    return e.value


_DROP = object()


def test_good_line_round_trips(tmp_path: Path) -> None:
    p = write_lines(tmp_path / "s.jsonl", [json.dumps(GOOD)])
    (req,) = list(read_sample(p))
    assert req.id == "r1" and req.prompt_tokens == 812 and req.output_tokens == 256
    assert req.acceptance == (0.9, 0.8) and req.workload == "code" and req.arrival_s == 0.5


@pytest.mark.parametrize(("changes", "field", "words"), [
    ({"output_tokens": _DROP}, "output_tokens", "missing"),
    ({"output_tokens": -3}, "output_tokens", ">= 1"),
    ({"output_tokens": 0}, "output_tokens", ">= 1"),
    ({"output_tokens": "256"}, "output_tokens", "string"),
    ({"output_tokens": 10**12}, "output_tokens", "<="),
    ({"output_tokens": 2.5}, "output_tokens", "integer"),
    ({"output_tokens": True}, "output_tokens", "boolean"),
    ({"acceptance": [0.5, 1.5]}, "acceptance[1]", "[0, 1]"),
    ({"acceptance": [-0.1]}, "acceptance[0]", "[0, 1]"),
    ({"acceptance": [0.9] * 9}, "acceptance", "draft block size"),
    ({"acceptance": "high"}, "acceptance", "list"),
    ({"arrival_s": -1.0}, "arrival_s", ">= 0"),
    ({"prompt": _DROP, "prompt_tokens": _DROP}, "prompt_tokens", "required"),
    ({"prompt_tokens": 0}, "prompt_tokens", ">= 1"),
    ({"temperature": -1}, "temperature", ">= 0"),
    ({"workload": ""}, "workload", "non-empty"),
])
def test_bad_field_names_line_and_field(tmp_path: Path, changes: dict[str, object],
                                        field: str, words: str) -> None:
    err = one_bad(tmp_path, **changes)
    assert err.field == field
    assert words in str(err)


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_rejected_with_their_field(tmp_path: Path, token: str) -> None:
    text = json.dumps(GOOD).replace('"output_tokens": 256', f'"output_tokens": {token}')
    p = write_lines(tmp_path / "s.jsonl", [text])
    with pytest.raises(TrafficError, match=r"s\.jsonl:1: output_tokens: must be an integer"):
        list(read_sample(p))


def test_invalid_json_and_utf8(tmp_path: Path) -> None:
    p = write_lines(tmp_path / "s.jsonl", [json.dumps(GOOD), "{not json"])
    with pytest.raises(TrafficError, match=r":2: invalid JSON"):
        list(read_sample(p))
    p = write_lines(tmp_path / "u.jsonl", [json.dumps(GOOD), b'{"prompt": "\xff\xfe"}'])
    with pytest.raises(TrafficError, match=r":2: invalid UTF-8"):
        list(read_sample(p))


def test_empty_file_and_non_object(tmp_path: Path) -> None:
    p = tmp_path / "empty.jsonl"
    p.write_bytes(b"")
    with pytest.raises(TrafficError, match="no requests"):
        list(read_sample(p))
    p = write_lines(tmp_path / "list.jsonl", ["[1, 2]"])
    with pytest.raises(TrafficError, match=":1: each line must be a JSON object"):
        list(read_sample(p))


def test_gzip_and_corrupt_gzip(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl.gz"
    with gzip.open(p, "wt") as f:
        f.write(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "id": "r2"}) + "\n")
    assert [r.id for r in read_sample(p)] == ["r1", "r2"]
    data = p.read_bytes()
    corrupt = tmp_path / "bad.jsonl.gz"
    corrupt.write_bytes(data[: len(data) // 2])
    with pytest.raises(TrafficError, match="gzip"):
        list(read_sample(corrupt))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TrafficError, match="file not found"):
        list(read_sample(tmp_path / "nope.jsonl"))


def test_skip_invalid_counts_and_keeps_good_lines(tmp_path: Path) -> None:
    p = write_lines(tmp_path / "s.jsonl", [
        json.dumps(GOOD), "{oops", json.dumps({**GOOD, "output_tokens": 0}),
        json.dumps({**GOOD, "id": "r4"})])
    sample = read_sample(p, skip_invalid=True)
    assert [r.id for r in sample] == ["r1", "r4"]
    assert sample.skipped == 2 and len(sample.errors) == 2
    assert sample.errors[0].startswith(f"{p}:2:")


def test_timestamps_become_arrivals_relative_to_first(tmp_path: Path) -> None:
    lines = [json.dumps({"output_tokens": 5, "prompt_tokens": 3, "timestamp": ts})
             for ts in ("2023-11-16T18:15:46.5Z", "2023-11-16T18:15:48Z")]
    arrivals = [r.arrival_s for r in read_sample(write_lines(tmp_path / "t.jsonl", lines))]
    assert arrivals == pytest.approx([0.0, 1.5])
    mixed = [json.dumps({"output_tokens": 5, "prompt_tokens": 3, "arrival_s": 1.0}),
             json.dumps({"output_tokens": 5, "prompt_tokens": 3, "timestamp": 1.0})]
    with pytest.raises(TrafficError, match=":2: timestamp: earlier lines use arrival_s"):
        list(read_sample(write_lines(tmp_path / "m.jsonl", mixed)))
    bad = [json.dumps({"output_tokens": 5, "prompt_tokens": 3, "timestamp": "yesterday"})]
    with pytest.raises(TrafficError, match=":1: timestamp: must be ISO-8601"):
        list(read_sample(write_lines(tmp_path / "b.jsonl", bad)))


def test_prompt_only_gets_estimated_tokens(tmp_path: Path) -> None:
    p = write_lines(tmp_path / "s.jsonl", [json.dumps({"prompt": "x" * 400, "output_tokens": 3})])
    (req,) = list(read_sample(p))
    assert req.prompt_tokens == 100


def test_summary_per_workload(tmp_path: Path) -> None:
    lines = [json.dumps({**GOOD, "id": str(i), "arrival_s": float(i),
                         "workload": "a" if i % 2 else "b", "output_tokens": 10 + i})
             for i in range(20)]
    rows = {s.workload: s for s in summarize(read_sample(write_lines(tmp_path / "s", lines)))}
    assert set(rows) == {"a", "b", "all"}
    assert rows["a"].requests == 10 and rows["all"].requests == 20
    assert rows["a"].arrival_rate_per_s == pytest.approx(9 / 18)
    assert rows["all"].burstiness == pytest.approx(0.0)  # perfectly regular arrivals
    assert rows["b"].output_tokens["p50"] == pytest.approx(19.0)
    assert rows["a"].mean_acceptance == pytest.approx((0.9, 0.8))


def test_load_and_split(small_sample: Path) -> None:
    loaded = load_sample(small_sample, max_acceptance=8)
    groups = split_workloads(loaded.requests)
    assert len(groups) >= 3 and sum(len(v) for v in groups.values()) == len(loaded.requests)
    reqs = workload_requests(next(iter(groups.values())), max_requests=10)
    assert len(reqs) == 10 and reqs[0].arrival_s == 0.0
    assert all(a.arrival_s is not None and b.arrival_s is not None and a.arrival_s <= b.arrival_s
               for a, b in itertools.pairwise(reqs))
