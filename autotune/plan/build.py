"""The capacity plan: replicas and GPUs per workload, for the recommended and the baseline
configs, at the sample's peak and its growth, and split against shared.

:func:`build_plan` takes what was measured (per workload: its arrival times, the recommended
and the baseline config's capacity readings; the mixed sample's readings) and the settings
(headroom, growth factors, peak window, GPUs per replica) and sizes every deployment with
:func:`~autotune.plan.sizing.size_for`. The headline is the GPUs (and replicas) the recommended
configs save against the baseline at the planned rate. A workload whose SLO its recommended
config meets at no rate, or that was never measured, is left out with the reason; a baseline
that meets the SLO at no rate is said so, and its workload left out of the saving.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.errors import PlanError
from autotune.plan.measured import MeasuredCapacity
from autotune.plan.rates import Rates, traffic_rates
from autotune.plan.shared import SharedOption, SplitOrShared, split_or_shared_rows
from autotune.plan.sizing import Sizing, size_for
from autotune.slo import Slo
from autotune.types import TrialConfig

__all__ = ["Plan", "PlanSettings", "SharedInput", "WorkloadInput", "WorkloadPlan",
           "build_plan", "check_settings"]


@dataclass(frozen=True)
class PlanSettings:
    """How to size: headroom, growth factors, the peak window (None: the default), the GPUs
    one replica takes, the SLO; ``sources`` names the flag or key each came from (errors)."""

    headroom: float
    growth: tuple[float, ...]
    peak_window_s: float | None
    gpus_per_replica: int
    slo: Slo
    headroom_source: str = "plan.headroom"
    growth_source: str = "plan.growth"
    window_source: str = "plan.peak_window"

    def as_dict(self) -> dict[str, Any]:
        return {"headroom": self.headroom, "growth": list(self.growth),
                "peak_window_s": self.peak_window_s, "gpus_per_replica": self.gpus_per_replica,
                "slo": {"ttft_p99_ms": self.slo.ttft_p99_ms, "itl_p99_ms": self.slo.itl_p99_ms}}


def check_settings(settings: PlanSettings) -> None:
    """PlanError naming the flag or key of a headroom or growth factor that is not a positive
    number."""
    h = settings.headroom
    if isinstance(h, bool) or not isinstance(h, int | float) or not math.isfinite(h) or h <= 0:
        raise PlanError(f"{settings.headroom_source}: headroom must be a positive number "
                        f"(0.1 = plan 10% above the rate), got {h!r}")
    if not settings.growth:
        raise PlanError(f"{settings.growth_source}: give at least one growth factor, e.g. 1")
    for k in settings.growth:
        if isinstance(k, bool) or not isinstance(k, int | float) or not math.isfinite(k) \
                or k <= 0:
            raise PlanError(f"{settings.growth_source}: growth factors must be positive "
                            f"numbers (2 = twice the traffic), got {k!r}")
    if settings.gpus_per_replica < 0:
        raise PlanError(f"serve.gpus_per_replica (or hardware.count) is "
                        f"{settings.gpus_per_replica}: give the GPUs one replica takes (0 for a "
                        "replica on CPUs)")


@dataclass(frozen=True)
class WorkloadInput:
    """What was measured for one workload: its replayed arrivals (seconds) and its configs'
    capacities, or why there is none (a string)."""

    name: str
    arrivals: tuple[float, ...]
    recommended: MeasuredCapacity | str
    baseline: MeasuredCapacity | str


@dataclass(frozen=True)
class SharedInput:
    """One candidate shared config read on the mixed sample (its capacity, or why none)."""

    config: TrialConfig
    capacity: MeasuredCapacity | str


@dataclass(frozen=True)
class WorkloadPlan:
    """One workload's plan; ``left_out`` is why it has none ("" when planned)."""

    workload: str
    rates: Rates | None
    recommended: MeasuredCapacity | None
    baseline: MeasuredCapacity | None
    recommended_sizing: tuple[Sizing, ...]  # one per growth factor
    baseline_sizing: tuple[Sizing, ...]  # empty when the baseline has no capacity
    left_out: str = ""
    baseline_note: str = ""

    @property
    def planned(self) -> bool:
        return not self.left_out

    def as_dict(self) -> dict[str, Any]:
        rec, base = self.recommended, self.baseline
        return {"workload": self.workload, "planned": self.planned,
                "left_out": self.left_out or None,
                "rates": self.rates.as_dict() if self.rates else None,
                "recommended": rec.as_dict() if rec else None,
                "recommended_trusted": (rec.trusted or None) if rec else None,
                "baseline": base.as_dict() if base else None,
                "baseline_note": self.baseline_note or None,
                "recommended_sizing": [s.as_dict() for s in self.recommended_sizing],
                "baseline_sizing": [s.as_dict() for s in self.baseline_sizing]}


def _replicas(n: int | None) -> str:
    return f"{n} replica" + ("" if n in (1, -1) else "s")


@dataclass(frozen=True)
class Plan:
    """A whole plan (see module doc)."""

    run_id: str
    backend: str
    settings: PlanSettings
    workloads: tuple[WorkloadPlan, ...]
    shared: SplitOrShared | None
    shared_note: str = ""  # why split or shared was not measured (when ``shared`` is None)

    @property
    def planned(self) -> list[WorkloadPlan]:
        return [w for w in self.workloads if w.planned]

    def totals(self, i: int) -> dict[str, int | None]:
        """At growth factor number ``i``: GPUs and replicas of the recommended configs, of
        the baseline (over the workloads whose baseline has a capacity), and the saving."""
        planned = self.planned
        rec_gpus = sum(w.recommended_sizing[i].gpus for w in planned)
        rec_replicas = sum(w.recommended_sizing[i].replicas for w in planned)
        both = [w for w in planned if w.baseline_sizing]
        base_gpus = sum(w.baseline_sizing[i].gpus for w in both)
        base_replicas = sum(w.baseline_sizing[i].replicas for w in both)
        same_rec = sum(w.recommended_sizing[i].gpus for w in both)
        same_rec_r = sum(w.recommended_sizing[i].replicas for w in both)
        return {"recommended_gpus": rec_gpus, "recommended_replicas": rec_replicas,
                "baseline_gpus": base_gpus if both else None,
                "baseline_replicas": base_replicas if both else None,
                "gpus_saved": base_gpus - same_rec if both else None,
                "replicas_saved": base_replicas - same_rec_r if both else None}

    def headline(self) -> str:
        """The GPUs the recommended configs save against the baseline, at growth 1 (or the
        first factor given), then at the other growth factors."""
        i = self.settings.growth.index(1.0) if 1.0 in self.settings.growth else 0
        head = self._saving(i)
        others = [f"×{k:g}: {self._saving(j, short=True)}"
                  for j, k in enumerate(self.settings.growth) if j != i]
        return head + (f" (at {', '.join(others)})" if others else "")

    def _saving(self, i: int, *, short: bool = False) -> str:
        t = self.totals(i)
        k = self.settings.growth[i]
        gpus = self.settings.gpus_per_replica > 0
        if t["gpus_saved"] is None:
            return ("no saving: no baseline meets the SLO at any rate measured" if short else
                    f"recommended configs: {t['recommended_gpus']} GPUs "
                    f"({_replicas(t['recommended_replicas'])})"
                    + ("" if k == 1 else f" at {k:g}× the traffic")
                    + "; no baseline meets the SLO at any rate measured, so no saving can be "
                      "stated")
        saved = (f"{t['gpus_saved']} GPUs saved ({_replicas(t['replicas_saved'])})" if gpus
                 else f"{_replicas(t['replicas_saved'])} saved")
        if short:
            return saved
        at = "" if k == 1 else f" at {k:g}× the traffic"
        partial = len([w for w in self.planned if w.baseline_sizing]) < len(self.planned)
        over = " (over the workloads the baseline can serve)" if partial else ""
        if not gpus:
            return (f"{saved}{at}: recommended configs {_replicas(t['recommended_replicas'])}, "
                    f"baseline {_replicas(t['baseline_replicas'])} (a replica takes no GPU: "
                    f"serve.gpus_per_replica is 0){over}")
        return (f"{saved}{at}: recommended configs {t['recommended_gpus']} GPUs, baseline "
                f"{t['baseline_gpus']} GPUs{over}")

    def as_dict(self) -> dict[str, Any]:
        return {"run": self.run_id, "backend": self.backend, "headline": self.headline(),
                "settings": self.settings.as_dict(),
                "totals": [{"growth": k, **self.totals(i)}
                           for i, k in enumerate(self.settings.growth)],
                "workloads": [w.as_dict() for w in self.workloads],
                "split_or_shared": self.shared.as_dict() if self.shared else None,
                "split_or_shared_note": None if self.shared else self.shared_note or None}


def _plan_workload(w: WorkloadInput, settings: PlanSettings) -> WorkloadPlan:
    rates = traffic_rates(w.arrivals, settings.peak_window_s, what=f"workload {w.name!r}",
                          key=settings.window_source)
    if isinstance(w.recommended, str):
        return WorkloadPlan(w.name, rates, None, None, (), (), left_out=w.recommended)
    rec = w.recommended.against(rates.planned_per_s)
    sizes = tuple(size_for(rates.planned_per_s * k, rec, settings.headroom,
                           settings.gpus_per_replica, settings.slo) for k in settings.growth)
    if isinstance(w.baseline, str):
        return WorkloadPlan(w.name, rates, rec, None, sizes, (),
                            baseline_note=f"baseline: {w.baseline}")
    baseline = w.baseline.against(rates.planned_per_s)
    base = tuple(size_for(rates.planned_per_s * k, baseline, settings.headroom,
                          settings.gpus_per_replica, settings.slo) for k in settings.growth)
    return WorkloadPlan(w.name, rates, rec, baseline, sizes, base)


def _shared(workloads: Sequence[WorkloadInput], plans: Sequence[WorkloadPlan],
            shared: Sequence[SharedInput], settings: PlanSettings) -> SplitOrShared | None:
    if not shared:
        return None
    mixed = [a for w in workloads for a in w.arrivals]
    rates = traffic_rates(mixed, settings.peak_window_s, what="the mixed sample",
                          key=settings.window_source)
    # a replica on CPUs takes no GPU: compare replicas then
    per, unit = (settings.gpus_per_replica, "GPUs") if settings.gpus_per_replica else \
        (1, "replicas")
    options = []
    for s in shared:
        if isinstance(s.capacity, str):
            options.append(SharedOption(s.config, None, s.capacity, ()))
            continue
        capacity = s.capacity.against(rates.planned_per_s)
        options.append(SharedOption(s.config, capacity, "", tuple(
            size_for(rates.planned_per_s * k, capacity, settings.headroom, per, settings.slo)
            for k in settings.growth)))
    missing = [p.workload for p in plans if not p.planned]
    split = [(sum(p.recommended_sizing[i].replicas * per for p in plans if p.planned),
              sum(p.recommended_sizing[i].replicas_if_high * per for p in plans if p.planned))
             for i in range(len(settings.growth))]
    note = (f"the split side leaves out {', '.join(missing)} (no plan), which the mixed "
            "sample includes: the split count is a lower bound" if missing else "")
    return SplitOrShared(rates, tuple(options),
                         split_or_shared_rows(settings.growth, split, options, unit), note)


def build_plan(workloads: Sequence[WorkloadInput], shared: Sequence[SharedInput],
               settings: PlanSettings, *, run_id: str, backend: str,
               shared_note: str = "") -> Plan:
    """The plan (see module doc); ``shared_note``: why no shared config was read, when none
    was. PlanError for a bad setting, a peak window longer than a workload's sample, or no
    workload the plan can size."""
    check_settings(settings)
    plans = tuple(_plan_workload(w, settings) for w in sorted(workloads, key=lambda w: w.name))
    if not any(p.planned for p in plans):
        why = "; ".join(f"{p.workload}: {p.left_out}" for p in plans) or "no workload measured"
        raise PlanError(f"run {run_id} has no workload a plan can size ({why}); tune with a "
                        "trace-mode policy whose SLO some config meets, then plan again")
    return Plan(run_id, backend, settings, plans, _shared(workloads, plans, shared, settings),
                shared_note)
