"""Step time of the simulated replica: the target's forward plus the drafter's, by cost law.

A profile picks one law (``cost.law``):

- ``analytic``: target(T) = fixed + expert_s · moe_layers · E(T) + token_s · T
  + kv_token_s · Σ context + attn_pair_s · Σ prefill attention pairs, with
  E(T) = n · (1 − (1 − k/n)^T) the distinct routed experts a step of T tokens touches per MoE
  layer (absent for a dense model); the drafter's time from its analytic cost.
- ``table``: the target's (and drafter's) forward interpolated from a measured step-time table
  (:mod:`._table`) at the step's batch tokens and its mean attended context, with CUDA-graph
  padding buckets.

Both see a step through the same numbers: ``tokens`` (batch tokens), ``kv_context`` (Σ context
of the decoding requests: the KV read), ``attn_pairs`` (Σ prefill (query, key) pairs) and
``context`` (the keys a batch token attends to on average: Σ over decoding requests of verify
tokens × context, plus the prefill pairs, over the batch tokens). The analytic law reads the
first three, the table law ``tokens`` and ``context``.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from autotune.backends.sim._profile import (
    AnalyticCost,
    AnalyticDraftCost,
    DrafterProfile,
    Profile,
    TableCost,
)
from autotune.backends.sim._table import TableLookup

__all__ = ["AnalyticStepCost", "StepCostLaw", "TableStepCost", "cost_law"]

FloatArray = npt.NDArray[np.float64]


class StepCostLaw(Protocol):
    """Seconds of one engine step's target forward and of its drafting."""

    law: str

    def target(self, tokens: float, kv_context: float, attn_pairs: float,
               context: float) -> float: ...

    def target_many(self, tokens: FloatArray, kv_context: float, attn_pairs: float,
                    context: float) -> FloatArray: ...

    def target_range(self, first: int, count: int, kv_context: float, attn_pairs: float,
                     context: float) -> FloatArray:
        """:meth:`target_many` at the batch tokens ``first``, ``first + 1``, ...,
        ``first + count - 1`` (the candidates of adaptive verification)."""
        ...

    def decode_steps(self, tokens: FloatArray | float, kv_context: FloatArray,
                     context: FloatArray, draft_s: float) -> FloatArray:
        """Seconds of pure decode steps, drafting included (one per element of ``kv_context``)."""
        ...

    def draft_time(self, window: int, seqs: int, prefill_tokens: int,
                   context: float) -> float: ...


def _analytic_draft(cost: AnalyticDraftCost, parallel: bool, window: int, seqs: int,
                    prefill_tokens: int) -> float:
    """A parallel (block) drafter runs one forward per step, a sequential one ``window``."""
    t = cost.prefill_token_s * prefill_tokens
    if window <= 0 or seqs <= 0:
        return t
    passes = 1 if parallel else window
    return (t + passes * cost.fixed_s + cost.per_position_s * window
            + cost.per_seq_position_s * seqs * window)


class AnalyticStepCost:
    """The ``analytic`` law: independent parts summed (see the module docstring)."""

    __slots__ = ("_drafter", "_expert_terms", "_experts", "_log_miss", "_per_expert",
                 "_token_terms", "cost")
    law = "analytic"

    def __init__(self, cost: AnalyticCost, drafter: DrafterProfile | None) -> None:
        self.cost = cost
        self._drafter = drafter
        experts = cost.experts
        if experts is None:
            self._experts, self._log_miss, self._per_expert = 0.0, 0.0, 0.0
        else:
            self._experts = float(experts.routed_experts)
            self._log_miss = float(np.log1p(-experts.experts_per_token / experts.routed_experts))
            self._per_expert = experts.expert_s * experts.moe_layers
        self._expert_terms = np.zeros(0)
        self._token_terms = np.zeros(0)

    def experts_touched(self, tokens: float) -> float:
        """Distinct routed experts per MoE layer touched by ``tokens`` tokens."""
        if tokens <= 0:
            return 0.0
        return float(self._experts * -np.expm1(self._log_miss * tokens))

    def expert_seconds(self, tokens: float) -> float:
        """Seconds of routed-expert reads of a step of ``tokens`` tokens."""
        return self._per_expert * self.experts_touched(tokens)

    def target(self, tokens: float, kv_context: float, attn_pairs: float,
               context: float = 0.0) -> float:
        c = self.cost
        if tokens <= 0:
            return 0.0
        return float(c.fixed_s + self._per_expert * self.experts_touched(tokens)
                     + c.token_s * tokens + c.kv_token_s * kv_context
                     + c.attn_pair_s * attn_pairs)

    def target_many(self, tokens: FloatArray, kv_context: float, attn_pairs: float,
                    context: float = 0.0) -> FloatArray:
        c = self.cost
        touched = self._experts * -np.expm1(self._log_miss * tokens)
        out: FloatArray = (c.fixed_s + c.kv_token_s * kv_context + c.attn_pair_s * attn_pairs
                           + self._per_expert * touched + c.token_s * tokens)
        return out

    def target_range(self, first: int, count: int, kv_context: float, attn_pairs: float,
                     context: float = 0.0) -> FloatArray:
        """:meth:`target_many` over consecutive token counts, from tables of its two
        token-dependent terms (the same floating-point operations, done once per count)."""
        end = first + count
        if end > self._token_terms.size:
            self._grow_terms(end)
        c = self.cost
        out: FloatArray = ((c.fixed_s + c.kv_token_s * kv_context + c.attn_pair_s * attn_pairs)
                           + self._expert_terms[first:end])
        out += self._token_terms[first:end]
        return out

    def _grow_terms(self, size: int) -> None:
        """Tabulate the routed-expert and per-token seconds of 0 .. ``size`` - 1 (or more)
        batch tokens, computed as :meth:`target_many` computes them."""
        tokens = np.arange(max(size, 2 * self._token_terms.size, 1024), dtype=np.float64)
        touched = self._experts * -np.expm1(self._log_miss * tokens)
        self._expert_terms = self._per_expert * touched
        self._token_terms = self.cost.token_s * tokens

    def decode_steps(self, tokens: FloatArray | float, kv_context: FloatArray,
                     context: FloatArray, draft_s: float) -> FloatArray:
        if np.ndim(tokens) == 0:
            base: FloatArray | float = self.target(float(tokens), 0.0, 0.0) + draft_s
        else:
            base = self.target_many(np.asarray(tokens, dtype=np.float64), 0.0, 0.0) + draft_s
        out: FloatArray = base + self.cost.kv_token_s * kv_context
        return out

    def draft_time(self, window: int, seqs: int, prefill_tokens: int,
                   context: float = 0.0) -> float:
        d = self._drafter
        if d is None or not isinstance(d.cost, AnalyticDraftCost):
            return 0.0
        return _analytic_draft(d.cost, d.parallel, window, seqs, prefill_tokens)


class TableStepCost:
    """The ``table`` law: measured forwards, interpolated (see the module docstring)."""

    __slots__ = ("_draft", "_drafter", "_target", "cost")
    law = "table"

    def __init__(self, cost: TableCost, drafter: DrafterProfile | None) -> None:
        self.cost = cost
        self._drafter = drafter
        self._target = TableLookup(cost.table, cost.table.target_step_ms)
        grid = cost.table.draft_step_ms
        self._draft = TableLookup(cost.table, grid) if grid is not None else None

    def target(self, tokens: float, kv_context: float, attn_pairs: float,
               context: float = 0.0) -> float:
        if tokens <= 0:
            return 0.0
        return float(self._target.seconds(tokens, context))

    def target_many(self, tokens: FloatArray, kv_context: float, attn_pairs: float,
                    context: float = 0.0) -> FloatArray:
        return self._target.seconds(tokens, context)

    def target_range(self, first: int, count: int, kv_context: float, attn_pairs: float,
                     context: float = 0.0) -> FloatArray:
        return self.target_many(first + np.arange(count, dtype=np.float64), kv_context,
                                attn_pairs, context)

    def decode_steps(self, tokens: FloatArray | float, kv_context: FloatArray,
                     context: FloatArray, draft_s: float) -> FloatArray:
        out: FloatArray = self._target.seconds(tokens, context) + draft_s
        return out

    def draft_time(self, window: int, seqs: int, prefill_tokens: int,
                   context: float = 0.0) -> float:
        """A sequential drafter runs ``window`` forwards over the sequences, a parallel one a
        single forward over every drafted position; the first forward also reads the step's
        new prompt tokens."""
        d = self._drafter
        if d is None:
            return 0.0
        if not isinstance(d.cost, AnalyticDraftCost) and self._draft is not None:
            if window <= 0 or seqs <= 0:
                if prefill_tokens <= 0:
                    return 0.0
                return float(self._draft.seconds(prefill_tokens, context))
            passes, per_pass = (1, seqs * window) if d.parallel else (window, seqs)
            first = float(self._draft.seconds(per_pass + prefill_tokens, context))
            rest = float(self._draft.seconds(per_pass, context)) if passes > 1 else 0.0
            return first + (passes - 1) * rest
        if isinstance(d.cost, AnalyticDraftCost):
            return _analytic_draft(d.cost, d.parallel, window, seqs, prefill_tokens)
        return 0.0


def cost_law(profile: Profile, drafter: DrafterProfile | None) -> AnalyticStepCost | TableStepCost:
    """The step-cost law of ``profile`` with ``drafter`` (None: no speculation)."""
    if isinstance(profile.cost, TableCost):
        return TableStepCost(profile.cost, drafter)
    return AnalyticStepCost(profile.cost, drafter)
