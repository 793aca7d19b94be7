from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.policy import load_policy, parse_duration


@pytest.mark.parametrize("name", ["default", "latency", "throughput"])
def test_shipped_policies_load(repo: Path, name: str) -> None:
    p = load_policy(repo / "policies" / f"{name}.yaml")
    assert p.space.size() > 0
    assert len(p.sha256()) == 64


def test_default_is_the_seed_setting() -> None:
    p = load_policy()
    assert p.serve.model == "moonshotai/Kimi-K2.6" and p.serve.method == "dspark"
    assert p.baseline.config().num_speculative_tokens == 7
    assert p.baseline.config().max_num_seqs == 1024


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


def test_unknown_key_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "name: x\nserve: {model: m, modle: typo}\n")
    with pytest.raises(ConfigError, match=r"serve\.modle: unknown key"):
        load_policy(path)


def test_missing_and_wrong_values_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"serve: required key is missing"):
        load_policy(write(tmp_path, "name: x\n"))
    with pytest.raises(ConfigError, match=r"budget\.trials"):
        load_policy(write(tmp_path, "name: x\nserve: {model: m}\nbudget: {trials: 0}\n"))
    with pytest.raises(ConfigError, match=r"budget\.wall_clock"):
        load_policy(write(tmp_path, "name: x\nserve: {model: m}\nbudget: {wall_clock: soon}\n"))
    with pytest.raises(ConfigError, match=r"exceed serve\.draft_block_size"):
        load_policy(write(tmp_path, "name: x\nserve: {model: m, draft_block_size: 4}\n"
                                    "space: {num_speculative_tokens: [2, 6]}\n"))
    with pytest.raises(ConfigError, match=r"p\.yaml:\d+: invalid YAML"):
        load_policy(write(tmp_path, "name: x\nserve: [unclosed\n"))
    with pytest.raises(ConfigError, match="policy file not found"):
        load_policy(tmp_path / "nope.yaml")


def test_ranges_and_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, "name: x\nserve: {model: m}\nspace:\n"
                           "  max_num_seqs: {low: 8, high: 64, log: true}\n"
                           "  num_speculative_tokens: {low: 0, high: 6, step: 3}\n")
    p = load_policy(path, {"budget.trials": 3})
    assert p.space.choices("max_num_seqs") == [8, 16, 32, 64]
    assert p.space.choices("num_speculative_tokens") == [0, 3, 6]
    assert p.budget.trials == 3
    # n=0 has no adaptive-verification variant
    assert all(not (c.num_speculative_tokens == 0 and c.enable_adaptive_verification)
               for c in p.space.configs())


def test_durations() -> None:
    assert parse_duration("30m") == 1800 and parse_duration("5s") == 5
    assert parse_duration("2h") == 7200 and parse_duration(12) == 12
    with pytest.raises(ValueError):
        parse_duration("0s")
    with pytest.raises(ValueError):
        parse_duration("soon")
