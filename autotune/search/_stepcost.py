"""Step cost of a vLLM + DSpark replica from published model and hardware facts.

One engine step verifies ``T`` tokens (decode windows plus prefill chunks) on the target and
drafts the next windows. Its time is modelled as the sum of

- a fixed per-step floor (kernel launches, 2 all-reduces per layer, non-expert weights);
- the routed experts it touches: an MoE layer with R experts, k per token, touches about
  ``R·(1 - (1 - k/R)^T)`` distinct experts per layer for T tokens (DESIGN §1), each read once;
- per-token compute (2 · active parameters FLOPs per token, split over the TP group);
- the KV cache read by decoding sequences (MLA latent per context token) and prefill attention;
- the drafter: one parallel DSpark forward per step (3 draft layers), per drafted position and
  per prompt token.

Every coefficient is derived below from public facts (Kimi-K2 model card, NVIDIA H200
datasheet) with a stated efficiency; the predictor then fits a log-multiplier per part to what
the runs it pays for measure. Nothing here comes from the simulator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

__all__ = ["COST_PARTS", "CostModel", "Facts"]

FloatArray = npt.NDArray[np.float64]

#: The parts of a step whose log-multipliers the predictor fits, in order.
COST_PARTS = ("fixed", "experts", "tokens", "attention", "drafter")


@dataclass(frozen=True)
class Facts:
    """Published facts (and stated assumptions) the cost coefficients derive from."""

    # Kimi-K2 model card (moonshotai/Kimi-K2-Instruct config.json); DESIGN §1
    layers: int = 61
    moe_layers: int = 60                # 61 layers, the first dense
    routed_experts: int = 384
    experts_per_token: int = 8
    hidden: int = 7168
    expert_ffn: int = 2048
    active_params: float = 32e9
    attention_heads: int = 64
    kv_latent: int = 576                # MLA: kv_lora_rank 512 + qk_rope_head_dim 64, per layer
    # Kimi-K2-Thinking / K2.6 ship INT4 (W4A16, group 32) routed-expert weights
    expert_weight_bytes: float = 0.5 + 2.0 / 32
    kv_bytes: float = 2.0               # BF16 cache
    # NVIDIA H200 SXM datasheet: 4.8 TB/s HBM3e, 989 TFLOPS dense BF16
    hbm_bytes_per_s: float = 4.8e12
    bf16_flops: float = 989e12
    tensor_parallel: int = 8
    # assumptions: achievable fractions of peak, and the batch-1 floor (launches, all-reduces)
    memory_efficiency: float = 0.7
    compute_efficiency: float = 0.5
    step_floor_s: float = 0.015
    # novita DSpark checkpoints: 3 draft layers (DESIGN §1)
    draft_layers: int = 3
    # KV cache: 141 GB per GPU at vLLM's default gpu_memory_utilization 0.9, minus the weights
    # (1.04T parameters: routed experts INT4, the rest BF16) and a reserve for activations,
    # CUDA graphs and the drafter (assumed)
    gpu_memory_bytes: float = 141e9
    gpu_memory_utilization: float = 0.9
    total_params: float = 1.04e12
    reserve_bytes: float = 6e9

    def kv_cache_tokens(self) -> float:
        """Context tokens the KV cache holds (the MLA latent is replicated on every GPU)."""
        expert_params = (self.routed_experts * self.moe_layers * 3 * self.hidden
                         * self.expert_ffn)
        weights = (expert_params * self.expert_weight_bytes
                   + (self.total_params - expert_params) * 2.0) / self.tensor_parallel
        free = self.gpu_memory_bytes * self.gpu_memory_utilization - weights - self.reserve_bytes
        return max(free, 0.0) / (self.kv_latent * self.kv_bytes * self.layers)

    def coefficients(self) -> dict[str, float]:
        """Seconds per unit of each part (see the module docstring)."""
        bw = self.hbm_bytes_per_s * self.memory_efficiency
        flops = self.bf16_flops * self.compute_efficiency
        tp = self.tensor_parallel
        expert_bytes = 3 * self.hidden * self.expert_ffn * self.expert_weight_bytes / tp
        token_flops = 2 * self.active_params / tp
        kv_token_bytes = self.kv_latent * self.kv_bytes * self.layers  # latent replicated per GPU
        # absorbed MLA attention: q·k over the 576-wide latent, attention·v over 512, per head
        pair_flops = 2 * (self.kv_latent + 512) * self.attention_heads * self.layers / tp
        share = self.draft_layers / self.layers
        return {
            "fixed_s": self.step_floor_s,
            "expert_s": expert_bytes / bw,
            "token_s": token_flops / flops,
            "kv_token_s": kv_token_bytes / bw,
            "pair_s": pair_flops / flops,
            "draft_fixed_s": share * self.step_floor_s,
            "draft_token_s": share * token_flops / flops,
        }


@dataclass(frozen=True)
class CostModel:
    """Vectorised step time with fitted log-multipliers per part (zeros: the facts' prior)."""

    facts: Facts = field(default_factory=Facts)
    log_scale: tuple[float, ...] = (0.0,) * len(COST_PARTS)

    def with_scale(self, log_scale: FloatArray | tuple[float, ...]) -> CostModel:
        return replace(self, log_scale=tuple(float(x) for x in log_scale))

    def _coef(self) -> tuple[float, ...]:
        c = self.facts.coefficients()
        s = [math.exp(x) for x in self.log_scale]
        f = self.facts
        return (s[0] * c["fixed_s"], s[1] * c["expert_s"] * f.moe_layers, s[2] * c["token_s"],
                s[3] * c["kv_token_s"], s[3] * c["pair_s"], s[4] * c["draft_fixed_s"],
                s[4] * c["draft_token_s"])

    def experts(self, tokens: FloatArray) -> FloatArray:
        """Distinct routed experts per MoE layer touched by a step of ``tokens`` tokens."""
        f = self.facts
        r = float(f.routed_experts)
        out: FloatArray = r * -np.expm1(np.log1p(-f.experts_per_token / r)
                                        * np.maximum(tokens, 0.0))
        return out

    def step(self, tokens: FloatArray, decoding: FloatArray, context: FloatArray,
             pairs: FloatArray, window: FloatArray, prefill: FloatArray) -> FloatArray:
        """Seconds of one step: ``tokens`` verified/prefilled, ``decoding`` sequences with
        ``context`` KV tokens in all, ``pairs`` prefill attention pairs, drafting ``window``
        positions per decoding sequence plus ``prefill`` prompt tokens."""
        fixed, expert, token, kv, pair, dfix, dtok = self._coef()
        drafting = np.where(window > 0, 1.0, 0.0)
        out: FloatArray = (fixed + expert * self.experts(tokens) + token * tokens
                           + kv * context + pair * pairs
                           + drafting * (dfix + dtok * (decoding * window + prefill)))
        return out

    def marginal(self, tokens: FloatArray) -> FloatArray:
        """d(step time)/d(tokens): the cost of verifying one more token at this size."""
        f = self.facts
        _, expert, token, *_ = self._coef()
        r = float(f.routed_experts)
        miss = np.log1p(-f.experts_per_token / r)
        out: FloatArray = expert * r * -miss * np.exp(miss * np.maximum(tokens, 0.0)) + token
        return out
