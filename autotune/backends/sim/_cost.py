"""Step time of the simulated replica: target forward (verify + prefill) plus the drafter.

target(T) = fixed + expert_s · moe_layers · E(T) + token_s · T + kv_token_s · Σ context
            + attn_pair_s · Σ prefill attention pairs,
with E(T) = experts · (1 - (1 - k/experts)^T) the distinct routed experts a step of T tokens
touches per MoE layer (k experts per token). The drafter's time is added by the caller
(:meth:`~autotune.backends.sim._profile.DrafterProfile.draft_time`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from autotune.backends.sim._profile import CostModel

__all__ = ["StepCost"]


class StepCost:
    """Vectorisable step-time formula of one :class:`CostModel` (precomputed constants)."""

    __slots__ = ("_experts", "_log_miss", "_per_expert", "cost")

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost
        self._experts = float(cost.routed_experts)
        self._log_miss = float(np.log1p(-cost.experts_per_token / cost.routed_experts))
        self._per_expert = cost.expert_s * cost.moe_layers

    def experts_touched(self, tokens: float) -> float:
        """Distinct routed experts per MoE layer touched by ``tokens`` tokens."""
        if tokens <= 0:
            return 0.0
        return self._experts * -np.expm1(self._log_miss * tokens)

    def target(self, tokens: float, kv_context: float, attn_pairs: float) -> float:
        """Seconds of the target forward for one step."""
        c = self.cost
        if tokens <= 0:
            return 0.0
        return float(c.fixed_s + self._per_expert * self.experts_touched(tokens)
                     + c.token_s * tokens + c.kv_token_s * kv_context
                     + c.attn_pair_s * attn_pairs)

    def target_many(self, tokens: npt.NDArray[np.float64], kv_context: float,
                    attn_pairs: float) -> npt.NDArray[np.float64]:
        """:meth:`target` for an array of token counts (all > 0)."""
        c = self.cost
        touched = self._experts * -np.expm1(self._log_miss * tokens)
        out: npt.NDArray[np.float64] = (c.fixed_s + c.kv_token_s * kv_context
                                        + c.attn_pair_s * attn_pairs
                                        + self._per_expert * touched + c.token_s * tokens)
        return out
