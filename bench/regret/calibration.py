"""How calibrated the guided search's value predictions are on one simulated unit.

A guided run is traced proposal by proposal; at each, every config the oracle reads as having a
value and the run has not measured is a point: the predictor's log-normal prediction (median,
log sd) against the oracle's true value. At the end of the run each config it measured is held
out in turn (:meth:`~autotune.predict.Predictor.held_out`: refitted on the other runs) and its
prediction compared with the oracle's value and with the mean of the run's own readings (one
reading's noise, :data:`~autotune.predict.residual.GP_NOISE`, added to the spread). A
calibrated prediction puts 80% of the values inside its 80% interval; more is too wide (it
keeps the search reading), less too narrow (it stops early on a worse config).

``python -m bench.regret.calibration --data DIR --world W --workload chat-high --seeds 0 1
--cache C [--binding-slo]`` prints the coverage per unit and over all, and ``--out`` writes the
points as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.regret.settings import BUDGET, SMALL_SPACE, Settings

if TYPE_CHECKING:
    from autotune.types import TrialConfig

#: The two-sided 80% point of a normal.
Z80 = 1.2816
#: A candidate is "near the top" when its predicted median is at least this share of the best
#: value measured: where the search's stop rule is decided.
NEAR_TOP = 0.9


@dataclass(frozen=True)
class Point:
    """One prediction against the value it should have covered (logs)."""

    stage: str          # "proposal k" (k runs measured) or "held out"
    config: str
    log_mean: float
    log_sd: float
    truth: float        # log of the oracle's value
    near_top: bool
    held: float | None = None   # held out: log of the mean of the run's own readings
    readings: int = 0

    @property
    def z(self) -> float:
        return (self.truth - self.log_mean) / max(self.log_sd, 1e-9)


def trace(world_name: str, workload: str, settings: Settings, seed: int, data: Path
          ) -> tuple[list[Point], list[str]]:
    """The points of one guided run (see the module doc), and the configs it ran."""
    from autotune.search import guided
    from bench.regret.methods import run_searcher
    from bench.regret.sim_reader import SimReader
    from bench.regret.unit import set_binding
    from bench.regret.workloads import build_workloads
    from bench.regret.worlds import sim_worlds

    world = next(w for w in sim_worlds() if w.name == world_name)
    wl = next(w for w in build_workloads(data, settings.requests) if w.name == workload)
    reader = SimReader(world, wl, settings)
    table = set_binding(reader)[0] if settings.binding_slo else reader.tables(1)[0]
    truth = {c: table.true_value(c) for c in table.readings}
    points: list[Point] = []
    guides: list[guided.Guide] = []
    propose = guided.Guide.propose

    def traced(self: guided.Guide, exclude: Iterable[TrialConfig] = ()) -> guided.GuideDecision:
        if self not in guides:
            guides.append(self)
        runs = self.predictor.measured
        best = max((o.value for o in runs if o.value), default=None)
        if best:
            measured = {o.config for o in self.predictor.observations}
            for c, p in self.predictor.predict().items():
                if c not in measured and truth.get(c, 0.0) > 0:
                    points.append(Point(f"proposal {len(runs)}", c.short(), p.log_mean,
                                        p.log_sd, math.log(truth[c]), p.value >= NEAR_TOP * best))
        return propose(self, exclude)

    guided.Guide.propose = traced  # type: ignore[method-assign]
    try:
        run = run_searcher(reader, "guided", seed, BUDGET)
    finally:
        guided.Guide.propose = propose  # type: ignore[method-assign]
    p = guides[-1].predictor
    best = max((o.value for o in p.measured if o.value), default=0.0)
    for c in dict.fromkeys(o.config for o in p.measured):
        own = [o.value for o in p.measured if o.config == c and o.value and o.value > 0]
        if not own or truth.get(c, 0.0) <= 0 or c not in p.configs:
            continue  # (the baseline may lie outside the space: no prediction held out)
        h = p.held_out(c)
        points.append(Point("held out", c.short(), h.log_mean, h.log_sd, math.log(truth[c]),
                            h.value >= NEAR_TOP * best, math.log(statistics.fmean(own)),
                            len(own)))
    return points, [c.short() for c, _ in run.trials]


def coverage(points: Sequence[Point]) -> dict[str, float]:
    """The share of values inside the 80% interval, the median |z| (0.67 when calibrated) and
    the median log sd; for the held-out points also the share of the run's own readings inside
    the interval widened by a reading's noise."""
    from autotune.predict.residual import GP_NOISE

    if not points:
        return {"n": 0}
    out = {"n": float(len(points)),
            "inside_80": sum(abs(p.z) <= Z80 for p in points) / len(points),
            "median_abs_z": statistics.median(abs(p.z) for p in points),
            "median_sd": statistics.median(p.log_sd for p in points),
            "median_abs_error": statistics.median(abs(p.truth - p.log_mean) for p in points)}
    held = [p for p in points if p.held is not None]
    if held:
        out["readings_inside_80"] = sum(
            abs(p.held - p.log_mean) <= Z80 * math.hypot(p.log_sd, GP_NOISE / math.sqrt(p.readings))
            for p in held if p.held is not None) / len(held)
    return out


def summary(points: Sequence[Point]) -> dict[str, dict[str, float]]:
    """:func:`coverage` of the proposals' points (all, near the top, after 5 runs or more) and
    of the held-out ones."""
    props = [p for p in points if p.held is None]
    late = [p for p in props if int(p.stage.split()[1]) >= 5]
    return {"proposals": coverage(props),
            "proposals_near_top": coverage([p for p in props if p.near_top]),
            "proposals_after_5_runs": coverage(late),
            "late_near_top": coverage([p for p in late if p.near_top]),
            "held_out": coverage([p for p in points if p.held is not None])}


def main(argv: Sequence[str] | None = None) -> int:
    from bench.regret.sim_reader import sim_fingerprint

    ap = argparse.ArgumentParser(prog="python -m bench.regret.calibration",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--world", required=True)
    ap.add_argument("--workloads", nargs="+", required=True)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--requests", type=int, default=120)
    ap.add_argument("--binding-slo", action="store_true")
    ap.add_argument("--cache")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    settings = Settings(space=SMALL_SPACE, seeds=len(a.seeds), requests=a.requests, repeats=2,
                        refine=2, refine_repeats=1, settle_max=4, methods=("guided",),
                        cache=a.cache, fingerprint=sim_fingerprint(), binding_slo=a.binding_slo)
    every: list[Point] = []
    units = []
    for wl in a.workloads:
        for seed in a.seeds:
            points, ran = trace(a.world, wl, settings, seed, a.data)
            every += points
            s = summary(points)
            units.append({"workload": wl, "seed": seed, "ran": ran, "summary": s,
                          "points": [asdict(p) for p in points]})
            print(f"{wl} seed {seed}: {len(ran)} runs")
            for k, v in s.items():
                print(f"  {k:24s} " + " ".join(f"{n}={x:.3g}" for n, x in v.items()))
    total = summary(every)
    print("all units")
    for k, v in total.items():
        print(f"  {k:24s} " + " ".join(f"{n}={x:.3g}" for n, x in v.items()))
    if a.out:
        a.out.write_text(json.dumps({"world": a.world, "binding_slo": a.binding_slo,
                                     "summary": total, "units": units}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
