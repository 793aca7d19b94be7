"""Has a workload's traffic changed since its recommendation was tuned?

Each recorded sample keeps, per workload, a *reference*: a seeded subsample (at most
``REFERENCE_SIZE`` values) of prompt lengths, output lengths and predicted tokens per verify
step, plus its arrival rate. A new sample drifts from it when a two-sample Kolmogorov–Smirnov
test (scipy) rejects equality at ``alpha`` *and* the shift is large enough to matter (KS
statistic ≥ ``min_effect``; with thousands of requests, trivial shifts are "significant"), or
when the arrival rate moved by more than ``rate_tolerance`` (relative).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from autotune.traffic.columns import RequestColumns
from autotune.types import Request

__all__ = ["REFERENCE_SIZE", "Drift", "WorkloadFeatures", "compare", "reference"]

REFERENCE_SIZE = 512
FEATURES = ("prompt_tokens", "output_tokens", "predicted_tokens_per_step")


@dataclass(frozen=True)
class WorkloadFeatures:
    """What drift is judged on, for every request of a workload: prompt and output lengths,
    predicted tokens per verify step (requests with predictions only), and the arrival rate."""

    count: int
    values: Mapping[str, np.ndarray]
    arrival_rate_per_s: float | None

    @classmethod
    def of_requests(cls, requests: Sequence[Request]) -> WorkloadFeatures:
        prompt = np.array([r.prompt_tokens for r in requests], dtype=np.float64)
        output = np.array([r.output_tokens for r in requests], dtype=np.float64)
        predicted = np.array([1.0 + float(np.cumprod(r.acceptance).sum())
                              for r in requests if r.acceptance], dtype=np.float64)
        times = [r.arrival_s for r in requests if r.arrival_s is not None]
        span = max(times) - min(times) if len(times) > 1 else 0.0
        return cls(len(requests), {"prompt_tokens": prompt, "output_tokens": output,
                                   "predicted_tokens_per_step": predicted},
                   (len(times) - 1) / span if span > 0 else None)

    @classmethod
    def of_columns(cls, cols: RequestColumns, rows: npt.NDArray[np.int64]) -> WorkloadFeatures:
        lengths = cols.acceptance_lengths()[rows]
        with_curve = rows[lengths > 0]
        lengths = lengths[lengths > 0]
        predicted = np.empty(len(with_curve))
        for n in np.unique(lengths):
            same = np.flatnonzero(lengths == n)
            for start, block in cols.predictions(with_curve[same], int(n)):
                predicted[same[start:start + len(block)]] = 1.0 + np.cumprod(block, axis=1).sum(
                    axis=1)
        times = cols.arrival_s[rows]
        times = times[~np.isnan(times)]
        span = float(times.max() - times.min()) if len(times) > 1 else 0.0
        return cls(len(rows), {"prompt_tokens": cols.prompt_tokens[rows].astype(np.float64),
                               "output_tokens": cols.output_tokens[rows].astype(np.float64),
                               "predicted_tokens_per_step": predicted},
                   (len(times) - 1) / span if span > 0 else None)


def _features_of(requests: Sequence[Request] | WorkloadFeatures) -> WorkloadFeatures:
    if isinstance(requests, WorkloadFeatures):
        return requests
    return WorkloadFeatures.of_requests(requests)


def reference(requests: Sequence[Request] | WorkloadFeatures, seed: int = 0) -> dict[str, Any]:
    """The JSON-ready reference kept with a recorded sample's workload."""
    features = _features_of(requests)
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {"requests": features.count,
                           "arrival_rate_per_s": features.arrival_rate_per_s}
    for name in FEATURES:
        values = features.values[name]
        if values.size > REFERENCE_SIZE:
            values = rng.choice(values, REFERENCE_SIZE, replace=False)
        out[name] = [round(float(v), 4) for v in np.sort(values)]
    return out


@dataclass(frozen=True)
class Drift:
    """The verdict for one workload, with the evidence."""

    workload: str
    drifted: bool
    reasons: list[str] = field(default_factory=list)
    tests: dict[str, dict[str, float]] = field(default_factory=dict)

    def explain(self) -> str:
        if self.drifted:
            return "drifted: " + "; ".join(self.reasons)
        parts = [f"{k} KS={v['statistic']:.3f} p={v['pvalue']:.2g}"
                 for k, v in self.tests.items() if k != "arrival_rate"]
        if "arrival_rate" in self.tests:
            parts.append(f"arrival rate {self.tests['arrival_rate']['statistic']:+.0%}")
        return "not drifted (" + ", ".join(parts) + ")"


def compare(workload: str, requests: Sequence[Request] | WorkloadFeatures,
            ref: Mapping[str, Any], *,
            alpha: float = 0.01, min_effect: float = 0.1,
            rate_tolerance: float = 0.25) -> Drift:
    """Compare a workload's new requests with the reference of the sample it was tuned on."""
    from scipy.stats import ks_2samp

    reasons: list[str] = []
    tests: dict[str, dict[str, float]] = {}
    features = _features_of(requests)
    new = features.values
    for name in FEATURES:
        old = np.asarray(ref.get(name) or [], dtype=np.float64)
        cur = new[name]
        if old.size < 2 or cur.size < 2:
            if (old.size == 0) != (cur.size == 0):
                reasons.append(f"{name} present in only one of the samples")
            continue
        with warnings.catch_warnings():  # "exact calculation unsuccessful": asymptotic is fine
            warnings.simplefilter("ignore", RuntimeWarning)
            res = ks_2samp(old, cur)
        stat, p = float(res.statistic), float(res.pvalue)
        tests[name] = {"statistic": stat, "pvalue": p}
        if p < alpha and stat >= min_effect:
            reasons.append(f"{name} distribution moved (KS={stat:.3f}, p={p:.2g}; median "
                           f"{np.median(old):.4g} → {np.median(cur):.4g})")
    old_rate, new_rate = ref.get("arrival_rate_per_s"), features.arrival_rate_per_s
    if old_rate and new_rate:
        change = new_rate / old_rate - 1.0
        tests["arrival_rate"] = {"statistic": change, "pvalue": float("nan")}
        if abs(change) > rate_tolerance:
            reasons.append(f"arrival rate {old_rate:.3g}/s → {new_rate:.3g}/s "
                           f"({change:+.0%})")
    return Drift(workload, bool(reasons), reasons, tests)
