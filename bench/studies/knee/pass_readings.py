"""What a pass's capacity readings cost and reached, read from its database through the CLI
(``autotune trials --format json`` and ``autotune runs --format json``).

Per pass: trials, readings per trial (``capacity_replays``), replica seconds of the readings
per trial (``capacity_busy_s``), the median resolution (``capacity_resolution``) and the share
of trials within :data:`~autotune.slo.RESOLUTION` (a trial whose reading missed at no rate
above its capacity has none and counts as not within), predicted against spent readings and
replica seconds per trial, the GPU-hours the run recorded and why its budget stopped it
(None: the searches ended by themselves).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import mean, median
from typing import Any

from autotune.slo import RESOLUTION
from bench.paths import REPO, child_env


@dataclass(frozen=True, slots=True)
class TrialReading:
    """One trial's capacity reading: its workload and number, readings and replica seconds
    spent and predicted, and the resolution reached (NaN: none)."""

    workload: str
    number: int
    readings: float
    predicted_readings: float
    busy_s: float
    predicted_busy_s: float
    resolution: float


@dataclass(frozen=True, slots=True)
class PassReadings:
    """A pass's trials with a capacity reading and the run's cost and budget stop."""

    trials: tuple[TrialReading, ...]
    all_trials: int
    gpu_h: float
    budget_stop: str | None

    def summary(self) -> dict[str, Any]:
        t = self.trials
        res = [r.resolution if math.isfinite(r.resolution) else math.inf for r in t]
        return {
            "trials": self.all_trials, "capacity_readings": len(t),
            "readings_per_trial": mean(r.readings for r in t) if t else math.nan,
            "predicted_readings_per_trial": mean(r.predicted_readings for r in t)
            if t else math.nan,
            "busy_s_per_trial": mean(r.busy_s for r in t) if t else math.nan,
            "predicted_busy_s_per_trial": mean(r.predicted_busy_s for r in t)
            if t else math.nan,
            "median_resolution": median(res) if res else math.nan,
            "share_within_resolution": sum(x <= RESOLUTION + 1e-9 for x in res) / len(res)
            if res else math.nan,
            "gpu_h": self.gpu_h, "budget_stop": self.budget_stop,
            "per_trial": [[r.workload, r.number, r.readings, round(r.predicted_readings, 2),
                           round(r.busy_s), round(r.predicted_busy_s),
                           round(r.resolution, 4)] for r in t]}


def _num(m: Mapping[str, Any], key: str) -> float:
    v = m.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan


def from_rows(trials: Sequence[Mapping[str, Any]],
              runs: Sequence[Mapping[str, Any]]) -> PassReadings:
    """The readings of ``trials`` (``autotune trials --format json``) and the cost of the
    first of ``runs`` (``autotune runs --format json``)."""
    out = []
    for t in trials:
        m = t.get("metrics") or {}
        if t.get("state") != "complete" or "capacity_replays" not in m:
            continue
        out.append(TrialReading(str(t.get("workload")), int(t.get("number", -1)),
                                _num(m, "capacity_replays"),
                                _num(m, "capacity_predicted_readings"),
                                _num(m, "capacity_busy_s"), _num(m, "capacity_predicted_busy_s"),
                                _num(m, "capacity_resolution")))
    run = runs[0] if runs else {}
    cost = (run.get("cost") or {}).get("total") or {}
    return PassReadings(tuple(out), len(trials), _num(cost, "gpu_h"), run.get("budget_stop"))


def _cli(*args: str) -> Any:
    done = subprocess.run([sys.executable, "-m", "autotune.cli", *args, "--format", "json"],
                          env=child_env(), cwd=REPO, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"autotune {' '.join(args)} failed ({done.returncode}): "
                           f"{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def read_pass(db_url: str) -> PassReadings:
    """The pass stored in ``db_url`` (its first run), read through the CLI."""
    return from_rows(_cli("trials", "--db", db_url), _cli("runs", "--db", db_url))
