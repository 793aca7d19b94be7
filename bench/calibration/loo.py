"""Does the seed-table fit predict? Leave each published number out, refit, predict it.

Two parameterisations of one model's acceptance priors (both drafters) are compared:

- ``exact`` (what the shipped profiles use, :mod:`bench.calibration.priors`): DSpark has its own
  (level, slope) for LiveCodeBench, for SPEED-Bench Coding and for the four other benchmarks
  (their relative offsets fixed); Eagle3-MLA has its own LiveCodeBench pair and one (level,
  slope) shift of the DSpark priors elsewhere: 10 parameters for the model's 10 numbers.
- ``shared``: one slope per drafter shared by every benchmark (how fast acceptance decays with
  the position is the drafter's property), a level per benchmark group for DSpark, and Eagle3-MLA
  as one (level, slope) shift of *every* DSpark prior, LiveCodeBench included: 6 parameters
  for 10 numbers.

A fit minimises the relative errors of the analytic batch-1 speedups
(:class:`bench.calibration.priors.AnalyticModel`, within 0.2% of the simulator) times a per-cell
simulator/analytic correction measured once at the shipped priors (with ``--simulate``; without,
the analytic model alone). Held out, a number is predicted from the fit of the other nine of its
model; the exact fit, underdetermined then, starts from the same neutral point for every
held-out number (logit level 1, slope 0), so the data alone decide.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.backends.sim import BENCHMARKS, AcceptancePrior, Profile, load_profile, logit
from autotune.types import Request
from bench.calibration.priors import (
    GROUP_OFFSETS,
    AnalyticModel,
    FloatArray,
    shift_prior,
    with_prior,
)
from bench.calibration.seed import DRAFTERS, MODELS, SeedCell, seed_cells
from bench.calibration.speedup import baselines, speedup

__all__ = ["FITS", "CellPredictor", "fit_priors", "leave_one_out", "leave_one_out_report"]

FITS = ("shared", "exact")
_GROUP = tuple(GROUP_OFFSETS)
Priors = dict[str, dict[str, AcceptancePrior]]  # drafter -> benchmark -> prior


def _priors(fit: str, x: FloatArray, base: Profile) -> Priors:
    """The priors a parameter vector stands for (``base`` gives the spreads)."""
    ds_base = base.drafters["dspark"].priors
    ds: dict[str, AcceptancePrior] = {}
    if fit == "shared":
        slope, group, lcb, speed, d_level, d_slope = (float(v) for v in x)
        for b in _GROUP:
            ds[b] = with_prior(ds_base[b], group + GROUP_OFFSETS[b], slope)
        ds["livecodebench"] = with_prior(ds_base["livecodebench"], lcb, slope)
        ds["speed-bench-coding"] = with_prior(ds_base["speed-bench-coding"], speed, slope)
        e3 = {b: shift_prior(ds[b], d_level, d_slope) for b in BENCHMARKS}
    else:
        lcb_l, lcb_s, spd_l, spd_s, grp_l, grp_s, e3_l, e3_s, d_level, d_slope = (
            float(v) for v in x)
        for b in _GROUP:
            ds[b] = with_prior(ds_base[b], grp_l + GROUP_OFFSETS[b], grp_s)
        ds["livecodebench"] = with_prior(ds_base["livecodebench"], lcb_l, lcb_s)
        ds["speed-bench-coding"] = with_prior(ds_base["speed-bench-coding"], spd_l, spd_s)
        e3 = {b: shift_prior(ds[b], d_level, d_slope) for b in BENCHMARKS if b != "livecodebench"}
        e3["livecodebench"] = with_prior(ds_base["livecodebench"], e3_l, e3_s)
    return {"dspark": ds, "eagle3-mla": e3}


def _start(fit: str) -> list[float]:
    return [0.0, 1.0, 1.0, 1.0, 0.0, 0.0] if fit == "shared" else [1.0, 0.0] * 4 + [0.0, 0.0]


class CellPredictor:
    """Analytic (corrected) speedups of one model's published cells for candidate priors."""

    def __init__(self, profile: Profile, benchmarks: Mapping[str, Sequence[Request]],
                 seeds: Sequence[int], correction: Mapping[tuple[str, str, int], float]) -> None:
        self.profile = profile
        self.models = {d: AnalyticModel(profile, d, benchmarks, seeds) for d in DRAFTERS}
        self.correction = correction
        self._memo: dict[tuple[str, str, int, float, float], float] = {}

    def speedup(self, priors: Priors, drafter: str, cell: str, n: int) -> float:
        model = self.models[drafter]

        def one(b: str) -> float:
            prior = priors[drafter][b]
            key = (drafter, b, n, prior.c1, prior.slope)
            if key not in self._memo:
                self._memo[key] = (model.speedup(b, prior, n)
                                   * self.correction.get((drafter, b, n), 1.0))
            return self._memo[key]

        if cell == "avg":
            return sum(one(b) for b in BENCHMARKS) / len(BENCHMARKS)
        return one(cell)


def _solve(residuals: Callable[[FloatArray], FloatArray], x0: Sequence[float]) -> FloatArray:
    from scipy.optimize import least_squares

    fit = least_squares(residuals, np.asarray(x0, dtype=np.float64), method="trf",
                        bounds=(-3.0, 6.0), xtol=1e-6, ftol=1e-6, max_nfev=200)
    out: FloatArray = fit.x
    return out


def fit_parameters(fit: str, predictor: CellPredictor, cells: Sequence[SeedCell],
                   start: Sequence[float] | None = None) -> FloatArray:
    """Parameters of ``fit`` whose speedups best match ``cells`` (least squares, relative)."""

    def residuals(x: FloatArray) -> FloatArray:
        priors = _priors(fit, x, predictor.profile)
        return np.array([predictor.speedup(priors, c.drafter, c.cell, c.n) / c.published - 1.0
                         for c in cells])

    return _solve(residuals, _start(fit) if start is None else start)


def fit_priors(fit: str, predictor: CellPredictor, cells: Sequence[SeedCell]) -> Priors:
    """Priors of parameterisation ``fit`` whose speedups best match ``cells``."""
    return _priors(fit, fit_parameters(fit, predictor, cells), predictor.profile)


@dataclass(frozen=True)
class LooResult:
    """In-sample and held-out relative errors of one fit, by cell key."""

    fit: str
    in_sample: dict[str, float]
    held_out: dict[str, tuple[float, float]]  # key -> (predicted, relative error)
    priors: Priors


def leave_one_out(fit: str, predictor: CellPredictor, cells: Sequence[SeedCell]) -> LooResult:
    """Fit on every cell (in-sample errors), then on all but each cell in turn (held out)."""
    x_full = fit_parameters(fit, predictor, cells)
    full = _priors(fit, x_full, predictor.profile)
    in_sample = {c.key: predictor.speedup(full, c.drafter, c.cell, c.n) / c.published - 1.0
                 for c in cells}
    held_out = {}
    for i, c in enumerate(cells):
        rest = [o for j, o in enumerate(cells) if j != i]
        # the shared fit stays determined without the cell: start at the full fit (faster, the
        # optimum is the same); the exact fit does not: start from the neutral point
        start = list(x_full) if fit == "shared" else None
        priors = _priors(fit, fit_parameters(fit, predictor, rest, start), predictor.profile)
        predicted = predictor.speedup(priors, c.drafter, c.cell, c.n)
        held_out[c.key] = (predicted, predicted / c.published - 1.0)
    return LooResult(fit, in_sample, held_out, full)


def describe_priors(priors: Priors) -> dict[str, dict[str, dict[str, float]]]:
    return {d: {b: {"c1": round(p.c1, 4), "slope": round(p.slope, 4),
                    "level": round(float(logit(p.c1)), 4)} for b, p in ps.items()}
            for d, ps in priors.items()}


def leave_one_out_report(benchmarks: Mapping[str, Sequence[Request]], seeds: list[int],
                         simulate: bool = False) -> dict[str, Any]:
    """Both fits' in-sample and held-out errors over every published number (the analytic
    batch-1 model, corrected by the simulator when ``simulate``)."""
    out: dict[str, Any] = {}
    results: dict[str, dict[str, Any]] = {fit: {"in_sample": {}, "cells": {}, "priors": {}}
                                          for fit in FITS}
    for model, name in MODELS.items():
        profile = load_profile(name)
        predictor = CellPredictor(profile, benchmarks, seeds, {})
        correction = {}
        for b, reqs in benchmarks.items() if simulate else ():  # simulator / analytic
            base = baselines(profile, reqs, seeds)
            for drafter in DRAFTERS:
                prior = profile.drafters[drafter].priors[b]
                for n in (3, 7):
                    sim = speedup(profile, drafter, n, reqs, seeds, base)
                    correction[(drafter, b, n)] = sim / predictor.models[drafter].speedup(
                        b, prior, n)
        predictor = CellPredictor(profile, benchmarks, seeds, correction)
        cells = seed_cells(model)
        for fit in FITS:
            r = leave_one_out(fit, predictor, cells)
            published = {c.key: c.published for c in cells}
            results[fit]["in_sample"].update(
                {f"{model}/{k}": round(e, 5) for k, e in r.in_sample.items()})
            results[fit]["cells"].update(
                {f"{model}/{k}": {"published": published[k], "predicted": round(p, 4),
                                  "error": round(e, 5)} for k, (p, e) in r.held_out.items()})
            results[fit]["priors"][model] = describe_priors(r.priors)
    for fit, res in results.items():
        errors = [abs(c["error"]) for c in res["cells"].values()]
        fitted = [abs(e) for e in res["in_sample"].values()]
        summary = {"fit": fit, "median_error": round(float(np.median(errors)), 5),
                   "max_error": round(max(errors), 5), "cells": res["cells"],
                   "in_sample_median_error": round(float(np.median(fitted)), 5),
                   "in_sample_max_error": round(max(fitted), 5), "priors": res["priors"]}
        out["loo" if fit == "shared" else f"{fit}_fit"] = summary
    out["seeds"] = seeds
    out["model"] = ("analytic batch-1 model x simulator correction" if simulate
                    else "analytic batch-1 model (within 0.2% of the simulator)")
    return out


def print_loo(report: Mapping[str, Any]) -> None:
    """The report of :func:`leave_one_out_report` as a table, held-out cell by cell."""
    shared, exact = report["loo"], report["exact_fit"]
    print(f"{'held-out cell':44s} {'published':>9s} {'shared':>8s} {'err':>7s} "
          f"{'exact':>8s} {'err':>7s}")
    for key, c in shared["cells"].items():
        e = exact["cells"][key]
        print(f"{key:44s} {c['published']:9.2f} {c['predicted']:8.3f} {100 * c['error']:+6.2f}% "
              f"{e['predicted']:8.3f} {100 * e['error']:+6.2f}%")
    for name, r in (("shared", shared), ("exact", exact)):
        print(f"{name:6s} fit: held-out median {100 * r['median_error']:.2f}%, max "
              f"{100 * r['max_error']:.2f}%; in-sample median "
              f"{100 * r['in_sample_median_error']:.2f}%, "
              f"max {100 * r['in_sample_max_error']:.2f}%")
