"""Acceptance curves from the DSpark confidence head's per-request predictions (docs/search.md).

Each request carries conditional probabilities c_1..c_m. Its survival is s_k = c_1·…·c_k and
its expected tokens per verify step with window n is 1 + Σ_{k≤n} s_k. A workload's curve is the
mean of per-request survivals — not the survival of the mean c_k, which misstates mixed
traffic (by Jensen it understates it when requests differ: mean(c^k) ≥ mean(c)^k).

Two averages matter and differ on mixed traffic:

- the *request* average E_n = mean_i (1 + Σ_{k≤n} s_ik): what one request expects per step
  (:meth:`AcceptanceModel.curve`, with a confidence interval);
- the *draft* (step) average: vLLM's counters count one draft per verify step, and a request
  with low acceptance needs more steps, so the counters weight request i by its step count
  (O_i - 1) / E_i(n). :meth:`AcceptanceModel.draft_survival` predicts exactly what
  ``accepted_per_pos / drafts`` will read, and :meth:`AcceptanceModel.tokens_per_step` the
  throughput-relevant ratio Σ tokens / Σ steps.

A measurement at window N gives the curve for every n ≤ N for free (:func:`curve_from_counts`):
the acceptance of draft position k does not depend on how many positions follow it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from autotune.types import AcceptanceCounts, AcceptanceCurve, Request

__all__ = [
    "UNINFORMED_CONDITIONAL",
    "AcceptanceModel",
    "curve_from_counts",
    "curve_from_predictions",
    "prior_conditional",
    "survival_matrix",
]

FloatArray = npt.NDArray[np.float64]

#: The conditional acceptance assumed for requests that carry no prediction when no request of
#: the workload does, until a run measures the drafter's own counters (which then replace it:
#: autotune.acceptance.measured_conditional). A placeholder, not another model's curve.
UNINFORMED_CONDITIONAL = 0.6

_EPS = 1e-6


def prior_conditional(block: int) -> FloatArray:
    """:data:`UNINFORMED_CONDITIONAL` at every position."""
    return np.full(block, UNINFORMED_CONDITIONAL)


def survival_matrix(requests: Iterable[Request], block: int) -> FloatArray:
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


def _interval(per_request: FloatArray, z: float) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Mean over rows and a normal confidence interval of it, per column."""
    n = per_request.shape[0]
    mean = per_request.mean(axis=0)
    width = per_request.shape[1]
    se = per_request.std(axis=0, ddof=1) / math.sqrt(n) if n > 1 else np.zeros(width)
    return mean, mean - z * se, mean + z * se


@dataclass(frozen=True)
class AcceptanceModel:
    """Per-request conditional acceptance of one workload, aligned with its requests.

    ``conditional[i, k]`` is request i's probability that draft token k+1 is accepted given the
    earlier ones were; ``predicted[i]`` says whether it came from the request's own prediction
    (False: filled with the mean of the predicted requests, or the published prior when none
    has one). Short prediction lists continue with their last value. ``output_tokens`` weight
    the draft averages (a request drafts about once per emitted step).
    """

    conditional: FloatArray
    predicted: npt.NDArray[np.bool_]
    output_tokens: FloatArray

    @classmethod
    def from_requests(cls, requests: Sequence[Request], block: int) -> AcceptanceModel:
        """The model of ``requests`` over a draft block of ``block`` positions."""
        n = len(requests)
        cond = np.empty((n, block))
        have = np.zeros(n, dtype=bool)
        for i, r in enumerate(requests):
            if r.acceptance:
                m = min(block, len(r.acceptance))
                cond[i, :m] = r.acceptance[:m]
                cond[i, m:] = r.acceptance[m - 1]
                have[i] = True
        if have.any():
            # fill with the conditional of the mean survival (per-request curves averaged)
            surv = np.cumprod(cond[have], axis=1).mean(axis=0)
            prev = np.concatenate([[1.0], surv[:-1]])
            fill = np.divide(surv, prev, out=np.zeros_like(surv), where=prev > 0)
        else:
            fill = prior_conditional(block)
        cond[~have] = fill
        out = np.asarray([max(r.output_tokens, 1) for r in requests], dtype=np.float64)
        return cls(np.clip(cond, 0.0, 1.0), have, out)

    # -- shape ---------------------------------------------------------------------------------
    @property
    def block(self) -> int:
        return int(self.conditional.shape[1])

    @property
    def requests(self) -> int:
        return int(self.conditional.shape[0])

    @property
    def with_predictions(self) -> int:
        return int(self.predicted.sum())

    def with_conditional(self, conditional: FloatArray) -> AcceptanceModel:
        """The same requests with other conditionals (e.g. calibrated ones)."""
        if conditional.shape != self.conditional.shape:
            raise ValueError(f"conditional shape {conditional.shape} != "
                             f"{self.conditional.shape}")
        return replace(self, conditional=np.clip(conditional, 0.0, 1.0))

    # -- per request ---------------------------------------------------------------------------
    def survival(self) -> FloatArray:
        """(requests, block) prefix survival s_ik = c_i1·…·c_ik."""
        out: FloatArray = np.cumprod(self.conditional, axis=1, dtype=np.float64)
        return out

    def expected(self) -> FloatArray:
        """(requests, block) expected tokens per verify step: column n-1 holds window n."""
        out: FloatArray = 1.0 + np.cumsum(self.survival(), axis=1)
        return out

    def steps(self, n: int) -> FloatArray:
        """Decode steps each request needs at window n: (O_i - 1) / E_i(n), at least 1."""
        e = self.expected()[:, n - 1] if n > 0 else np.ones(self.requests)
        out: FloatArray = np.maximum(self.output_tokens - 1.0, 1.0) / e
        return out

    # -- workload averages ---------------------------------------------------------------------
    def curve(self, z: float = 1.96, *, only_predicted: bool = True) -> AcceptanceCurve:
        """The request-averaged curve with a normal CI of expected tokens for every window."""
        rows = self.predicted if only_predicted and self.predicted.any() else \
            np.ones(self.requests, dtype=bool)
        surv = self.survival()[rows]
        mean_surv = surv.mean(axis=0)
        prev = np.concatenate([[1.0], mean_surv[:-1]])
        conditional = np.divide(mean_surv, prev, out=np.zeros_like(mean_surv), where=prev > 0)
        expected, lo, hi = _interval(1.0 + np.cumsum(surv, axis=1), z)
        return AcceptanceCurve(
            conditional=tuple(float(c) for c in conditional),
            expected=tuple(float(e) for e in expected),
            expected_lo=tuple(float(e) for e in lo),
            expected_hi=tuple(float(e) for e in hi),
            samples=int(rows.sum()),
        )

    def draft_survival(self, n: int) -> FloatArray:
        """What ``accepted_per_pos[k] / drafts`` reads at window n (k < n): step-weighted."""
        w = self.steps(n)
        out: FloatArray = (w[:, None] * self.survival()[:, :n]).sum(axis=0) / w.sum()
        return out

    def draft_conditional(self, n: int) -> FloatArray:
        """Step-weighted conditional acceptance at positions 1..n (what counters imply)."""
        surv = self.draft_survival(n)
        prev = np.concatenate([[1.0], surv[:-1]])
        out: FloatArray = np.divide(surv, prev, out=np.zeros_like(surv), where=prev > 0)
        return out

    def tokens_per_step(self, n: int) -> float:
        """Σ tokens / Σ steps at window n: the mean accepted length the counters will show."""
        if n <= 0:
            return 1.0
        return float(1.0 + self.draft_survival(n).sum())


def curve_from_predictions(requests: Iterable[Request], block: int,
                           z: float = 1.96) -> AcceptanceCurve | None:
    """The workload's mean-survival curve with a normal CI of expected tokens per window.

    Only requests that carry predictions count; None when none does.
    """
    reqs = [r for r in requests if r.acceptance]
    if not reqs:
        return None
    return AcceptanceModel.from_requests(reqs, block).curve(z)


def curve_from_counts(counts: AcceptanceCounts, z: float = 1.96) -> AcceptanceCurve | None:
    """The measured curve of a run at window N, for every window n ≤ N, with a CI.

    Survival s_k = accepted_per_pos[k-1] / drafts; expected tokens at window n is
    1 + Σ_{k≤n} s_k. The interval treats drafts as independent: X_n = min(accepted, n) has
    E[X_n] = Σ_{k≤n} s_k and E[X_n²] = Σ_{k≤n} (2k-1) s_k, so its standard error is
    sqrt(Var X_n / drafts) (drafts of one request are correlated, so this is a lower bound).
    None without drafts. Runs whose windows were cut (adaptive verification, token budget:
    ``draft_tokens < N · drafts``) read low at the positions some drafts never verified.
    """
    if counts.drafts <= 0 or not counts.accepted_per_pos:
        return None
    d = float(counts.drafts)
    surv = np.minimum(np.asarray(counts.accepted_per_pos, dtype=np.float64) / d, 1.0)
    surv = np.minimum.accumulate(surv)
    k = np.arange(1, surv.size + 1, dtype=np.float64)
    mean_x = np.cumsum(surv)
    var_x = np.maximum(np.cumsum((2 * k - 1) * surv) - mean_x**2, 0.0)
    se = np.sqrt(var_x / d)
    prev = np.concatenate([[1.0], surv[:-1]])
    conditional = np.divide(surv, prev, out=np.zeros_like(surv), where=prev > _EPS)
    return AcceptanceCurve(
        conditional=tuple(float(c) for c in conditional),
        expected=tuple(float(1.0 + e) for e in mean_x),
        expected_lo=tuple(float(1.0 + e - z * s) for e, s in zip(mean_x, se, strict=True)),
        expected_hi=tuple(float(1.0 + e + z * s) for e, s in zip(mean_x, se, strict=True)),
        samples=counts.drafts,
    )
