"""Per-workload summaries of a sample (what `autotune traffic inspect` prints).

Computed from :class:`~autotune.traffic.columns.RequestColumns` (token counts, arrival times and
acceptance predictions as compact arrays, ~100 bytes a request), so a million-request sample
is summarised in one streaming pass at a fraction of the memory its request objects would take.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from autotune.traffic.columns import RequestColumns, collect_columns
from autotune.types import Request

__all__ = ["UNLABELLED", "WorkloadSummary", "summarize", "summarize_columns"]

#: Workload name of requests that carry no label (before automatic grouping).
UNLABELLED = "default"


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


def _quantiles(values: npt.NDArray[np.int64]) -> dict[str, float]:
    p50, p90, p99 = np.quantile(values, [0.5, 0.9, 0.99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99),
            "mean": float(values.mean())}


def _finish(name: str, cols: RequestColumns, rows: npt.NDArray[np.bool_]) -> WorkloadSummary:
    rate = burst = None
    arrivals = cols.arrival_s[rows]
    arrivals = np.sort(arrivals[~np.isnan(arrivals)])  # in time order, whatever the file's
    if len(arrivals) > 1:
        gaps = np.diff(arrivals)
        span = float(arrivals[-1] - arrivals[0])
        rate = len(gaps) / span if span > 0 else math.inf
        mean = float(gaps.mean())
        # Coefficient of variation of inter-arrival gaps: 1 for Poisson, > 1 bursty.
        burst = float(gaps.std()) / mean if mean > 0 else None
    index = np.flatnonzero(rows)
    lengths = cols.acceptance_lengths()[index]
    sums = np.zeros(int(lengths.max(initial=0)))
    counts = np.zeros(len(sums), dtype=np.int64)
    for n in np.unique(lengths[lengths > 0]):
        same = index[lengths == n]
        for _, block in cols.predictions(same, int(n)):
            sums[:n] += block.sum(axis=0)
        counts[:n] += len(same)
    mean_acc = tuple(float(sm / c) for sm, c in zip(sums, counts, strict=True) if c)
    return WorkloadSummary(
        workload=name,
        requests=int(rows.sum()),
        prompt_tokens=_quantiles(cols.prompt_tokens[rows]),
        output_tokens=_quantiles(cols.output_tokens[rows]),
        arrival_rate_per_s=rate,
        burstiness=burst,
        with_acceptance=int((lengths > 0).sum()),
        mean_acceptance=mean_acc,
    )


def summarize_columns(cols: RequestColumns, *, total: bool = True) -> list[WorkloadSummary]:
    """One summary per workload (sorted by name), plus ``all`` when ``total`` and >1 workload.

    Unlabelled requests are summarised as ``default``.
    """
    if not len(cols):
        return []
    names = [*cols.names, UNLABELLED]  # code -1 picks the last
    per: dict[str, npt.NDArray[np.bool_]] = {}
    for code in np.unique(cols.workload):
        rows = cols.workload == code
        name = names[code]
        per[name] = per[name] | rows if name in per else rows
    out = [_finish(name, cols, per[name]) for name in sorted(per)]
    if total and len(per) > 1:
        out.append(_finish("all", cols, np.ones(len(cols), dtype=bool)))
    return out


def summarize(requests: Iterable[Request], *, total: bool = True) -> list[WorkloadSummary]:
    """One summary per workload (sorted by name), plus ``all`` when ``total`` and >1 workload."""
    return summarize_columns(collect_columns(requests), total=total)
