"""Importers on the real traces of ../shared/data, bad rows, prompts, vllm-bench round trip."""

from __future__ import annotations

import csv
import gzip
import json
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ConfigError, TrafficError
from autotune.traffic import read_sample
from autotune.traffic.importers import (
    IMPORTERS,
    export_traffic,
    get_importer,
    import_traffic,
    load_prompt_pool,
)
from autotune.traffic.sample import estimate_tokens

REPO = Path(__file__).resolve().parents[2]


def shared_data() -> Path:
    env = os.environ.get("AUTOTUNE_SHARED_DATA")
    path = Path(env) if env else (REPO / ".." / "shared" / "data").resolve()
    assert path.is_dir(), f"the shared data folder is missing: {path} (set AUTOTUNE_SHARED_DATA)"
    return path


DATA = shared_data()
AZURE_CODE = DATA / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"
AZURE_CONV = DATA / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
MOONCAKE = DATA / "mooncake_fast25" / "conversation_trace.jsonl"
PROMPTS = DATA / "prompts"


def csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def stamp(text: str) -> datetime:
    return datetime.strptime(text[:26], "%Y-%m-%d %H:%M:%S.%f")


def lines(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write(path: Path, rows: Sequence[str | bytes]) -> Path:
    with path.open("wb") as f:
        for r in rows:
            f.write(r if isinstance(r, bytes) else r.encode())
            f.write(b"\n")
    return path


# ------------------------------------------------------------------------ registry
def test_registry_holds_the_four_formats_under_their_names() -> None:
    assert set(IMPORTERS) == {"azure", "mooncake", "openai-log", "vllm-bench"}
    for name, imp in IMPORTERS.items():
        assert imp.name == name and imp.summary


def test_unknown_format_is_a_config_error_listing_the_known(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        get_importer("splunk")
    for name in IMPORTERS:
        assert name in str(e.value)
    with pytest.raises(ConfigError):
        import_traffic("csv", AZURE_CODE, tmp_path / "o.jsonl")
    with pytest.raises(ConfigError, match="vllm-bench"):
        export_traffic("azure", REPO / "examples" / "small.jsonl", tmp_path / "o.jsonl")
    assert not (tmp_path / "o.jsonl").exists()


# ------------------------------------------------------------------------ real traces, whole
@pytest.mark.parametrize(("path", "count"), [(AZURE_CODE, 8819), (AZURE_CONV, 19366)])
def test_azure_trace_imports_whole_and_round_trips(tmp_path: Path, path: Path,
                                                   count: int) -> None:
    out = tmp_path / "azure.jsonl"
    report = import_traffic("azure", path, out)
    assert report.requests == count and report.skipped == 0 and report.out_of_order == 0

    requests = list(read_sample(out))
    source = csv_rows(path)
    assert len(requests) == len(source) == count
    assert [r.prompt_tokens for r in requests] == [int(s["ContextTokens"]) for s in source]
    assert [r.output_tokens for r in requests] == [int(s["GeneratedTokens"]) for s in source]
    assert all(r.workload is None and r.prompt is None for r in requests)
    t0 = stamp(source[0]["TIMESTAMP"])
    for i in (0, 1, count // 2, count - 1):
        expected = (stamp(source[i]["TIMESTAMP"]) - t0).total_seconds()
        assert requests[i].arrival_s == pytest.approx(expected, abs=1e-5)
    assert report.span_s == pytest.approx(requests[-1].arrival_s, abs=1e-5)


def test_azure_parses_seven_fractional_digits(tmp_path: Path) -> None:
    """strptime's %f stops at 6 digits; the trace has 7 (arrivals are kept to the microsecond)."""
    src = write(tmp_path / "t.csv", ["TIMESTAMP,ContextTokens,GeneratedTokens",
                                     "2023-11-16 23:59:59.9000000,10,5",
                                     "2023-11-17 00:00:00.1234567,10,5",
                                     "2023-11-17 00:00:01,10,5"])
    import_traffic("azure", src, tmp_path / "o.jsonl")
    arrivals = [r["arrival_s"] for r in lines(tmp_path / "o.jsonl")]
    assert arrivals == [0.0, pytest.approx(0.223457, abs=1e-6), pytest.approx(1.1, abs=1e-6)]


def test_mooncake_trace_imports_whole_with_prefix_blocks(tmp_path: Path) -> None:
    out = tmp_path / "mc.jsonl"
    report = import_traffic("mooncake", MOONCAKE, out, workload="kimi-chat")
    assert report.requests == 12031 and report.workloads == {"kimi-chat": 12031}

    source = lines(MOONCAKE)
    written = lines(out)
    requests = list(read_sample(out))
    assert len(source) == len(written) == len(requests) == 12031
    for src, rec, req in zip(source, written, requests, strict=True):
        assert req.prompt_tokens == src["input_length"]
        assert req.output_tokens == src["output_length"]
        assert req.arrival_s == pytest.approx(src["timestamp"] / 1000.0)
        assert req.workload == "kimi-chat"
        assert rec["hash_ids"] == src["hash_ids"] and rec["hash_block_tokens"] == 512


def test_gzip_input_imports_the_same(tmp_path: Path) -> None:
    gz = tmp_path / "code.csv.gz"
    gz.write_bytes(gzip.compress(AZURE_CODE.read_bytes()))
    import_traffic("azure", gz, tmp_path / "a.jsonl")
    import_traffic("azure", AZURE_CODE, tmp_path / "b.jsonl")
    a, b = lines(tmp_path / "a.jsonl"), lines(tmp_path / "b.jsonl")
    assert len(a) == 8819
    assert [(r["arrival_s"], r["prompt_tokens"]) for r in a] == \
        [(r["arrival_s"], r["prompt_tokens"]) for r in b]


def test_gzip_output_is_a_readable_sample(tmp_path: Path) -> None:
    out = tmp_path / "mc.jsonl.gz"
    import_traffic("mooncake", MOONCAKE, out)
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    assert sum(1 for _ in read_sample(out)) == 12031


# ------------------------------------------------------------------------ bad rows
def test_bad_azure_row_names_file_line_and_field_and_writes_nothing(tmp_path: Path) -> None:
    src = write(tmp_path / "t.csv", ["TIMESTAMP,ContextTokens,GeneratedTokens",
                                     "2023-11-16 18:15:46.68,374,44",
                                     "2023-11-16 18:15:50.99,396,-3",
                                     "yesterday,12,4"])
    out = tmp_path / "o.jsonl"
    out.write_text("previous content\n")
    with pytest.raises(TrafficError) as e:
        import_traffic("azure", src, out)
    assert str(e.value).startswith(f"{src}:3: GeneratedTokens: ")
    assert e.value.line == 3 and e.value.field == "GeneratedTokens"
    assert out.read_text() == "previous content\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.jsonl", "t.csv"]

    report = import_traffic("azure", src, out, skip_invalid=True)
    assert report.requests == 1 and report.skipped == 2
    assert report.errors[1].startswith(f"{src}:4: TIMESTAMP: ")
    assert len(lines(out)) == 1


@pytest.mark.parametrize(("fmt", "rows", "where"), [
    ("azure", ["ts,ContextTokens,GeneratedTokens", "x,1,1"], ":1: header lacks column"),
    ("azure", ["TIMESTAMP,ContextTokens,GeneratedTokens", "2023-11-16 18:15:46,1"],
     ":2: has 2 columns"),
    ("azure", ["TIMESTAMP,ContextTokens,GeneratedTokens", "2023-11-16 18:15:46,1.5,3"],
     ":2: ContextTokens: "),
    ("mooncake", ['{"timestamp": 0, "input_length": 5, "output_length": 0}'],
     ":1: output_length: must be >= 1"),
    ("mooncake", ['{"timestamp": -5, "input_length": 5, "output_length": 3}'],
     ":1: timestamp: "),
    ("mooncake", ['{"timestamp": 1, "input_length": 5, "output_length": 3, "hash_ids": [1, "a"]}'],
     ":1: hash_ids: "),
    ("mooncake", ['{"timestamp": NaN, "input_length": 5, "output_length": 3}'], ":1: timestamp: "),
    ("mooncake", ['{"timestamp": 1, "input_length": 5,'], ":1: invalid JSON"),
    ("mooncake", [b'{"timestamp": 1, "input_length": 5, "output_length": 3, "x": "\xff"}'],
     ":1: invalid UTF-8"),
    ("openai-log", ['{"timestamp": 1, "prompt": "hi", "usage": {"completion_tokens": 0}}'],
     ":1: usage.completion_tokens: must be >= 1"),
    ("openai-log", ['{"timestamp": 1, "prompt": "hi"}'], ":1: usage: "),
    ("openai-log", ['{"timestamp": 1, "usage": {"completion_tokens": 3}}'],
     ":1: usage.prompt_tokens: "),
    ("openai-log", ['{"timestamp": "noon", "prompt": "hi", "usage": {"completion_tokens": 3}}'],
     ":1: timestamp: "),
    ("openai-log", ['{"messages": [{"content": "x"}], "usage": {"completion_tokens": 3}}'],
     ":1: messages: message 0"),
    ("openai-log", ['{"prompt": [1, 2, 3], "usage": {"completion_tokens": 3}}'], ":1: prompt: "),
    ("vllm-bench", ['{"prompt": "hello"}'], ":1: output_tokens: missing"),
    ("vllm-bench", ['{"prompt": "", "output_tokens": 3}'], ":1: prompt: "),
    ("vllm-bench", ['["hello", 3]'], ":1: each line must be a JSON object"),
])
def test_bad_rows_are_reported_by_line(tmp_path: Path, fmt: str, rows: list[str | bytes],
                                       where: str) -> None:
    src = write(tmp_path / "in.txt", rows)
    with pytest.raises(TrafficError) as e:
        import_traffic(fmt, src, tmp_path / "o.jsonl")
    assert str(e.value).startswith(f"{src}{where}"), str(e.value)
    assert not (tmp_path / "o.jsonl").exists()


def test_all_rows_invalid_or_empty_file_is_an_error(tmp_path: Path) -> None:
    empty = write(tmp_path / "e.jsonl", [])
    with pytest.raises(TrafficError, match="nothing to import: it holds no requests"):
        import_traffic("mooncake", empty, tmp_path / "o.jsonl")
    bad = write(tmp_path / "b.jsonl", ["{}", "[]"])
    with pytest.raises(TrafficError, match="all 2 rows are invalid"):
        import_traffic("mooncake", bad, tmp_path / "o.jsonl", skip_invalid=True)
    with pytest.raises(TrafficError, match="file not found"):
        import_traffic("mooncake", tmp_path / "missing.jsonl", tmp_path / "o.jsonl")
    assert not (tmp_path / "o.jsonl").exists()


def test_corrupt_gzip_is_an_error_naming_the_file(tmp_path: Path) -> None:
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress(MOONCAKE.read_bytes()[:200_000])[:5_000])
    with pytest.raises(TrafficError, match="corrupt or truncated gzip"):
        import_traffic("mooncake", gz, tmp_path / "o.jsonl")
    assert not (tmp_path / "o.jsonl").exists()


def test_timestamps_on_some_rows_only_is_an_error(tmp_path: Path) -> None:
    src = write(tmp_path / "log.jsonl", [
        '{"timestamp": 100, "prompt": "a", "usage": {"completion_tokens": 3}}',
        '{"prompt": "b", "usage": {"completion_tokens": 3}}'])
    with pytest.raises(TrafficError, match=r":2: timestamp: missing here"):
        import_traffic("openai-log", src, tmp_path / "o.jsonl")


def test_unwritable_output_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TrafficError, match="cannot write"):
        import_traffic("azure", AZURE_CODE, tmp_path / "no" / "such" / "dir" / "o.jsonl")


# ------------------------------------------------------------------------ openai-log
def test_openai_log_from_real_prompts(tmp_path: Path) -> None:
    """A gateway log built from Spec-Bench questions: both API shapes, nested bodies, disorder."""
    questions = lines(PROMPTS / "spec_bench_question.jsonl")[:40]
    rows: list[dict[str, Any]] = []
    for i, q in enumerate(questions):
        text = q["turns"][0]
        usage = {"prompt_tokens": 20 + i, "completion_tokens": 50 + i}
        when = f"2026-11-16T18:{10 + i // 30:02d}:{(7 * i) % 60:02d}.5Z"
        if i % 3 == 0:
            rows.append({"timestamp": when, "prompt": text, "usage": usage, "model": "kimi",
                         "tenant": f"t{i % 2}", "id": f"cmpl-{i}"})
        elif i % 3 == 1:
            rows.append({"timestamp": when, "request": {
                "model": "kimi", "temperature": 0.7,
                "messages": [{"role": "system", "content": "Be brief."},
                             {"role": "user", "content": [{"type": "text", "text": text}]}]},
                "response": {"usage": usage}})
        else:
            rows.append({"created": datetime.fromisoformat(when).timestamp(),
                         "messages": [{"role": "user", "content": text}], "usage": usage})
    src = write(tmp_path / "gateway.jsonl", [json.dumps(r) for r in rows])
    out = tmp_path / "o.jsonl"
    report = import_traffic("openai-log", src, out)
    assert report.requests == 40 and report.out_of_order > 0

    written = lines(out)
    requests = list(read_sample(out))
    earliest_ts = min([datetime.fromisoformat(r["timestamp"]).timestamp()
                       for r in rows if "timestamp" in r]
                      + [r["created"] for r in rows if "created" in r])
    for i, (q, rec, req) in enumerate(zip(questions, written, requests, strict=True)):
        text = q["turns"][0]
        assert req.output_tokens == 50 + i and req.prompt_tokens == 20 + i
        at = datetime.fromisoformat(f"2026-11-16T18:{10 + i // 30:02d}:{(7 * i) % 60:02d}.5Z")
        assert req.arrival_s == pytest.approx(at.timestamp() - earliest_ts)
        assert req.prompt is not None and text in req.prompt
        if i % 3 == 0:
            assert req.prompt == text and req.id == f"cmpl-{i}"
            assert rec["model"] == "kimi" and rec["tenant"] == f"t{i % 2}"
        elif i % 3 == 1:
            assert req.prompt == f"system: Be brief.\n\nuser: {text}"
            assert req.temperature == 0.7 and rec["model"] == "kimi"
        else:
            assert req.prompt == f"user: {text}"
    assert min(r.arrival_s or 0.0 for r in requests) == 0.0


def test_openai_log_epoch_milliseconds_and_estimated_prompt_tokens(tmp_path: Path) -> None:
    src = write(tmp_path / "log.jsonl", [
        '{"timestamp": 1763316946000, "prompt": "abcdefgh", "usage": {"completion_tokens": 3}}',
        '{"timestamp": 1763316947500, "prompt": "abcd", "usage": {"completion_tokens": 4}}'])
    import_traffic("openai-log", src, tmp_path / "o.jsonl", workload="gw")
    reqs = list(read_sample(tmp_path / "o.jsonl"))
    assert [r.arrival_s for r in reqs] == [0.0, 1.5]
    assert [r.prompt_tokens for r in reqs] == [estimate_tokens("abcdefgh"), 1]
    assert {r.workload for r in reqs} == {"gw"}


# ------------------------------------------------------------------------ vllm-bench
def test_vllm_bench_export_and_import_round_trip(tmp_path: Path) -> None:
    sample = REPO / "examples" / "small.jsonl"
    bench = tmp_path / "bench.jsonl"
    report = export_traffic("vllm-bench", sample, bench)
    original = list(read_sample(sample))
    exported = lines(bench)
    assert report.requests == len(original) == len(exported)
    assert all(set(rec) == {"prompt", "output_tokens"} for rec in exported)

    back = tmp_path / "back.jsonl"
    import_traffic("vllm-bench", bench, back, workload="bench")
    again = list(read_sample(back))
    assert [(r.prompt, r.output_tokens, r.prompt_tokens) for r in again] == \
        [(r.prompt, r.output_tokens, r.prompt_tokens) for r in original]
    assert all(r.arrival_s is None and r.workload == "bench" for r in again)


def test_export_without_prompt_text_needs_prompts(tmp_path: Path) -> None:
    sample = tmp_path / "s.jsonl"
    import_traffic("azure", AZURE_CODE, sample)
    with pytest.raises(TrafficError) as e:
        export_traffic("vllm-bench", sample, tmp_path / "b.jsonl")
    assert str(e.value).startswith(f"{sample}:1: prompt: has no prompt text")
    assert not (tmp_path / "b.jsonl").exists()

    report = export_traffic("vllm-bench", sample, tmp_path / "b.jsonl",
                            prompts=[PROMPTS / "humaneval.jsonl"])
    assert report.requests == report.prompts_attached == 8819
    exported = lines(tmp_path / "b.jsonl")
    source = csv_rows(AZURE_CODE)
    assert [r["output_tokens"] for r in exported] == [int(s["GeneratedTokens"]) for s in source]


# ------------------------------------------------------------------------ --prompts
def test_prompts_attach_real_text_by_nearest_length(tmp_path: Path) -> None:
    prompt_files = [PROMPTS / "gsm8k_test.jsonl", PROMPTS / "humaneval.jsonl"]
    pool_texts = {json.loads(line).get("question") or json.loads(line).get("prompt")
                  for f in prompt_files for line in f.open(encoding="utf-8")}
    lengths = sorted(estimate_tokens(t) for t in pool_texts)
    src = write(tmp_path / "t.csv", ["TIMESTAMP,ContextTokens,GeneratedTokens"] + [
        f"2023-11-16 18:15:{i // 10:02d}.{i % 10}000000,{n},7"
        for i, n in enumerate([1, 5, 30, 31, 57, 120, 200, 333, 1000, 5000])])
    out = tmp_path / "o.jsonl"
    report = import_traffic("azure", src, out, prompts=prompt_files)
    assert report.prompts_attached == 10
    for req in read_sample(out):
        want = req.prompt_tokens  # the trace's count is kept
        assert req.prompt
        got = estimate_tokens(req.prompt)
        best = min(abs(n - want) for n in lengths)
        if best <= 0.1 * want:  # a whole text of about the right length
            assert req.prompt in pool_texts
            assert abs(got - want) <= 0.1 * want
        elif want < max(lengths):  # the nearest text, cut to the trace's length
            assert abs(got - want) <= 1
            assert any(t.startswith(req.prompt) for t in pool_texts
                       if abs(estimate_tokens(t) - want) == best)
        else:  # longer than any text: real texts joined, cut to the trace's length
            assert abs(got - want) <= 1
            assert any(req.prompt.startswith(t) for t in pool_texts
                       if estimate_tokens(t) == max(lengths))


def test_prompts_are_seeded_and_keep_mooncake_lengths(tmp_path: Path) -> None:
    head = tmp_path / "mc.jsonl"
    with MOONCAKE.open(encoding="utf-8") as f:
        head.write_text("".join(next(f) for _ in range(200)))
    files = [PROMPTS / "spec_bench_question.jsonl", PROMPTS / "math500_test.jsonl",
             PROMPTS / "sharegpt_v3_head.jsonl", PROMPTS / "mt_bench_question.jsonl"]
    a, b, c = (tmp_path / n for n in ("a.jsonl", "b.jsonl", "c.jsonl"))
    import_traffic("mooncake", head, a, prompts=files, seed=1)
    import_traffic("mooncake", head, b, prompts=files, seed=1)
    import_traffic("mooncake", head, c, prompts=files, seed=2)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    source = lines(head)
    for src, req in zip(source, read_sample(a), strict=True):
        assert req.prompt_tokens == src["input_length"]
        assert req.prompt and abs(estimate_tokens(req.prompt) - src["input_length"]) \
            <= 0.1 * src["input_length"]


def test_prompts_without_fit_are_whole_texts(tmp_path: Path) -> None:
    src = write(tmp_path / "t.csv", ["TIMESTAMP,ContextTokens,GeneratedTokens",
                                     "2023-11-16 18:15:46,9000,7", "2023-11-16 18:15:47,2,7"])
    pool = [PROMPTS / "humaneval.jsonl"]
    texts = {json.loads(line)["prompt"] for line in pool[0].open(encoding="utf-8")}
    import_traffic("azure", src, tmp_path / "o.jsonl", prompts=pool, fit_prompts=False)
    got = list(read_sample(tmp_path / "o.jsonl"))
    assert all(r.prompt in texts for r in got)
    assert [r.prompt_tokens for r in got] == [9000, 2]
    assert estimate_tokens(got[0].prompt or "") == max(estimate_tokens(t) for t in texts)


def test_prompt_pool_reads_every_staged_prompt_set() -> None:
    sizes = {f.name: len(load_prompt_pool([f])) for f in sorted(PROMPTS.glob("*.jsonl"))}
    assert sizes["humaneval.jsonl"] == 164
    assert sizes["gsm8k_test.jsonl"] == 1319
    assert sizes["math500_test.jsonl"] == 500
    assert sizes["spec_bench_question.jsonl"] == 480
    assert sizes["mt_bench_question.jsonl"] == 80
    assert sizes["aime24_test.jsonl"] == 30
    assert 600 <= sizes["sharegpt_v3_head.jsonl"] <= 1038


def test_prompt_file_without_texts_is_an_error(tmp_path: Path) -> None:
    bad = write(tmp_path / "p.jsonl", ['{"id": 1}'])
    with pytest.raises(TrafficError, match="holds no prompt texts"):
        load_prompt_pool([bad])
    with pytest.raises(TrafficError, match="file not found; pass a JSONL prompt set"):
        load_prompt_pool([tmp_path / "nope.jsonl"])
