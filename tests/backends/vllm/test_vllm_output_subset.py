"""Bad input of the output check (no vLLM needed: it is refused before any server starts): a
prompt subset (policy key ``outputs.prompts``) larger than the sample is an error naming the key
and the value, the exit is non-zero and nothing is written: ``start --once`` refuses it before the
database is opened, a pass given the sample later (the daemon, nightly) before it records a
row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from autotune.cli import cli
from autotune.errors import ConfigError
from autotune.store import Store


def _inputs(tmp_path: Path) -> tuple[Path, Path]:
    """A policy asking for 12 prompts and a 5-request sample."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({
        "name": "tiny", "serve": {"model": "/nonexistent/target", "method": "draft_model",
                                  "draft_model": "/nonexistent/draft", "draft_block_size": 4,
                                  "tensor_parallel_size": 1, "gpus_per_replica": 0,
                                  "max_model_len": 512},
        "space": {"num_speculative_tokens": [1], "max_num_seqs": [4],
                  "max_num_batched_tokens": [512]},
        "baseline": {"num_speculative_tokens": 1, "max_num_seqs": 4,
                     "max_num_batched_tokens": 512},
        "replay": {"mode": "closed", "concurrency": 2},
        "outputs": {"prompts": 12}}))
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text("".join(json.dumps({"id": f"r{i}", "workload": "math", "prompt": "2+2?",
                                           "output_tokens": 8}) + "\n" for i in range(5)))
    return policy, traffic


def test_a_prompt_subset_larger_than_the_sample_is_refused(tmp_path: Path) -> None:
    policy, traffic = _inputs(tmp_path)
    db_file = tmp_path / "autotune.db"
    exports = tmp_path / "exports"
    # --once checks before it opens the database: not even an empty one is created
    res = CliRunner().invoke(cli, ["start", "--traffic", str(traffic), "--policy", str(policy),
                                   "--backend", "vllm", "--once", "--db", f"sqlite:///{db_file}",
                                   "--export-dir", str(exports)])
    assert res.exit_code == 2
    assert "outputs.prompts = 12" in res.stderr and "5 requests" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and isinstance(res.exception, SystemExit)
    assert not db_file.exists() and not exports.exists()


def test_a_pass_given_its_sample_later_refuses_it_before_writing_a_row(tmp_path: Path) -> None:
    """The daemon and nightly read their sample per pass, with the database open: the pass
    refuses the subset before it records anything."""
    from autotune.orchestrate import TuneOptions
    from autotune.orchestrate.tuning import tune
    from autotune.policy import load_policy

    policy, traffic = _inputs(tmp_path)
    db = f"sqlite:///{tmp_path / 'autotune.db'}"
    options = TuneOptions(traffic=traffic, policy=load_policy(policy), backend="vllm",
                          export_dir=tmp_path / "exports")
    store = Store.open(db)
    try:
        with pytest.raises(ConfigError, match=r"^policy key outputs\.prompts = 12: .*5 requests"):
            tune(options, store)
        assert store.runs() == [] and store.trials() == []
        assert store.recommendations(history=True) == []
    finally:
        store.close()
    assert not (tmp_path / "exports").exists()
