"""Per-workload summaries of a sample (what `autotune traffic inspect` prints).

One streaming pass: token counts go into compact arrays (for quantiles), arrival gaps and
acceptance predictions into running sums, so a million-request sample stays small in memory.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.types import Request

__all__ = ["UNLABELLED", "WorkloadSummary", "summarize"]

#: Workload name of requests that carry no label (before automatic grouping).
UNLABELLED = "default"


@dataclass
class _Acc:
    prompt: array = field(default_factory=lambda: array("q"))
    output: array = field(default_factory=lambda: array("q"))
    first_arrival: float | None = None
    last_arrival: float | None = None
    gaps: int = 0
    gap_sum: float = 0.0
    gap_sq: float = 0.0
    acc_sum: list[float] = field(default_factory=list)
    acc_n: list[int] = field(default_factory=list)
    with_acceptance: int = 0

    def add(self, r: Request) -> None:
        self.prompt.append(r.prompt_tokens)
        self.output.append(r.output_tokens)
        if r.arrival_s is not None:
            if self.last_arrival is not None:
                gap = max(0.0, r.arrival_s - self.last_arrival)
                self.gaps += 1
                self.gap_sum += gap
                self.gap_sq += gap * gap
            if self.first_arrival is None:
                self.first_arrival = r.arrival_s
            self.last_arrival = r.arrival_s
        if r.acceptance:
            self.with_acceptance += 1
            while len(self.acc_sum) < len(r.acceptance):
                self.acc_sum.append(0.0)
                self.acc_n.append(0)
            for k, c in enumerate(r.acceptance):
                self.acc_sum[k] += c
                self.acc_n[k] += 1


@dataclass(frozen=True)
class WorkloadSummary:
    """What a workload looks like: size, lengths, arrivals, predicted acceptance."""

    workload: str
    requests: int
    prompt_tokens: dict[str, float]
    output_tokens: dict[str, float]
    arrival_rate_per_s: float | None
    burstiness: float | None
    with_acceptance: int
    mean_acceptance: tuple[float, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "arrival_rate_per_s": self.arrival_rate_per_s,
            "burstiness": self.burstiness,
            "requests_with_acceptance": self.with_acceptance,
            "mean_predicted_acceptance": [round(c, 4) for c in self.mean_acceptance],
        }


def _quantiles(values: array) -> dict[str, float]:
    arr = np.frombuffer(values, dtype=np.int64)
    p50, p90, p99 = np.quantile(arr, [0.5, 0.9, 0.99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(arr.mean())}


def _finish(name: str, acc: _Acc) -> WorkloadSummary:
    rate = burst = None
    if acc.gaps and acc.last_arrival is not None and acc.first_arrival is not None:
        span = acc.last_arrival - acc.first_arrival
        rate = acc.gaps / span if span > 0 else math.inf
        mean = acc.gap_sum / acc.gaps
        var = max(0.0, acc.gap_sq / acc.gaps - mean * mean)
        # Coefficient of variation of inter-arrival gaps: 1 for Poisson, > 1 bursty.
        burst = math.sqrt(var) / mean if mean > 0 else None
    mean_acc = tuple(s / n for s, n in zip(acc.acc_sum, acc.acc_n, strict=True) if n)
    return WorkloadSummary(
        workload=name,
        requests=len(acc.prompt),
        prompt_tokens=_quantiles(acc.prompt),
        output_tokens=_quantiles(acc.output),
        arrival_rate_per_s=rate,
        burstiness=burst,
        with_acceptance=acc.with_acceptance,
        mean_acceptance=mean_acc,
    )


def summarize(requests: Iterable[Request], *, total: bool = True) -> list[WorkloadSummary]:
    """One summary per workload (sorted by name), plus ``all`` when ``total`` and >1 workload."""
    per: dict[str, _Acc] = {}
    everything = _Acc()
    for r in requests:
        per.setdefault(r.workload or UNLABELLED, _Acc()).add(r)
        if total:
            everything.add(r)
    out = [_finish(name, per[name]) for name in sorted(per)]
    if total and len(per) > 1:
        out.append(_finish("all", everything))
    return out
