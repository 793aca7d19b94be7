"""Read one config's capacity on the simulator under each hint arm.

A *unit* is a (workload, config). Its true knee comes from a fine reading first: the same
search without a hint, pinned to :data:`FINE_RESOLUTION` with up to :data:`FINE_READINGS`
readings; the knee is the geometric middle of the fastest rate met and the slowest missed.
Then each :class:`Arm` reads the unit afresh (a new replica, so the first reading warms it up
as in a pass) with the policy's reading budget: no hint, or a hint at the knee × ``factor``
with ``log_sd``. Every reading of every arm shares the replay seed, so two arms that read one
rate read the same replay.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from statistics import mean, median
from typing import Any

from autotune.backends import Backend
from autotune.orchestrate.capacity import replay_at_capacity
from autotune.slo import RESOLUTION
from autotune.types import CapacityHint, Measurement, ReplaySchedule, Slo, TrialConfig

#: The fine reading that gives a unit's true knee.
FINE_RESOLUTION, FINE_READINGS = 0.005, 24


@dataclass(frozen=True, slots=True)
class Arm:
    """How a reading starts: no hint (``factor`` None), or a hint at the true knee × ``factor``
    with the standard deviation ``log_sd`` of its log."""

    factor: float | None
    log_sd: float = math.nan

    @property
    def name(self) -> str:
        if self.factor is None:
            return "none"
        where = "knee" if self.factor == 1 else (f"x{self.factor:g}" if self.factor > 1
                                                 else f"/{1 / self.factor:g}")
        return f"{where} sd={self.log_sd:g}"


def default_arms(sds: Sequence[float] = (0.1, 0.3, 0.6)) -> list[Arm]:
    """No hint, then a hint at the knee, ×3 and ÷3 off, at each standard deviation."""
    return [Arm(None), *(Arm(f, sd) for f in (1.0, 3.0, 1 / 3) for sd in sds)]


@dataclass(frozen=True, slots=True)
class ArmReading:
    """One arm's capacity reading of one unit, as the trial records it."""

    workload: str
    config: str
    arm: str
    knee: float
    capacity: float | None  # load_scale when the SLO was met
    readings: int
    busy_s: float
    resolution: float  # NaN: no rate missed above the capacity
    predicted_readings: float
    predicted_busy_s: float
    scales: tuple[float, ...]
    margins: tuple[float, ...]  # log(worst p99 / bound) of each reading, in the order read

    def as_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in
                ((f, getattr(self, f)) for f in self.__dataclass_fields__)}


def _margins(m: Measurement, slo: Slo, n: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    scales, margins = [], []
    for i in range(n):
        scales.append(float(m.extra[f"replay{i}_scale"]))
        ratios = [m.extra[f"replay{i}_{k}_p99_ms"] / b for k, b in
                  (("ttft", slo.ttft_p99_ms), ("itl", slo.itl_p99_ms)) if b]
        worst = max(ratios, default=math.nan)
        margins.append(math.log(worst) if worst > 0 else math.nan)
    return tuple(scales), tuple(margins)


def _read(backend: Backend, config: TrialConfig, schedule: ReplaySchedule, slo: Slo,
          max_readings: int, resolution: float = RESOLUTION) -> Measurement:
    replica = backend.start(config)
    try:
        return replay_at_capacity(replica, schedule, slo, max_replays=max_readings,
                                  resolution=resolution)
    finally:
        replica.stop()


def _reading(workload: str, config: TrialConfig, arm: str, knee: float, m: Measurement,
             slo: Slo) -> ArmReading:
    e = m.extra
    n = int(e["capacity_replays"])
    scales, margins = _margins(m, slo, n)
    return ArmReading(workload, config.short(), arm, knee,
                      float(e["load_scale"]) if e.get("capacity_met_slo") else None, n,
                      float(e["capacity_busy_s"]), float(e.get("capacity_resolution", math.nan)),
                      float(e["capacity_predicted_readings"]),
                      float(e["capacity_predicted_busy_s"]), scales, margins)


def fine_knee(m: Measurement) -> float | None:
    """The knee a fine reading pinned: the middle (in log) of its fastest rate met and slowest
    missed, or its fastest met when none missed above it; None when it met the SLO at no rate."""
    if not m.extra.get("capacity_met_slo"):
        return None
    low = float(m.extra["load_scale"])
    res = float(m.extra.get("capacity_resolution", math.nan))
    return low * math.sqrt(1 + res) if math.isfinite(res) else low


def read_unit(backend: Backend, workload: str, config: TrialConfig, schedule: ReplaySchedule,
              slo: Slo, arms: Sequence[Arm], max_readings: int,
              log: Callable[[str], None] = lambda _: None) -> list[ArmReading]:
    """The fine reading (arm "fine") and each arm's reading of one unit; none but the fine one
    when the config meets the SLO at no rate (no knee to hint at)."""
    fine = _read(backend, config, schedule, slo, FINE_READINGS, FINE_RESOLUTION)
    knee = fine_knee(fine)
    out = [_reading(workload, config, "fine", knee or math.nan, fine, slo)]
    log(f"{workload} {config.short()}: knee {knee}")
    if knee is None:
        return out
    for arm in arms:
        hint = None if arm.factor is None else CapacityHint(knee * arm.factor, arm.log_sd)
        m = _read(backend, config, replace(schedule, capacity_hint=hint), slo, max_readings)
        out.append(_reading(workload, config, arm.name, knee, m, slo))
        r = out[-1]
        log(f"  {arm.name:12s} {r.readings} readings {r.busy_s:6.0f} s res "
            f"{r.resolution:.3f} predicted {r.predicted_readings:.1f} / "
            f"{r.predicted_busy_s:.0f} s")
    return out


def summarize(rows: Sequence[ArmReading]) -> list[dict[str, Any]]:
    """Per arm over the units: mean readings and replica seconds (spent and predicted), their
    ratios to no hint over the same units, the median resolution and the share within
    :data:`~autotune.slo.RESOLUTION`, and how often the capacity is off the fine knee by more
    than the resolution."""
    arms = list(dict.fromkeys(r.arm for r in rows if r.arm != "fine"))
    plain = {(r.workload, r.config): r for r in rows if r.arm == "none"}
    out = []
    for arm in arms:
        got = [r for r in rows if r.arm == arm]
        base = [plain[(r.workload, r.config)] for r in got if (r.workload, r.config) in plain]
        res = [r.resolution if math.isfinite(r.resolution) else math.inf for r in got]
        wrong = [r for r in got if r.capacity is None
                 or not r.knee / (1 + 2 * RESOLUTION) <= r.capacity <= r.knee * (1 + RESOLUTION)]
        out.append({
            "arm": arm, "units": len(got),
            "readings": mean(r.readings for r in got),
            "predicted_readings": mean(r.predicted_readings for r in got),
            "busy_s": mean(r.busy_s for r in got),
            "predicted_busy_s": mean(r.predicted_busy_s for r in got),
            "readings_vs_none": mean(r.readings for r in got) / mean(b.readings for b in base)
            if base else math.nan,
            "busy_vs_none": mean(r.busy_s for r in got) / mean(b.busy_s for b in base)
            if base else math.nan,
            "median_resolution": median(res),
            "share_within_resolution": sum(x <= RESOLUTION + 1e-9 for x in res) / len(res),
            "off_knee": len(wrong)})
    return out


def table(summary: Sequence[dict[str, Any]]) -> str:
    """The summary as a fixed-width table."""
    head = (f"{'arm':14s} {'units':>5s} {'readings':>8s} {'pred':>6s} {'busy s':>7s} "
            f"{'pred s':>7s} {'rd/none':>7s} {'s/none':>7s} {'med res':>7s} {'<=3%':>5s} "
            f"{'off':>4s}")
    lines = [head]
    for s in summary:
        lines.append(
            f"{s['arm']:14s} {s['units']:5d} {s['readings']:8.2f} {s['predicted_readings']:6.2f} "
            f"{s['busy_s']:7.0f} {s['predicted_busy_s']:7.0f} {s['readings_vs_none']:7.3f} "
            f"{s['busy_vs_none']:7.3f} {s['median_resolution']:7.3f} "
            f"{s['share_within_resolution']:5.2f} {s['off_knee']:4d}")
    return "\n".join(lines)
