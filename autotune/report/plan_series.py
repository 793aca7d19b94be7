"""The plan's figure as plain series: GPUs against traffic rate (no plotting here).

Per planned workload: the GPUs the recommended and the baseline configs need at every rate from
near 0 to past the largest growth factor, at the low end of each capacity interval (the counts
the plan gives) and at its high end (the band between them is where the count flips inside the
interval); then, for all workloads together, the GPUs split by workload (each workload at the
same multiple of its rate) against each shared config read on the mixed sample. Every count is
:func:`~autotune.plan.replicas_for` × GPUs per replica, the rule the plan itself uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autotune.plan import MeasuredCapacity, Plan, replicas_for

__all__ = ["GpuCurve", "PlanPanel", "plan_panels"]

#: Points per curve; the x axis runs to this much past the largest growth factor.
POINTS, PAST = 240, 1.25


@dataclass(frozen=True)
class GpuCurve:
    """GPUs at each rate: at the capacities' low end (the plan's count) and high end."""

    label: str  # the legend's: one per kind (a shared config's names it)
    kind: str  # recommended | baseline | split | shared
    detail: str  # the config, for hover
    rates: tuple[float, ...]
    gpus: tuple[int, ...]
    gpus_if_high: tuple[int, ...]
    capacity: tuple[float, float] | None  # req/s per replica: (low, high); None for split


@dataclass(frozen=True)
class PlanPanel:
    """One subplot: a workload (or every workload, split against shared)."""

    title: str
    planned: tuple[tuple[float, float], ...]  # (growth factor, rate planned for)
    curves: tuple[GpuCurve, ...]


def _grid(top: float) -> list[float]:
    return [top * (i + 1) / POINTS for i in range(POINTS)]


def _curve(label: str, kind: str, rates: Sequence[float], c: MeasuredCapacity,
           headroom: float, gpr: int) -> GpuCurve:
    return GpuCurve(label, kind, c.config.short(), tuple(rates),
                    tuple(replicas_for(r, c.low_per_s, headroom) * gpr for r in rates),
                    tuple(replicas_for(r, c.high_per_s, headroom) * gpr for r in rates),
                    (c.low_per_s, c.high_per_s))


def _summed(rates: Sequence[float], parts: Sequence[Callable[[float], tuple[int, int]]]
            ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    pairs = [[p(r) for p in parts] for r in rates]
    return (tuple(sum(a for a, _ in row) for row in pairs),
            tuple(sum(b for _, b in row) for row in pairs))


def plan_panels(plan: Plan) -> list[PlanPanel]:
    """The figure's panels (see module doc)."""
    s = plan.settings
    h, gpr, top = s.headroom, s.gpus_per_replica, max(s.growth) * PAST
    panels = []
    for w in plan.planned:
        assert w.rates is not None and w.recommended is not None
        rate = w.rates.planned_per_s
        rates = _grid(rate * top)
        curves = [_curve("recommended config", "recommended", rates, w.recommended, h, gpr)]
        if w.baseline is not None:
            curves.append(_curve("baseline config", "baseline", rates, w.baseline, h, gpr))
        panels.append(PlanPanel(w.workload, tuple((k, rate * k) for k in s.growth),
                                tuple(curves)))
    shared = plan.shared
    if shared is None or not plan.planned:
        return panels
    total = shared.rates.planned_per_s
    factors = _grid(top)
    rates = [total * f for f in factors]
    parts: list[Callable[[float], tuple[int, int]]] = []
    for w in plan.planned:
        assert w.rates is not None and w.recommended is not None
        own, c = w.rates.planned_per_s, w.recommended

        def part(f: float, own: float = own, c: MeasuredCapacity = c) -> tuple[int, int]:
            return (replicas_for(own * f, c.low_per_s, h) * gpr,
                    replicas_for(own * f, c.high_per_s, h) * gpr)
        parts.append(part)
    low, high = _summed(factors, parts)
    curves = [GpuCurve("split by workload (recommended configs)", "split",
                       "each workload on its recommended config", tuple(rates), low, high,
                       None)]
    for o in shared.options:
        if o.capacity is not None:
            curves.append(_curve(f"shared {o.config.short()}", "shared", rates, o.capacity, h,
                                 gpr))
    panels.append(PlanPanel("all workloads: split or shared",
                            tuple((k, total * k) for k in s.growth), tuple(curves)))
    return panels
