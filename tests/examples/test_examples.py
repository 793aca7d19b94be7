"""The committed example samples: valid, as documented in examples/PROVENANCE.md, reproducible."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from autotune.traffic import read_sample
from autotune.traffic.sample import estimate_tokens
from autotune.types import Request

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
DATA = Path(os.environ.get("AUTOTUNE_SHARED_DATA") or REPO / ".." / "shared" / "data").resolve()
SIZES = {"sample.jsonl": (500, 2000), "small.jsonl": (60, 120)}


def load(name: str) -> list[Request]:
    return list(read_sample(EXAMPLES / name, max_acceptance=8))


@pytest.mark.parametrize("name", sorted(SIZES))
def test_example_is_a_valid_labelled_sample(name: str) -> None:
    requests = load(name)
    low, high = SIZES[name]
    assert low <= len(requests) <= high
    assert (EXAMPLES / name).stat().st_size < 2_000_000
    assert {r.workload for r in requests} == {"chat", "code", "math"}
    for r in requests:
        assert r.acceptance is not None and len(r.acceptance) == 8
        assert all(0.0 <= c <= 1.0 for c in r.acceptance)
        assert r.prompt and r.prompt_tokens == estimate_tokens(r.prompt)
        assert r.output_tokens > 0 and r.temperature == 0.0
    arrivals = [r.arrival_s for r in requests]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)  # type: ignore[type-var]


@pytest.mark.parametrize("name", sorted(SIZES))
def test_example_holds_real_trace_rows_and_real_prompts(name: str) -> None:
    with (DATA / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv").open(newline="") as f:
        trace = list(csv.DictReader(f))
    texts = {
        "chat": {json.loads(x)["turns"][0]
                 for x in (DATA / "prompts" / "spec_bench_question.jsonl").open()},
        "code": {json.loads(x)["prompt"] for x in (DATA / "prompts" / "humaneval.jsonl").open()},
        "math": {json.loads(x)["question"] for x in (DATA / "prompts" / "gsm8k_test.jsonl").open()},
    }
    requests = load(name)
    rows = [trace[int(r.id.removeprefix("azconv-")) - 1] for r in requests]
    t0 = datetime.fromisoformat(rows[0]["TIMESTAMP"][:26])
    for r, row in zip(requests, rows, strict=True):
        assert r.output_tokens == int(row["GeneratedTokens"])
        at = (datetime.fromisoformat(row["TIMESTAMP"][:26]) - t0).total_seconds()
        assert r.arrival_s == pytest.approx(at, abs=1e-4)
        assert r.prompt in texts[r.workload or ""]
    numbers = [int(r.id.removeprefix("azconv-")) for r in requests]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))  # a contiguous window


def test_synthetic_acceptance_makes_code_and_math_easier_than_chat() -> None:
    by: dict[str, list[float]] = {}
    for r in load("sample.jsonl"):
        surv = np.cumprod(r.acceptance or ())
        by.setdefault(r.workload or "", []).append(1.0 + float(surv[:7].sum()))
    mean = {w: float(np.mean(v)) for w, v in by.items()}
    assert mean["chat"] < mean["code"] and mean["chat"] < mean["math"]


def test_generator_reproduces_the_committed_small_sample(tmp_path: Path) -> None:
    out = tmp_path / "small.jsonl"
    subprocess.run([sys.executable, str(EXAMPLES / "make_sample.py"), "--data", str(DATA),
                    "--requests", "96", "--start-s", "1800", "--out", str(out)],
                   check=True, capture_output=True)
    assert out.read_bytes() == (EXAMPLES / "small.jsonl").read_bytes()
