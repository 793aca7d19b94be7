"""Replicas and GPUs for a rate at a measured capacity, and how far to trust the count.

The count is the fewest replicas whose share of the rate, with headroom, is within the capacity
measured: ``ceil(rate × (1 + headroom) / capacity_low)``. The capacity lies somewhere between
the rate met (``capacity_low``) and the rate missed (``capacity_high``); when the count at the
high end is smaller, the count **flips inside the interval**: the readings cannot tell which
of the two is enough. The probability that the SLO holds is that of each replica at its share
of the rate (without headroom), by the one rule the recommendations use
(:func:`~autotune.recommend.feasibility.slo_probability`, on every reading of the config).
A rate above the fastest any replay of the traffic ran at lies **outside what was measured**:
the count then assumes replicas add capacity linearly, which no reading checked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from autotune.plan.measured import MeasuredCapacity
from autotune.recommend.feasibility import slo_probability
from autotune.slo import Slo

__all__ = ["Sizing", "replicas_for", "size_for"]


def replicas_for(rate_per_s: float, capacity_per_s: float, headroom: float) -> int:
    """The fewest replicas each serving at most ``capacity_per_s / (1 + headroom)``."""
    if capacity_per_s <= 0:
        raise ValueError(f"capacity must be positive, got {capacity_per_s}")
    # a hair of tolerance so a rate exactly at a multiple of the capacity is not one more
    return max(1, math.ceil(rate_per_s * (1 + headroom) / capacity_per_s - 1e-9))


@dataclass(frozen=True)
class Sizing:
    """One config at one planned rate: replicas, GPUs, and how far the count holds."""

    rate_per_s: float
    replicas: int
    replicas_if_high: int  # the count if the capacity is at the top of its interval
    gpus: int
    gpus_if_high: int
    probability: float | None  # that the SLO holds with ``replicas`` at ``rate_per_s``
    outside_measured: bool

    @property
    def flips(self) -> bool:
        return self.replicas_if_high != self.replicas

    def notes(self) -> list[str]:
        out = []
        if self.flips:
            out.append(f"flips inside the interval: {self.replicas_if_high} replica(s) if the "
                       "capacity is at the top of its interval")
        if self.outside_measured:
            out.append("outside what was measured: no replay ran this fast; the count assumes "
                       "replicas add capacity linearly")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"rate_per_s": self.rate_per_s, "replicas": self.replicas,
                "replicas_if_capacity_high": self.replicas_if_high, "gpus": self.gpus,
                "gpus_if_capacity_high": self.gpus_if_high,
                "slo_probability": self.probability, "flips": self.flips,
                "outside_measured": self.outside_measured, "notes": self.notes()}


def size_for(rate_per_s: float, capacity: MeasuredCapacity, headroom: float,
             gpus_per_replica: int, slo: Slo) -> Sizing:
    """The deployment of ``capacity``'s config that serves ``rate_per_s`` (see module doc)."""
    n = replicas_for(rate_per_s, capacity.low_per_s, headroom)
    n_high = replicas_for(rate_per_s, capacity.high_per_s, headroom)
    per_replica = rate_per_s / n / capacity.per_scale_per_s  # in the readings' time-scale
    return Sizing(rate_per_s=rate_per_s, replicas=n, replicas_if_high=n_high,
                  gpus=n * gpus_per_replica, gpus_if_high=n_high * gpus_per_replica,
                  probability=slo_probability(list(capacity.readings), slo, per_replica),
                  outside_measured=rate_per_s > capacity.covered_per_s * (1 + 1e-9))
