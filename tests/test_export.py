from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ExportError
from autotune.export import render, write_atomic
from autotune.types import SPECULATIVE_CONFIG_KEYS

REC: dict[str, Any] = {
    "workload": "code",
    "config": {"num_speculative_tokens": 5, "enable_adaptive_verification": False,
               "max_num_seqs": 64, "max_num_batched_tokens": 8192},
    "speculative_config": {"method": "dspark", "model": "novita/kimi-k2.6-dspark",
                           "num_speculative_tokens": 5},
    "serve": {"model": "moonshotai/Kimi-K2.6", "tensor_parallel_size": 8,
              "max_model_len": 20000, "extra_args": ["--trust-remote-code"]},
    "provenance": {},
}


def test_speculative_config_is_exact_json() -> None:
    spec = json.loads(render(REC, "speculative-config"))
    assert spec == REC["speculative_config"]
    assert set(spec) <= SPECULATIVE_CONFIG_KEYS


def test_vllm_args_round_trip_through_a_shell() -> None:
    args = shlex.split(render(REC, "vllm-args"))
    assert args[:3] == ["vllm", "serve", "moonshotai/Kimi-K2.6"]
    spec = json.loads(args[args.index("--speculative-config") + 1])
    assert spec["num_speculative_tokens"] == 5
    assert args[args.index("--max-num-seqs") + 1] == "64"
    assert args[args.index("--max-num-batched-tokens") + 1] == "8192"
    assert args[-1] == "--trust-remote-code"


def test_schedule_rows_validated() -> None:
    rec = {**REC, "provenance": {"window_schedule": [[1, 8, 5], [9, 64, 3]]}}
    spec = json.loads(render(rec, "schedule"))
    assert spec["num_speculative_tokens_per_batch_size"] == [[1, 8, 5], [9, 64, 3]]
    with pytest.raises(ExportError, match="from 1 contiguously"):
        render({**REC, "provenance": {"window_schedule": [[2, 8, 5]]}}, "schedule")


def test_unknown_fields_and_window_zero_refused() -> None:
    with pytest.raises(ExportError, match="does not know"):
        render({**REC, "speculative_config": {"method": "dspark", "bogus": 1}},
               "speculative-config")
    with pytest.raises(ExportError, match="vllm-args instead"):
        render({**REC, "speculative_config": None}, "speculative-config")
    assert "--speculative-config" not in render({**REC, "speculative_config": None},
                                                "vllm-args")


def test_write_atomic_leaves_no_temp_files(tmp_path: Path) -> None:
    target = write_atomic(tmp_path / "a" / "x.json", "{}\n")
    assert target.read_text() == "{}\n"
    assert [p.name for p in target.parent.iterdir()] == ["x.json"]
