"""A config's measured capacity as a plan uses it: requests per second one replica sustains
within the SLO, with its interval, read from a trial's metrics.

A capacity reading (``autotune.orchestrate.capacity``) keeps the fastest time-scale that met
the SLO (``load_scale`` s: the sample sped up s×) and, when it read one, the slowest that
missed (``capacity_high_scale``): the true capacity lies between them. A reading without the
missed scale puts it within the resolution the search refined to above the scale met: what the
row recorded (``capacity_resolution_target``), else the resolution of the search that wrote it
(:func:`resolution_of`: 3% since the bracket-and-pin search, 2% before it).
``capacity_sustained`` says whether the rate met was a sustained rate or a burst the replica
drained (absent on older rows: unknown, and the plan says so).

**Units.** A reading replays the busiest slice of the sample that fits its window
(:mod:`~autotune.orchestrate.capacity_window`), so the rate the replica sustained, in requests
per second, is s × the slice's rate, which exceeds s × the sample's mean rate by how much
denser the slice is (``capacity_slice_rate_ratio``; 1 when the whole sample fit). The plan
reads it from the kept reading itself: its measured requests over the replica seconds they
arrived in (``requests`` - 1 over ``capacity_window_s``), the offered rate it met
(:func:`sustained_rate`, ``sustained_per_s``).

**Sizing** (:meth:`MeasuredCapacity.against`) compares like with like: the reading certified
the sample sped up s×, its densest stretch included, so against a planned rate P one replica
serves s × P of the traffic (or s × the slice's rate when the slice is thinner than P: long
slices at high s). Counting s × the slice's rate against P instead would put each replica at
a time-scale above s whenever the slice is denser than P, and a bursty sample's densest
seconds last longer than a TTFT bound's queue absorbs. The interval's top is read the same
way from the slowest scale missed.
A reading that records no window (runs of versions before bounded
windows) is converted with the mean rate, and the capacity says so (``unit`` "mean").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from autotune.objective import Outcome
from autotune.slo import RESOLUTION
from autotune.types import TrialConfig

__all__ = ["LEGACY_RESOLUTION", "MEAN", "SUSTAINED", "MeasuredCapacity", "capacity_of",
           "outcome_of", "replayed_scales", "resolution_of", "sustained_rate"]

#: The capacity's unit, as ``as_dict`` and the plan's output name it.
SUSTAINED, MEAN = "sustained", "mean"


def _num(metrics: Mapping[str, Any], key: str) -> float | None:
    v = metrics.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


#: The resolution capacity readings refined to before the bracket-and-pin search (rows with
#: neither ``capacity_resolution_target`` nor ``capacity_predicted_readings``).
LEGACY_RESOLUTION = 0.02


def resolution_of(metrics: Mapping[str, Any]) -> float:
    """How close the search that wrote ``metrics`` brought the fastest rate met and the
    slowest missed: the row's ``capacity_resolution_target``; on rows before it was recorded,
    :data:`~autotune.slo.RESOLUTION` (3%) when the row has the bracket-and-pin search's
    ``capacity_predicted_readings``, else :data:`LEGACY_RESOLUTION` (2%)."""
    recorded = _num(metrics, "capacity_resolution_target")
    if recorded is not None and recorded > 0:
        return recorded
    return RESOLUTION if "capacity_predicted_readings" in metrics else LEGACY_RESOLUTION


def replayed_scales(metrics: Mapping[str, Any]) -> list[float]:
    """Every rate a trial's replays ran at (× the sample's rate): ``replay{i}_scale``."""
    out = [v for k in metrics if k.startswith("replay") and k.endswith("_scale")
           if (v := _num(metrics, k)) is not None]
    scale = _num(metrics, "load_scale")
    return out + ([scale] if scale is not None else [])


def sustained_rate(metrics: Mapping[str, Any]) -> float | None:
    """The requests/s a capacity reading offered its replica (and met, when it met the SLO):
    the kept reading's measured requests over the replica seconds they arrived in, i.e.
    ``load_scale`` × the rate of the slice it replayed. None when the reading records no
    window (older runs) or holds fewer than two requests."""
    n, window = _num(metrics, "requests"), _num(metrics, "capacity_window_s")
    if n is None or window is None or n < 2 or window <= 0:
        return None
    return (n - 1) / window


def outcome_of(metrics: Mapping[str, Any], value: float | None = None) -> Outcome:
    """A stored reading (a trial's ``metrics``) as the :class:`~autotune.objective.Outcome`
    the SLO rules read."""
    constraints = metrics.get("constraints") or {}
    return Outcome(value=value if value is not None else 0.0,
                   constraints={str(k): float(v) for k, v in constraints.items()
                                if isinstance(v, int | float)},
                   summary=dict(metrics))


@dataclass(frozen=True)
class MeasuredCapacity:
    """One config's capacity (requests/s one replica sustains) and what it rests on.

    ``low_per_s`` is the fastest rate measured to meet the SLO, ``high_per_s`` the slowest
    measured to miss it (``high_measured``) or, without one, ``low_per_s`` × (1 + the
    resolution the reading refined to, :func:`resolution_of`), both in requests/s at the
    slice the reading replayed (module doc). ``covered_per_s`` is about the fastest rate any
    reading of the traffic ran at (at least: the fastest scale × the mean, and the capacity
    met). ``readings`` are every reading of the config (for the probability the SLO holds);
    ``sample_rate_per_s`` is the sample's mean rate, ``slice_rate_ratio`` the kept reading's
    sustained rate over ``load_scale`` × that mean (None: the reading records no window, the
    capacity is in mean-rate units).
    """

    config: TrialConfig
    trial_id: int | None
    low_per_s: float
    high_per_s: float
    high_measured: bool
    sustained: bool | None
    covered_per_s: float
    sample_rate_per_s: float
    readings: tuple[Outcome, ...]
    verdict: float | None = None  # slo_verdict_code: 1 met, 0.5 undecided, None unknown
    slice_rate_ratio: float | None = None
    per_scale_per_s: float = 0.0  # req/s one unit of time-scale stands for (module doc)
    max_scale: float = 0.0  # the fastest time-scale any reading of the traffic ran at
    sustained_per_s: float | None = None  # the kept reading's offered rate (req/s)

    @property
    def unit(self) -> str:
        """:data:`SUSTAINED` (s × the slice's rate) or :data:`MEAN` (s × the mean rate: a
        reading that records no window)."""
        return MEAN if self.slice_rate_ratio is None else SUSTAINED

    def against(self, planned_per_s: float) -> MeasuredCapacity:
        """This capacity in requests/s of the traffic as planned (``planned_per_s`` at growth
        1): a reading at time-scale s served the sample sped up s× in its busiest slice, so
        one replica serves s × the planned rate of it, or s × the slice's rate when the slice
        is thinner than the planned rate (module doc)."""
        per = min(self.per_scale_per_s, planned_per_s) if planned_per_s > 0 else \
            self.per_scale_per_s
        k = per / self.per_scale_per_s if self.per_scale_per_s > 0 else 1.0
        return replace(self, low_per_s=self.low_per_s * k, high_per_s=self.high_per_s * k,
                       covered_per_s=self.max_scale * per, per_scale_per_s=per)

    @property
    def trusted(self) -> str:
        """Why the capacity cannot carry a plan as it stands, or what it leaves open ("" when
        nothing)."""
        out = []
        if self.sustained is False:
            out.append("the rate credited was a burst the replica drained, not a rate it "
                       "sustains: the capacity is overstated")
        if self.sustained is None:
            out.append("the reading predates the sustained-rate check: whether it was "
                       "sustained is unknown")
        if self.verdict == 0.5:
            out.append("at the rate credited the SLO verdict is undecided (a p99's interval "
                       "straddles its bound)")
        if self.slice_rate_ratio is None:
            out.append("the reading records no window (an older run): its capacity is "
                       "load_scale × the sample's mean rate, exact if it replayed the whole "
                       "sample, an understatement (the count errs high) if a denser slice")
        return "; ".join(out)

    def as_dict(self) -> dict[str, Any]:
        return {"config": self.config.as_dict(), "trial_id": self.trial_id,
                "capacity_low_per_s": self.low_per_s, "capacity_high_per_s": self.high_per_s,
                "capacity_high_measured": self.high_measured, "sustained": self.sustained,
                "covered_per_s": self.covered_per_s,
                "sample_rate_per_s": self.sample_rate_per_s,
                "slice_rate_ratio": self.slice_rate_ratio, "capacity_unit": self.unit,
                "sustained_per_s": self.sustained_per_s, "per_scale_per_s": self.per_scale_per_s,
                "readings": len(self.readings),
                "slo_verdict_code": self.verdict}


def capacity_of(config: TrialConfig, metrics: Mapping[str, Any], sample_rate_per_s: float, *,
                trial_id: int | None = None, readings: Sequence[Mapping[str, Any]] = (),
                covered: Sequence[Mapping[str, Any]] = ()) -> MeasuredCapacity | str:
    """The capacity ``metrics`` (a trial's) measured, or why it measured none (a string).

    ``readings``: every reading of the config (``metrics`` itself when empty); ``covered``:
    the metrics of every reading of the same traffic, whose replays say which rates were read.
    """
    low = _num(metrics, "load_scale")
    met = _num(metrics, "capacity_met_slo")
    if low is None or met is None:
        return ("no capacity reading (replay.mode closed or replay.find_capacity false): the "
                "rate one replica serves was not measured")
    if not met or low <= 0:
        return (f"meets the SLO at no rate measured (down to {low:.3g}× the sample's rate): "
                "no replica count serves it")
    high = _num(metrics, "capacity_high_scale")
    high_measured = high is not None and high > low
    if not high_measured:
        high = low * (1 + resolution_of(metrics))
    assert high is not None
    sustained_v = _num(metrics, "capacity_sustained")
    sustained = None if sustained_v is None else sustained_v >= 0.5
    offered = sustained_rate(metrics)
    ratio = offered / (low * sample_rate_per_s) \
        if offered is not None and sample_rate_per_s > 0 else None
    per_scale = sample_rate_per_s * (ratio or 1.0)
    scales = [s for m in (*covered, metrics) for s in replayed_scales(m)]
    return MeasuredCapacity(
        config=config, trial_id=trial_id, low_per_s=low * per_scale, high_per_s=high * per_scale,
        high_measured=high_measured, sustained=sustained,
        # the fastest replay's slice is at least as dense as the mean; its own ratio is not kept
        covered_per_s=max(max(scales) * sample_rate_per_s, low * per_scale),
        sample_rate_per_s=sample_rate_per_s,
        readings=tuple(outcome_of(m) for m in (readings or [metrics])),
        verdict=_num(metrics, "slo_verdict_code"), slice_rate_ratio=ratio,
        per_scale_per_s=per_scale, max_scale=max(scales), sustained_per_s=offered)
