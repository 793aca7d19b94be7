"""Does the seed-table fit predict? Leave each published number out, refit, predict it.

Two parameterisations of one model's acceptance priors (both drafters) are compared:

- ``exact`` (what the shipped profiles use, :mod:`._calibrate`): DSpark has its own
  (level, slope) for LiveCodeBench, for SPEED-Bench Coding and for the four other benchmarks
  (their relative offsets fixed); Eagle3-MLA has its own LiveCodeBench pair and one (level,
  slope) shift of the DSpark priors elsewhere: 10 parameters for the model's 10 numbers.
- ``shared``: one slope per drafter shared by every benchmark (how fast acceptance decays with
  the position is the drafter's property), a level per benchmark group for DSpark, and Eagle3-MLA
  as one (level, slope) shift of *every* DSpark prior, LiveCodeBench included: 6 parameters
  for 10 numbers.

A fit minimises the relative errors of the analytic batch-1 speedups (:class:`._calibrate._Model`,
within 0.2% of the simulator) times a per-cell simulator/analytic correction measured once at
the shipped priors. Held out, a number is predicted from the fit of the other nine of its
model; the exact fit, underdetermined then, starts from the same neutral point for every
held-out number (logit level 1, slope 0), so the data alone decide.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from autotune.backends.sim._benchmarks import BENCHMARKS, SEED_TABLE
from autotune.backends.sim._calibrate import GROUP_OFFSETS, FloatArray, _Model, _shift, _with
from autotune.backends.sim._profile import AcceptancePrior, Profile
from autotune.backends.sim._truth import logit
from autotune.types import Request

__all__ = ["FITS", "SeedCell", "fit_priors", "leave_one_out"]

FITS = ("shared", "exact")
DRAFTERS = ("dspark", "eagle3-mla")
_GROUP = tuple(GROUP_OFFSETS)
Priors = dict[str, dict[str, AcceptancePrior]]  # drafter -> benchmark -> prior


@dataclass(frozen=True)
class SeedCell:
    """One published number of one model: drafter, avg|benchmark, window, value."""

    drafter: str
    cell: str
    n: int
    published: float

    @property
    def key(self) -> str:
        return f"{self.drafter}/{self.cell}/n={self.n}"


def seed_cells(model: str) -> list[SeedCell]:
    return [SeedCell(drafter, cell, int(n), value)
            for drafter, cells in SEED_TABLE[model].items()
            for cell, windows in cells.items() for n, value in windows.items()]


def _priors(fit: str, x: FloatArray, base: Profile) -> Priors:
    """The priors a parameter vector stands for (``base`` gives the spreads)."""
    ds_base = base.drafters["dspark"].priors
    ds: dict[str, AcceptancePrior] = {}
    if fit == "shared":
        slope, group, lcb, speed, d_level, d_slope = (float(v) for v in x)
        for b in _GROUP:
            ds[b] = _with(ds_base[b], group + GROUP_OFFSETS[b], slope)
        ds["livecodebench"] = _with(ds_base["livecodebench"], lcb, slope)
        ds["speed-bench-coding"] = _with(ds_base["speed-bench-coding"], speed, slope)
        e3 = {b: _shift(ds[b], d_level, d_slope) for b in BENCHMARKS}
    else:
        lcb_l, lcb_s, spd_l, spd_s, grp_l, grp_s, e3_l, e3_s, d_level, d_slope = (
            float(v) for v in x)
        for b in _GROUP:
            ds[b] = _with(ds_base[b], grp_l + GROUP_OFFSETS[b], grp_s)
        ds["livecodebench"] = _with(ds_base["livecodebench"], lcb_l, lcb_s)
        ds["speed-bench-coding"] = _with(ds_base["speed-bench-coding"], spd_l, spd_s)
        e3 = {b: _shift(ds[b], d_level, d_slope) for b in BENCHMARKS if b != "livecodebench"}
        e3["livecodebench"] = _with(ds_base["livecodebench"], e3_l, e3_s)
    return {"dspark": ds, "eagle3-mla": e3}


def _start(fit: str) -> list[float]:
    return [0.0, 1.0, 1.0, 1.0, 0.0, 0.0] if fit == "shared" else [1.0, 0.0] * 4 + [0.0, 0.0]


class _Predictor:
    """Analytic (corrected) speedups of one model's published cells for candidate priors."""

    def __init__(self, profile: Profile, benchmarks: Mapping[str, Sequence[Request]],
                 seeds: Sequence[int], correction: Mapping[tuple[str, str, int], float]) -> None:
        self.profile = profile
        self.models = {d: _Model(profile, d, benchmarks, seeds) for d in DRAFTERS}
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


def fit_parameters(fit: str, predictor: _Predictor, cells: Sequence[SeedCell],
                   start: Sequence[float] | None = None) -> FloatArray:
    """Parameters of ``fit`` whose speedups best match ``cells`` (least squares, relative)."""

    def residuals(x: FloatArray) -> FloatArray:
        priors = _priors(fit, x, predictor.profile)
        return np.array([predictor.speedup(priors, c.drafter, c.cell, c.n) / c.published - 1.0
                         for c in cells])

    return _solve(residuals, _start(fit) if start is None else start)


def fit_priors(fit: str, predictor: _Predictor, cells: Sequence[SeedCell]) -> Priors:
    """Priors of parameterisation ``fit`` whose speedups best match ``cells``."""
    return _priors(fit, fit_parameters(fit, predictor, cells), predictor.profile)


@dataclass(frozen=True)
class LooResult:
    """In-sample and held-out relative errors of one fit, by cell key."""

    fit: str
    in_sample: dict[str, float]
    held_out: dict[str, tuple[float, float]]  # key -> (predicted, relative error)
    priors: Priors


def leave_one_out(fit: str, predictor: _Predictor, cells: Sequence[SeedCell]) -> LooResult:
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
