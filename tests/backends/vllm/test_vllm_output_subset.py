"""Bad input of the output check (no vLLM needed: it is refused before any server starts): a
prompt subset (policy key ``outputs.prompts``) larger than the sample is an error naming the key
and the value, the exit is non-zero and nothing is written."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from autotune.cli import cli
from autotune.store import Store


def test_a_prompt_subset_larger_than_the_sample_is_refused(tmp_path: Path) -> None:
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
    db = f"sqlite:///{tmp_path / 'autotune.db'}"
    exports = tmp_path / "exports"
    res = CliRunner().invoke(cli, ["start", "--traffic", str(traffic), "--policy", str(policy),
                                   "--backend", "vllm", "--once", "--db", db,
                                   "--export-dir", str(exports)])
    assert res.exit_code != 0
    assert "outputs.prompts = 12" in res.stderr and "5 requests" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and isinstance(res.exception, SystemExit)
    store = Store.open(db)
    try:
        assert store.runs() == [] and store.trials() == []
        assert store.recommendations(history=True) == []
    finally:
        store.close()
    assert not exports.exists()
