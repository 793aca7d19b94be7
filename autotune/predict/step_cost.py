"""Step cost of a vLLM + DSpark replica, from published facts with fitted multipliers.

One engine step verifies ``T`` tokens (decode windows plus prefill chunks) on the target and
drafts the next windows. Its time is modelled as the sum of

- a fixed per-step floor (kernel launches, 2 all-reduces per layer, non-expert weights);
- the routed experts it touches: an MoE layer with R experts, k per token, touches about
  ``R·(1 - (1 - k/R)^T)`` distinct experts per layer for T tokens, each read once;
- per-token compute (2 · active parameters FLOPs per token, split over the TP group);
- the KV cache read by decoding sequences (MLA latent per context token) and prefill attention;
- the drafter: one forward per step for a parallel drafter (DSpark), one per drafted position
  for a sequential one (EAGLE, a draft model), each over the decoding sequences, plus its pass
  over prompt tokens.

Every coefficient derives from public facts (:mod:`autotune.predict.facts`: Kimi-K2 model card,
NVIDIA H200 datasheet) with a stated efficiency; the predictor then fits a log-multiplier per
part to what the runs it pays for measure. Nothing here comes from the simulator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import numpy.typing as npt

from autotune.predict.facts import Facts

__all__ = ["COST_PARTS", "PRIOR_SD", "StepCostModel"]

FloatArray = npt.NDArray[np.float64]

#: The parts of a step whose log-multipliers the predictor fits, in order.
COST_PARTS = ("fixed", "experts", "tokens", "attention", "drafter")

#: Prior sd of each part's log-multiplier (how far the facts may be off), and how much wider
#: it is when the hardware is not in the table.
PRIOR_SD = {"fixed": 0.6, "experts": 0.4, "tokens": 0.4, "attention": 0.6, "drafter": 0.8}
UNKNOWN_HARDWARE_SD = 2.5


@dataclass(frozen=True)
class StepCostModel:
    """Vectorised step time with fitted log-multipliers per part (zeros: the facts' prior)."""

    facts: Facts
    log_scale: tuple[float, ...] = (0.0,) * len(COST_PARTS)

    def with_scale(self, log_scale: FloatArray | tuple[float, ...]) -> StepCostModel:
        return replace(self, log_scale=tuple(float(x) for x in log_scale))

    def prior_sd(self) -> FloatArray:
        """Prior sd of each part's log-multiplier, in :data:`COST_PARTS` order."""
        widen = 1.0 if self.facts.hardware.known else UNKNOWN_HARDWARE_SD
        return np.asarray([PRIOR_SD[p] * widen for p in COST_PARTS])

    @cached_property
    def _coefficients(self) -> tuple[float, ...]:
        """Seconds per unit of each part, multipliers applied (computed once per model: the
        replica model evaluates a step tens of thousands of times per prediction)."""
        c = self.facts.coefficients()
        s = [math.exp(x) for x in self.log_scale]
        f = self.facts
        return (s[0] * c["fixed_s"], s[1] * c["expert_s"] * f.moe_layers, s[2] * c["token_s"],
                s[3] * c["kv_token_s"], s[3] * c["pair_s"], s[4] * c["draft_fixed_s"],
                s[4] * c["draft_token_s"])

    def experts(self, tokens: FloatArray) -> FloatArray:
        """Distinct routed experts per MoE layer touched by a step of ``tokens`` tokens
        (none for a dense model)."""
        f = self.facts
        if not f.routed_experts:
            return np.zeros_like(np.asarray(tokens, dtype=np.float64))
        r = float(f.routed_experts)
        out: FloatArray = r * -np.expm1(np.log1p(-f.experts_per_token / r)
                                        * np.maximum(tokens, 0.0))
        return out

    def step(self, tokens: FloatArray, decoding: FloatArray, context: FloatArray,
             pairs: FloatArray, window: FloatArray, prefill: FloatArray) -> FloatArray:
        """Seconds of one step: ``tokens`` verified/prefilled, ``decoding`` sequences with
        ``context`` KV tokens in all, ``pairs`` prefill attention pairs, drafting ``window``
        positions per decoding sequence plus ``prefill`` prompt tokens.

        A parallel drafter runs one forward over the window; a sequential one runs ``window``
        forwards, each over every decoding sequence."""
        fixed, expert, token, kv, pair, dfix, dtok = self._coefficients
        drafting = np.where(window > 0, 1.0, 0.0)
        if self.facts.drafter.parallel:
            draft = drafting * (dfix + dtok * (decoding * window + prefill))
        else:
            draft = window * (dfix + dtok * decoding) + drafting * dtok * prefill
        out: FloatArray = (fixed + expert * self.experts(tokens) + token * tokens
                           + kv * context + pair * pairs + draft)
        return out

    def marginal(self, tokens: FloatArray) -> FloatArray:
        """d(step time)/d(tokens): the cost of verifying one more token at this size."""
        f = self.facts
        _, expert, token, *_ = self._coefficients
        if not f.routed_experts:
            return np.full_like(np.asarray(tokens, dtype=np.float64), token)
        r = float(f.routed_experts)
        miss = np.log1p(-f.experts_per_token / r)
        out: FloatArray = expert * r * -miss * np.exp(miss * np.maximum(tokens, 0.0)) + token
        return out
