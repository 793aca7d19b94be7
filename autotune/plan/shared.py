"""Split or shared: each workload on its own replicas and config, or all on one config.

Routing each workload to its own replicas lets each run its best config; one shared deployment
serves the mixed traffic on one config, and its peaks need not coincide with each workload's.
Which needs fewer GPUs is measured, not assumed: the mixed sample (every workload's replayed
requests together, in arrival order) is read at capacity on each candidate config (each
workload's recommended config, once each) and sized like a workload. When the two GPU counts'
ranges (each count from the capacity's low to its high end) overlap, the difference is within
the readings' noise and the comparison says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.plan.measured import MeasuredCapacity
from autotune.plan.rates import Rates
from autotune.plan.sizing import Sizing
from autotune.types import TrialConfig

__all__ = ["SharedOption", "SplitOrShared", "SplitShareRow", "split_or_shared_rows"]


@dataclass(frozen=True)
class SharedOption:
    """One candidate shared config: its capacity on the mixed sample (or why none), and its
    sizing per growth factor."""

    config: TrialConfig
    capacity: MeasuredCapacity | None
    why_not: str  # "" when it has a capacity
    sizings: tuple[Sizing, ...]  # one per growth factor

    def as_dict(self) -> dict[str, Any]:
        return {"config": self.config.as_dict(),
                "capacity": self.capacity.as_dict() if self.capacity else None,
                "left_out": self.why_not or None,
                "sizings": [s.as_dict() for s in self.sizings]}


@dataclass(frozen=True)
class SplitShareRow:
    """At one growth factor: GPUs split by workload against the best shared config."""

    growth: float
    split_gpus: int
    split_gpus_if_high: int
    shared: SharedOption | None
    shared_sizing: Sizing | None
    verdict: str
    unit: str = "GPUs"  # what the counts count: GPUs, or replicas when a replica takes none

    @property
    def fewer(self) -> str:
        """``split``, ``shared``, ``same`` or ``within noise`` (or ``unknown``)."""
        s = self.shared_sizing
        if s is None:
            return "unknown"
        if s.gpus == self.split_gpus:
            return "same"
        overlap = (min(s.gpus, s.gpus_if_high) <= self.split_gpus
                   and min(self.split_gpus, self.split_gpus_if_high) <= s.gpus)
        if overlap:
            return "within noise"
        return "shared" if s.gpus < self.split_gpus else "split"

    def as_dict(self) -> dict[str, Any]:
        return {"growth": self.growth, "split_gpus": self.split_gpus,
                "split_gpus_if_capacity_high": self.split_gpus_if_high,
                "shared_config": self.shared.config.as_dict() if self.shared else None,
                "shared_gpus": self.shared_sizing.gpus if self.shared_sizing else None,
                "shared_gpus_if_capacity_high": (self.shared_sizing.gpus_if_high
                                                 if self.shared_sizing else None),
                "unit": self.unit, "fewer": self.fewer, "verdict": self.verdict}


@dataclass(frozen=True)
class SplitOrShared:
    """The comparison: the mixed traffic's rates, every candidate, and one row per growth."""

    rates: Rates
    options: tuple[SharedOption, ...]
    rows: tuple[SplitShareRow, ...]
    note: str  # why the comparison is partial or missing ("" when whole)

    def as_dict(self) -> dict[str, Any]:
        return {"rates": self.rates.as_dict(), "options": [o.as_dict() for o in self.options],
                "rows": [r.as_dict() for r in self.rows], "note": self.note or None}


def _verdict(row_split: int, row_split_high: int, option: SharedOption, sizing: Sizing,
             growth: float, unit: str) -> str:
    probe = SplitShareRow(growth, row_split, row_split_high, option, sizing, "")
    fewer = probe.fewer
    shared = f"shared on {option.config.short()}: {sizing.gpus} {unit}"
    split = f"split by workload: {row_split} {unit}"
    if fewer == "same":
        return f"{split}, {shared}: the same"
    if fewer == "within noise":
        return (f"{split}, {shared}: within noise (the counts' ranges over the capacity "
                f"intervals overlap: split {min(row_split, row_split_high)}-{row_split}, "
                f"shared {min(sizing.gpus, sizing.gpus_if_high)}-{sizing.gpus})")
    diff = abs(row_split - sizing.gpus)
    return f"{split}, {shared}: {fewer} needs {diff} fewer {unit}"


def split_or_shared_rows(growth: Sequence[float], split: Sequence[tuple[int, int]],
                         options: Sequence[SharedOption], unit: str = "GPUs"
                         ) -> tuple[SplitShareRow, ...]:
    """One row per growth factor: ``split[i]`` is (GPUs, GPUs at the capacities' high end)
    summed over the workloads at ``growth[i]``; the shared side is the option needing the
    fewest GPUs there (ties: the larger capacity). With ``unit`` "replicas" (a replica takes
    no GPU) the options' sizings and ``split`` count replicas instead."""
    rows = []
    for i, k in enumerate(growth):
        gpus, gpus_high = split[i]
        sized = [(o, o.sizings[i]) for o in options if o.capacity is not None]
        if not sized:
            rows.append(SplitShareRow(k, gpus, gpus_high, None, None,
                                      "no shared config was read at capacity", unit))
            continue
        option, sizing = min(sized, key=lambda p: (p[1].gpus, -(p[0].capacity.low_per_s
                                                                if p[0].capacity else 0.0)))
        rows.append(SplitShareRow(k, gpus, gpus_high, option, sizing,
                                  _verdict(gpus, gpus_high, option, sizing, k, unit), unit))
    return tuple(rows)
