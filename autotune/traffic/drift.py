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

from autotune.types import Request

__all__ = ["REFERENCE_SIZE", "Drift", "compare", "reference"]

REFERENCE_SIZE = 512
FEATURES = ("prompt_tokens", "output_tokens", "predicted_tokens_per_step")


def _features(requests: Sequence[Request]) -> dict[str, np.ndarray]:
    prompt = np.array([r.prompt_tokens for r in requests], dtype=np.float64)
    output = np.array([r.output_tokens for r in requests], dtype=np.float64)
    predicted = np.array([1.0 + float(np.cumprod(r.acceptance).sum())
                          for r in requests if r.acceptance], dtype=np.float64)
    return {"prompt_tokens": prompt, "output_tokens": output,
            "predicted_tokens_per_step": predicted}


def _rate(requests: Sequence[Request]) -> float | None:
    times = [r.arrival_s for r in requests if r.arrival_s is not None]
    if len(times) < 2:
        return None
    span = max(times) - min(times)
    return (len(times) - 1) / span if span > 0 else None


def reference(requests: Sequence[Request], seed: int = 0) -> dict[str, Any]:
    """The JSON-ready reference kept with a recorded sample's workload."""
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {"requests": len(requests), "arrival_rate_per_s": _rate(requests)}
    for name, values in _features(requests).items():
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


def compare(workload: str, requests: Sequence[Request], ref: Mapping[str, Any], *,
            alpha: float = 0.01, min_effect: float = 0.1,
            rate_tolerance: float = 0.25) -> Drift:
    """Compare a workload's new requests with the reference of the sample it was tuned on."""
    from scipy.stats import ks_2samp

    reasons: list[str] = []
    tests: dict[str, dict[str, float]] = {}
    new = _features(requests)
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
    old_rate, new_rate = ref.get("arrival_rate_per_s"), _rate(requests)
    if old_rate and new_rate:
        change = new_rate / old_rate - 1.0
        tests["arrival_rate"] = {"statistic": change, "pvalue": float("nan")}
        if abs(change) > rate_tolerance:
            reasons.append(f"arrival rate {old_rate:.3g}/s → {new_rate:.3g}/s "
                           f"({change:+.0%})")
    return Drift(workload, bool(reasons), reasons, tests)
