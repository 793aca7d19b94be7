"""The predictor's facts: read from config.json files (local, HF cache, shipped catalog) and the
hardware table, with the drafter's structure; nothing downloaded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from autotune.predict import StepCostModel
from autotune.predict.facts import (
    Facts,
    UndescribedReplica,
    describe_replica,
    kimi_h200_facts,
)
from autotune.predict.model_config import find_model_config

LLAMA = "meta-llama/Llama-3.1-70B-Instruct"


def llama_facts(method: str = "eagle3", gpu: str | None = "H100") -> Facts:
    return describe_replica(model=LLAMA, draft_model="yuhuili/EAGLE3-LLaMA3.1-Instruct-70B",
                            method=method, tensor_parallel=4, gpu=gpu, gpu_count=4)


def test_a_dense_model_from_its_published_config() -> None:
    f = describe_replica(model=LLAMA, draft_model=None, method="eagle3", tensor_parallel=4,
                         gpu="H100", gpu_count=4)
    m = f.model
    assert m.routed_experts == 0 and m.moe_layers == 0 and not m.mla
    assert m.active_params == pytest.approx(70e9, rel=0.02)  # "70B"
    # GQA: 8 KV heads × 128 × 2 (K and V) × 80 layers, split over 4 ranks, 2 bytes each
    assert m.kv_values_per_token == 2 * 8 * 128 * 80
    c = f.coefficients()
    assert c["expert_s"] == 0.0
    assert c["kv_token_s"] == pytest.approx(2 * 8 * 128 * 80 * 2 / 4 / (3.35e12 * 0.7))
    cost = StepCostModel(f)
    assert cost.experts(np.array([64.0]))[0] == 0.0
    assert cost.marginal(np.array([1.0, 64.0]))[0] == cost.marginal(np.array([64.0]))[0]


def test_a_sequential_drafter_pays_per_drafted_position_a_parallel_one_once() -> None:
    one = np.array([1.0])
    step = {}
    for method in ("eagle3", "dspark"):
        cost = StepCostModel(describe_replica(
            model=LLAMA, draft_model=None, method=method, tensor_parallel=4, gpu="H100",
            gpu_count=4))
        step[method] = [cost.step(one * (1 + n), one, one * 500, one * 0, one * n, one * 0)[0]
                        for n in (1, 4)]
    seq_growth = step["eagle3"][1] - step["eagle3"][0]
    par_growth = step["dspark"][1] - step["dspark"][0]
    assert seq_growth > 3 * par_growth > 0


def test_kimi_comes_from_the_catalog_with_its_mla_and_experts() -> None:
    f = kimi_h200_facts()
    assert f.model.mla and f.model.routed_experts == 384 and f.drafter.parallel
    assert "autotune's catalog" in f.model.source
    assert "parallel dspark drafter; 8x H200" in f.describe()


def test_unknown_hardware_is_learned_with_wider_priors() -> None:
    known = StepCostModel(llama_facts(gpu="H100")).prior_sd()
    unknown_facts = llama_facts(gpu="TPU9")
    assert any("learned from the runs" in n for n in unknown_facts.notes)
    unknown = StepCostModel(unknown_facts).prior_sd()
    assert (unknown > 2 * known).all()


def test_an_unknown_model_cannot_be_described() -> None:
    with pytest.raises(UndescribedReplica, match=r"no config\.json for 'acme/x'"):
        describe_replica(model="acme/x", draft_model=None, method="dspark", tensor_parallel=1,
                         gpu=None, gpu_count=1)


def test_configs_are_found_locally_and_in_the_hf_cache_before_the_catalog(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
           "intermediate_size": 3072, "vocab_size": 512}
    local = tmp_path / "target"
    local.mkdir()
    (local / "config.json").write_text(json.dumps(cfg))
    found = find_model_config(str(local))
    assert found is not None and found[0]["hidden_size"] == 768
    snap = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({**cfg, "hidden_size": 512}))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    found = find_model_config("org/tiny")
    assert found is not None and found[0]["hidden_size"] == 512
    assert "Hugging Face cache" in found[1]
    # a draft model's own config sizes the sequential drafter
    f = describe_replica(model=LLAMA, draft_model=str(local), method="draft_model",
                         tensor_parallel=1, gpu="H100", gpu_count=1)
    assert f.drafter.layers == 12 and not f.drafter.parallel
