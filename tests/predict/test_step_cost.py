"""The step cost from published facts, against the simulator's independently built profiles,
random expert routing, and the scaling the hardware implies."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from autotune.backends.sim import cost_law, load_profile
from autotune.predict import StepCostModel
from autotune.predict.facts import describe_replica, kimi_h200_facts
from autotune.predict.hardware import GPU_SPECS


def test_expert_touch_matches_random_routing() -> None:
    """Kimi-K2 routes each token to 8 of 384 experts per layer: the experts a step of t tokens
    touches, drawn token by token, are what the step cost reads them at."""
    cost = StepCostModel(kimi_h200_facts())
    rng = np.random.default_rng(0)
    for t in (1, 2, 8, 64, 1024):
        touched = []
        for _ in range(40):
            chosen = np.argpartition(rng.random((t, 384)), 8, axis=1)[:, :8]
            touched.append(np.unique(chosen).size)
        drawn = float(np.mean(touched))
        assert cost.experts(np.array([float(t)]))[0] == pytest.approx(drawn, rel=0.02, abs=0.5)
    assert cost.experts(np.array([1.0]))[0] == pytest.approx(8.0)
    dense = describe_replica(model="meta-llama/Llama-3.1-70B-Instruct", draft_model=None,
                             method="eagle3", tensor_parallel=4, gpu="H100", gpu_count=4)
    assert StepCostModel(dense).experts(np.array([64.0]))[0] == 0.0


def test_the_model_card_totals_follow_from_the_config() -> None:
    """Kimi-K2's model card: 1T total parameters, 32B active (31.5B without the embedding
    lookup, counted from config.json)."""
    f = kimi_h200_facts()
    assert f.model.active_params == pytest.approx(32e9, rel=0.03)
    assert f.model.routed_params == pytest.approx(1.0e12, rel=0.03)


def _simulated_forward(profile: str, tokens: float, batch: float, context: float,
                       window: int) -> float:
    """One step's time on a simulator profile: the target's forward (analytic or a measured
    table) plus its drafter's, built independently of the predictor's facts."""
    prof = load_profile(profile)
    law = cost_law(prof, prof.drafter("dspark") if window else None)
    return (law.target(tokens, batch * context, 0.0, context)
            + (law.draft_time(window, int(batch), 0) if window else 0.0))


def test_the_facts_step_cost_agrees_with_the_simulator_profiles() -> None:
    """The simulator's profiles derive their step times on their own (Kimi: an analytic law
    fitted to the seed table; Llama: measured forward tables). The step cost the predictor
    builds from published facts alone lies within a factor of 1.6 of the Kimi profile and 3
    of the tables (the span of its fitted multipliers' priors), and grows with the batch and
    the window as they do."""
    shapes = [(b, n) for b in (1, 8, 64, 256) for n in (0, 3, 7)]
    worlds = [("kimi-k2.6@8xH200-tp8", kimi_h200_facts(), 1.6)]
    for profile, model, tp, gpu in (
            ("llama-3.1-70b@4xH100-tp4-table", "meta-llama/Llama-3.1-70B-Instruct", 4, "H100"),
            ("llama-3.1-8b@1xH100-table", "meta-llama/Llama-3.1-8B-Instruct", 1, "H100"),
            ("llama-3.1-70b@1xMI300X-table", "meta-llama/Llama-3.1-70B-Instruct", 1, "MI300X")):
        worlds.append((profile, describe_replica(model=model, draft_model=None, method="dspark",
                                                 tensor_parallel=tp, gpu=gpu, gpu_count=tp),
                       3.0))
    for profile, facts, within in worlds:
        drafts = profile.startswith("kimi")
        cost = StepCostModel(facts)
        predicted, simulated = [], []
        for b, n in shapes:
            n = n if drafts else 0
            one = np.array([1.0])
            predicted.append(cost.step(one * b * (1 + n), one * b, one * b * 2000.0, one * 0,
                                       one * n, one * 0)[0])
            simulated.append(_simulated_forward(profile, b * (1 + n), b, 2000.0, n))
        ratio = np.asarray(predicted) / np.asarray(simulated)
        assert ((1 / within <= ratio) & (ratio <= within)).all(), (profile, ratio.round(2))
        for steps in (np.reshape(predicted, (4, 3)), np.reshape(simulated, (4, 3))):
            assert (np.diff(steps, axis=0) > 0).all()              # a bigger batch
            assert not drafts or (np.diff(steps, axis=1) > 0).all()  # a wider window
    kimi = load_profile("kimi-k2.6@8xH200-tp8")
    assert kimi_h200_facts().kv_cache_tokens() == pytest.approx(kimi.kv_cache_tokens, rel=0.1)


def test_memory_bound_parts_scale_with_bandwidth_and_compute_with_flops() -> None:
    """H100 and H200 have the same dense BF16 FLOPs and 3.35 vs 4.8 TB/s: the weight and KV
    reads of a step slow by the bandwidth's ratio, its per-token compute does not; twice the
    tensor-parallel GPUs split the weights, not the replicated MLA latent cache."""
    def kimi(gpu: str, tp: int) -> dict[str, float]:
        return describe_replica(model="moonshotai/Kimi-K2.6",
                                draft_model="novita/kimi-k2.6-dspark", method="dspark",
                                tensor_parallel=tp, gpu=gpu, gpu_count=tp).coefficients()

    h200, h100, h200_tp4 = kimi("H200", 8), kimi("H100", 8), kimi("H200", 4)
    bandwidth = GPU_SPECS["H200"].hbm_bytes_per_s / GPU_SPECS["H100"].hbm_bytes_per_s
    assert h100["expert_s"] / h200["expert_s"] == pytest.approx(bandwidth)
    assert h100["kv_token_s"] / h200["kv_token_s"] == pytest.approx(bandwidth)
    assert h100["token_s"] == pytest.approx(h200["token_s"])
    assert h200_tp4["expert_s"] == pytest.approx(2 * h200["expert_s"])
    assert h200_tp4["token_s"] == pytest.approx(2 * h200["token_s"])
    assert h200_tp4["kv_token_s"] == pytest.approx(h200["kv_token_s"])


def test_wider_windows_cost_more_and_the_marginal_token_gets_cheaper() -> None:
    cost = StepCostModel(kimi_h200_facts())
    one = np.array([1.0])
    base = cost.step(np.array([2.0]), one, one * 500, one * 0, one * 1, one * 0)[0]
    wide = cost.step(np.array([8.0]), one, one * 500, one * 0, one * 7, one * 0)[0]
    assert wide > base
    tokens = np.array([1.0, 64.0, 4096.0])
    m = cost.marginal(tokens)
    assert m[0] > m[1] > m[2] > 0
    # the marginal cost is the step's own slope in the tokens verified
    ones = np.ones_like(tokens)

    def step(t: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return cost.step(t, ones, ones * 500, ones * 0, ones * 3, ones * 0)

    slope = (step(tokens + 0.01) - step(tokens - 0.01)) / 0.02
    np.testing.assert_allclose(m, slope, rtol=1e-4)
