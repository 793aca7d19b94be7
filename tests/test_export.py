from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ExportError
from autotune.export import render, schedule_note, write_atomic
from autotune.recommend import window_schedule
from autotune.store import RecommendationRecord
from autotune.types import SPECULATIVE_CONFIG_KEYS, TrialConfig


def record(**over: Any) -> RecommendationRecord:
    """A stored recommendation as the Store returns it (what the exports read)."""
    fields: dict[str, Any] = dict(
        id=1, workload="code", status="active", config=TrialConfig(5, False, 64, 8192).as_dict(),
        speculative_config={"method": "dspark", "model": "novita/kimi-k2.6-dspark",
                            "num_speculative_tokens": 5},
        serve={"model": "moonshotai/Kimi-K2.6", "tensor_parallel_size": 8,
               "max_model_len": 20000, "extra_args": ["--trust-remote-code"]},
        objective="goodput", value=1.0, value_ci=None, baseline_value=None,
        speedup_vs_baseline=None, gain=None, gain_ci=None, compared_with=None, run="r0",
        trial_id=None, backend="sim", provenance={}, reason="", created_at=None,
        promoted_at=None, retired_at=None, retired_by=None)
    fields.update(over)
    return RecommendationRecord(**fields)


REC = record()


def test_speculative_config_is_exact_json() -> None:
    spec = json.loads(render(REC, "speculative-config"))
    assert spec == REC.speculative_config
    assert set(spec) <= SPECULATIVE_CONFIG_KEYS


def test_vllm_args_round_trip_through_a_shell() -> None:
    text = render(REC, "vllm-args")
    assert text.startswith("# code: method dspark need vLLM 0.33 or newer with DSpark")
    assert "measured on the sim backend (simulated, not a real engine)" in text.splitlines()[0]
    args = shlex.split(text, comments=True)
    assert args[:3] == ["vllm", "serve", "moonshotai/Kimi-K2.6"]
    spec = json.loads(args[args.index("--speculative-config") + 1])
    assert spec["num_speculative_tokens"] == 5
    assert args[args.index("--max-num-seqs") + 1] == "64"
    assert args[args.index("--max-num-batched-tokens") + 1] == "8192"
    assert args[-1] == "--trust-remote-code"


def test_schedule_rows_validated() -> None:
    rec = record(provenance={"window_schedule": [[1, 8, 5], [9, 64, 3]]})
    spec = json.loads(render(rec, "schedule"))
    assert spec["num_speculative_tokens_per_batch_size"] == [[1, 8, 5], [9, 64, 3]]
    assert spec["num_speculative_tokens"] == 5
    with pytest.raises(ExportError, match="from 1 contiguously"):
        render(record(provenance={"window_schedule": [[2, 8, 5]]}), "schedule")


def test_unknown_fields_and_window_zero_refused() -> None:
    with pytest.raises(ExportError, match="does not know"):
        render(record(speculative_config={"method": "dspark", "bogus": 1}),
               "speculative-config")
    with pytest.raises(ExportError, match="vllm-args instead"):
        render(record(speculative_config=None), "speculative-config")
    plain = render(record(speculative_config=None), "vllm-args")
    assert "--speculative-config" not in shlex.split(plain, comments=True)
    assert plain.startswith("# code: standard vLLM speculative-decoding flags")


def test_write_atomic_leaves_no_temp_files(tmp_path: Path) -> None:
    target = write_atomic(tmp_path / "a" / "x.json", "{}\n")
    assert target.read_text() == "{}\n"
    assert [p.name for p in target.parent.iterdir()] == ["x.json"]


def test_window_schedule_rows_when_the_best_window_shrinks() -> None:
    points = [  # (max_num_seqs, K, value, meets SLOs)
        (1, 7, 1.0, True), (1, 3, 0.8, True),
        (8, 7, 2.0, True), (8, 5, 2.4, True),
        (32, 5, 3.0, True), (32, 3, 3.5, True), (32, 7, 9.9, False),  # infeasible: ignored
        (64, 3, 4.0, True), (64, 1, 3.9, True),
        (256, 1, 9.0, True), (256, 2, 8.0, True),  # above the recommended max_num_seqs
    ]
    rows, by_level, thin = window_schedule(points, max_num_seqs=64, window=7)
    assert by_level == {1: 7, 8: 5, 32: 3, 64: 3} and thin == {}
    assert rows == [[1, 1, 7], [2, 8, 5], [9, 64, 3]]  # 32 and 64 merge, last row up to 64
    rec = record(provenance={"window_schedule": rows},
                 speculative_config={"method": "dspark", "num_speculative_tokens": 7})
    spec = json.loads(render(rec, "schedule"))
    assert spec["num_speculative_tokens_per_batch_size"] == rows
    assert spec["num_speculative_tokens"] == 7  # the recommended window
    assert set(spec) <= SPECULATIVE_CONFIG_KEYS


def test_a_level_needs_two_measurements_and_k_never_exceeds_the_window() -> None:
    points = [(1, 7, 1.0, True), (1, 5, 0.9, True),  # compared: best 7, capped at 5
              (8, 3, 2.0, True),                      # one trial: left out
              (64, 2, 3.0, True), (64, 1, 2.5, True)]
    rows, by_level, thin = window_schedule(points, max_num_seqs=64, window=5)
    assert thin == {8: 1}
    assert by_level == {1: 5, 64: 2}
    assert rows == [[1, 1, 5], [2, 64, 2]]
    with pytest.raises(ExportError, match="exceed the recommended window"):
        render(record(provenance={"window_schedule": [[1, 8, 7], [9, 64, 5]]}), "schedule")


@pytest.mark.parametrize("points", [
    [(1, 3, 1.0, True), (1, 1, 0.5, True), (8, 5, 2.0, True), (8, 1, 1.0, True),
     (64, 5, 3.0, True), (64, 3, 2.0, True)],  # grows
    [(1, 5, 1.0, True), (1, 1, 0.5, True), (8, 3, 2.0, True), (8, 1, 1.0, True),
     (64, 5, 3.0, True), (64, 3, 2.0, True)],  # not monotone
    [(64, 5, 3.0, True), (64, 3, 2.0, True)],  # one level only
    [(1, 5, 1.0, True), (1, 3, 0.5, True), (64, 0, 3.0, True), (64, 3, 2.0, True)],  # K=0
])
def test_no_window_schedule_unless_it_shrinks(points: list[Any]) -> None:
    rows, by_level, thin = window_schedule(points, max_num_seqs=64, window=5)
    assert rows is None and by_level and not thin
    rec = record(run="r1", provenance={
        "window_schedule": rows, "window_by_max_num_seqs": {str(k): v for k, v in
                                                            by_level.items()}})
    assert json.loads(render(rec, "schedule")) == REC.speculative_config
    note = schedule_note(rec)
    assert note is not None and "run r1" in note and "max_num_seqs 64: K=" in note


def test_the_note_names_the_levels_left_out() -> None:
    rec = record(provenance={"window_schedule": None, "window_by_max_num_seqs": {},
                             "window_levels_left_out": {"8": 1}})
    note = schedule_note(rec) or ""
    assert "compared no windows" in note and "max_num_seqs 8 (1)" in note


def test_schedule_note_only_when_plain() -> None:
    rec = record(provenance={"window_schedule": [[1, 8, 5], [9, 64, 3]]})
    assert schedule_note(rec) is None
    assert "compared no windows" in (schedule_note(REC) or "")


def test_vllm_args_export_the_measured_config_not_the_schedule() -> None:
    rec = record(provenance={"window_schedule": [[1, 8, 5], [9, 64, 3]]})
    args = shlex.split(render(rec, "vllm-args"), comments=True)
    spec = json.loads(args[args.index("--speculative-config") + 1])
    assert spec == REC.speculative_config


FLAGGED = {"checked": True, "flagged": True,
           "reason": "outputs differ from the baseline beyond the engine's numerics: 3/8 "
                     "identical; prompt 1 diverges at token 2 where the two tokens' "
                     "log-probabilities differ by 4.1 (> tie margin 0.05)"}


def test_a_flagged_newest_recommendation_is_exported_only_with_force() -> None:
    from autotune.export import outputs_flagged, pick_for_export

    older = record(id=1, status="active", provenance={"outputs": {"checked": True,
                                                                  "flagged": False}})
    newest = record(id=2, status="candidate", provenance={"outputs": FLAGGED})
    assert outputs_flagged(newest) and not outputs_flagged(older)
    assert not outputs_flagged(record(provenance={}))  # a simulator's: not checked, not flagged
    with pytest.raises(ExportError, match=r"#2 .* is flagged: outputs differ from the "
                                          r"baseline.*active recommendation #1 predates it.*"
                                          r"--force"):
        pick_for_export([newest, older], older, "code", force=False)
    assert pick_for_export([newest, older], older, "code", force=True) is newest
    with pytest.raises(ExportError, match="is flagged"):
        pick_for_export([newest], None, "code", force=False)
    # A flagged result older than the active one no longer stands in the way.
    assert pick_for_export([older, record(id=0, provenance={"outputs": FLAGGED})], older,
                           "code", force=False) is older
