"""Acceptance curves from the DSpark confidence head's per-request predictions (DESIGN §6).

Each request carries conditional probabilities c_1..c_m. Its survival is s_k = c_1·…·c_k and
its expected tokens per verify step with window n is 1 + Σ_{k≤n} s_k. A workload's curve is the
mean of per-request survivals — not the survival of mean c_k, which overstates mixed traffic.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from autotune.types import AcceptanceCurve, Request

__all__ = ["curve_from_predictions", "survival_matrix"]


def survival_matrix(requests: Iterable[Request], block: int) -> np.ndarray:
    """Rows: requests with predictions; columns: survival s_1..s_block (0 past a short list)."""
    rows = []
    for r in requests:
        if not r.acceptance:
            continue
        c = np.zeros(block)
        m = min(block, len(r.acceptance))
        c[:m] = r.acceptance[:m]
        rows.append(np.cumprod(c))
    return np.array(rows, dtype=np.float64).reshape(len(rows), block)


def curve_from_predictions(requests: Iterable[Request], block: int,
                           z: float = 1.96) -> AcceptanceCurve | None:
    """The workload's mean-survival curve with a normal CI of expected tokens per window.

    None when no request carries predictions.
    """
    surv = survival_matrix(requests, block)
    if surv.shape[0] == 0:
        return None
    mean_surv = surv.mean(axis=0)
    prev = np.concatenate([[1.0], mean_surv[:-1]])
    conditional = np.divide(mean_surv, prev, out=np.zeros_like(mean_surv), where=prev > 0)
    per_request_expected = 1.0 + np.cumsum(surv, axis=1)
    expected = per_request_expected.mean(axis=0)
    n = surv.shape[0]
    se = per_request_expected.std(axis=0, ddof=1) / np.sqrt(n) if n > 1 else np.zeros(block)
    return AcceptanceCurve(
        conditional=tuple(float(c) for c in conditional),
        expected=tuple(float(e) for e in expected),
        expected_lo=tuple(float(e) for e in expected - z * se),
        expected_hi=tuple(float(e) for e in expected + z * se),
        samples=n,
    )
