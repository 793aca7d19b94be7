"""DSpark adaptive verification and the accepted prefix of a draft, as few numpy calls as can be.

Adaptive verification picks, per step, how many draft tokens each decoding request verifies:
the head's survival probabilities (the cumulative product of its per-position confidences,
shifted by the step's shift) of every (request, position) are ranked, and the budget keeps the
prefix of that ranking that maximises expected emitted tokens (requests + the kept
probabilities) per step second. :func:`step_verify_budget` is the rule of one engine step,
:func:`block_verify_budgets` that of a block of steady steps (:mod:`._decode_block`).

Both run once per simulated step, so they are written for speed, with results identical bit
for bit to the plain formulation (``argsort`` of the flattened survivals, ``cumprod`` of the
acceptance mask):

- a survival row is non-increasing (a product of confidences in [0, 1]), so the number of a
  row's entries at or above a threshold is the index of its first entry below it, found with
  ``argmin`` over the comparison with a sentinel column appended, instead of a sum;
- the ranking only needs the sorted values (their running sum is the expected gain); which
  entries a budget of k keeps follows from the k-th value (entries strictly above it, plus the
  first tied ones in row-major order, as a stable sort would order them);
- the candidate step times come from :meth:`StepCostLaw.target_range` (a table lookup for the
  analytic law).
"""

from __future__ import annotations

import numpy as np

from autotune.backends.sim._batch import FloatArray, IntArray
from autotune.backends.sim._cost import StepCostLaw

__all__ = ["accepted_prefix", "block_verify_budgets", "step_verify_budget"]


def accepted_prefix(draws: FloatArray, thresholds: FloatArray) -> IntArray:
    """Per row (last axis = draft positions): how many leading positions have
    ``draws < thresholds``, i.e. the accepted prefix of the draft."""
    shape = draws.shape
    ok = np.zeros((*shape[:-1], shape[-1] + 1), dtype=bool)  # sentinel column: False
    np.less(draws, thresholds, out=ok[..., :-1])
    out: IntArray = ok.argmin(axis=-1)
    return out


def _confidence_survival(head: FloatArray, shift: FloatArray) -> FloatArray:
    """Survival of every draft position: ``cumprod(sigmoid(head + shift))`` along the last
    axis (``head`` and ``shift`` broadcast together)."""
    conf = 1.0 / (1.0 + np.exp(-(head + shift)))
    out: FloatArray = np.cumprod(conf, axis=-1, dtype=np.float64)
    return out


def _count_at_least(survival: FloatArray, threshold: FloatArray | float) -> IntArray:
    """Per row of non-increasing ``survival`` (last axis): how many entries are >=
    ``threshold`` (broadcast over the leading axes), i.e. the index of the first one below."""
    shape = survival.shape
    at_least = np.zeros((*shape[:-1], shape[-1] + 1), dtype=bool)  # sentinel column: False
    np.greater_equal(survival, threshold, out=at_least[..., :-1])
    out: IntArray = at_least.argmin(axis=-1)
    return out


def step_verify_budget(head: FloatArray, z: FloatArray, m_max: IntArray, cost: StepCostLaw,
                       base_tokens: int, kv_context: float, attn_pairs: float, context: float,
                       draft_s: float) -> IntArray:
    """The verify budget (draft tokens) of each decoding request in one engine step.

    ``head`` holds the requests' head logits over the window (rows = requests), ``z`` their
    step shifts, ``m_max`` the most each may verify (the window, or less when the token budget
    truncated it); ``base_tokens`` are the step's tokens before any draft token (prefill chunks
    plus one per decoding request). Equal to: rank the survivals (positions at or beyond
    ``m_max`` excluded) with a stable descending sort, choose the prefix length maximising
    (requests + kept survivals) / (step time + ``draft_s``), and count the kept entries per row.
    """
    nd, window = head.shape
    surv = _confidence_survival(head, z[:, None])
    truncated = int(np.minimum.reduce(m_max)) < window
    if truncated:
        surv[np.arange(window)[None, :] >= m_max[:, None]] = -1.0
    ranked = np.sort(surv, axis=None)[::-1]
    valid = int(np.add.reduce(m_max)) if truncated else nd * window  # the entries not excluded
    gains = np.empty(valid + 1)
    gains[0] = 0.0
    ranked[:valid].cumsum(out=gains[1:])
    times = cost.target_range(base_tokens, valid + 1, kv_context, attn_pairs, context) + draft_s
    best = int(((nd + gains) / times).argmax())
    if best == 0:
        return np.zeros(nd, dtype=np.int64)
    threshold = float(ranked[best - 1])
    chosen = _count_at_least(surv, threshold)
    if int(np.add.reduce(chosen)) != best:
        # ties at the threshold: a stable sort keeps the first ones, in row-major order
        chosen = _count_at_least(surv, np.nextafter(threshold, np.inf))  # those above it
        tied = np.flatnonzero(surv.ravel() == threshold)[: best - int(chosen.sum())]
        chosen = chosen + np.bincount(tied // window, minlength=nd)
    return chosen


def block_verify_budgets(head: FloatArray, step_shift: FloatArray, cost: StepCostLaw,
                         kv_context: float, draft_s: float) -> IntArray:
    """The verify budgets of a block of steady steps: shape (steps, requests).

    ``head`` holds the requests' head logits over the window, ``step_shift`` the (steps,
    requests) step shifts. Per step the survivals of every (request, position) are ranked
    and the budget keeps the prefix that maximises expected emitted tokens per step time, as
    the single-step rule does; a request verifies its entries at or above the last kept
    value. The KV-read term of the candidate step times is taken at the block's start
    (``kv_context``): it shifts every candidate's time by the same small amount.
    """
    rows, window = head.shape
    steps = step_shift.shape[0]
    survival = _confidence_survival(head[None, :, :], step_shift[:, :, None])
    cells = rows * window
    ranked = np.sort(survival.reshape(steps, cells), axis=1)[:, ::-1]
    gains = np.zeros((steps, cells + 1))
    ranked.cumsum(axis=1, out=gains[:, 1:])
    times = cost.target_range(rows, cells + 1, kv_context, 0.0, kv_context / rows) + draft_s
    best = ((rows + gains) / times[None, :]).argmax(axis=1)
    threshold = np.where(best > 0, ranked[np.arange(steps), np.maximum(best - 1, 0)], np.inf)
    return _count_at_least(survival, threshold[:, None, None])
