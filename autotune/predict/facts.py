"""Published facts about the target model, the drafter and the hardware, and what follows.

The predictor's step cost (:mod:`autotune.predict.step_cost`) derives its coefficients from
these facts with stated efficiencies: the Kimi-K2 model card (layers, MoE experts, MLA latent,
INT4 expert weights), the NVIDIA H200 datasheet (HBM bandwidth, BF16 FLOPs) and the novita
DSpark checkpoints (3 draft layers). Nothing here comes from the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Facts"]


@dataclass(frozen=True)
class Facts:
    """Published facts (and stated assumptions) the cost coefficients derive from."""

    # Kimi-K2 model card (moonshotai/Kimi-K2-Instruct config.json)
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
    # novita DSpark checkpoints: 3 draft layers
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
