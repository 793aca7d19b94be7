"""The SLO's tail at a rate: what p99 TTFT and p99 ITL a reading will measure, as a distribution.

For a config and an arrival rate (× the sample's; the concurrency in a closed loop) the
:class:`TailModel` predicts the p99 TTFT and p99 ITL one reading measures, as a median with an
interval and the chance each meets its bound. Three layers, each a mechanism:

1. **Physics** (the replica model, :mod:`autotune.predict.replica`, with the step cost and
   factors the predictor fitted). The ITL gaps are a mixture: decode-only steps, whose time
   grows with the decoding batch at each moment of the replay, and steps that carry a prefill
   chunk, which last longer and stall every sequence decoding beside them. How many gaps are
   stalled follows from the prompts, the arrival rate, ``max_num_batched_tokens`` and the
   batch (each busy period of the prefill queue packs its prompts into full-budget chunks plus
   one partial chunk). The TTFT is each request's queue wait and its own prefill.
2. **Sampling** (:func:`_p99_cdf`). A measured p99 is an order statistic: over n gaps it
   exceeds x when more than 1% of them do. The count above x is a sum of plain gaps, each
   over x on its own, and stalled gaps, which come in clusters (one chunk step stalls the
   whole decoding batch at once), so its variance is the plain count plus the batch × the
   stalled count. Where the p99 sits between the plain steps and the stalls (the stalls are
   about 1% of the gaps), whether a few chunk steps land among the gaps read decides it, and
   the distribution is wide and two-humped; where it sits inside one population it is narrow.
   Slow TTFTs come in runs the same way (a queue that builds up delays every request arriving
   into it): the count above x varies by the physics' mean run of slow requests.
3. **Calibration** (:class:`_Residual`). What the physics still gets wrong is learned from every
   reading of every rate the runs made (each trial reads several rates): the log ratio of
   each measured p99 to the physics' median, with the sampling spread of step 2 as its known
   noise, is a Gaussian process: a workload-wide offset, a trend along the load (the
   physics' rise of the log p99 over its light-load level: 0 at light load, where the rate
   barely moves a p99, so loaded readings do not extrapolate there), a config effect that
   configs of similar windows share (an error in the step's own cost: the predictor's residual
   kernel along the window, :func:`~autotune.predict.residual.similarity`; a config read to
   miss lowers its neighbours' chances), a heavy-tailed reading-to-reading nugget (a reading
   the rest cannot explain takes its own extra variance rather than widening every
   reading's), and an error in where the knee is — the
   model's capacity off by a log factor (workload-wide and per config), which a reading feels
   through
   the physics' elasticity d log p99 / d log rate there (near saturation a p99 moves many times
   faster than the rate, far below it hardly at all). The three sizes are chosen by maximum
   marginal likelihood under a log-normal prior. The prefill speed is calibrated with them: the
   predictor fits the step cost to decode steps, which pin its per-token and attention parts
   loosely, while a reading's TTFT and its stalled gaps are prefill chunks; the move of those
   parts that gives the readings the highest marginal likelihood (a ridge prior on it) is the
   physics the residual is read against. Its posterior scales every gap (or TTFT) of
   the physics; the
   predictive distribution integrates over it (Gauss-Hermite), so its spread shrinks as
   readings come in, and a config already read is known better than one that was not.

It reads measurements only (:class:`TailReading`: a reading's rate and its two p99s), never a
backend.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autotune.predict.numerics import count_le
from autotune.predict.replica import settle_margins
from autotune.predict.residual import similarity
from autotune.predict.settle import SettleCalibration
from autotune.predict.step_cost import COST_PARTS, UNKNOWN_HARDWARE_SD, StepCostModel
from autotune.predict.tail_physics import Physics, physics
from autotune.predict.tail_readings import TailReading, replay_tail_keys, tail_readings
from autotune.predict.workload import ReplicaFactors, WorkloadModel
from autotune.slo import MIN_SCALE, SLO_QUANTILE
from autotune.types import Slo, TrialConfig

__all__ = ["TAILS", "TailForecast", "TailModel", "TailReading", "replay_tail_keys",
           "tail_readings"]

FloatArray = npt.NDArray[np.float64]

#: The two tails an SLO bounds, by the summary key of their p99 (ms).
TAILS = ("itl_p99_ms", "ttft_p99_ms")
#: Prior sd (log) of the calibration's workload-wide offset and of its trend per unit of the
#: physics' rise of the log p99 over light load (:func:`_rise`),
#: on hardware the facts describe (widened by UNKNOWN_HARDWARE_SD where they do not).
_OFFSET_SD, _TREND_SD = 0.5, 0.25
#: The log-normal prior of the per-config and reading-to-reading error sizes: median, sd (log).
_SIZE_PRIOR = (0.1, 1.0)
_SIZES = np.geomspace(0.01, 1.0, 7)
#: Gauss-Hermite nodes over the calibration's posterior, and points of the p99's x grid.
_NODES, _POINTS = 9, 240
#: Moves of the prefill speed (log, on top of the predictor's fit) the calibration tries.
_PREFILL_STEPS = (-1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0)
#: The step in log rate the physics' elasticity is read over, and its cap.
_ELASTICITY_STEP, _MAX_ELASTICITY = 0.1, 20.0
#: A reading's sampling sd (log) is at least this (a p99 printed to the millisecond, drift).
_MIN_SAMPLING_SD = 0.01
#: Degrees of freedom of the heavy-tailed nugget (:func:`_outlier_var`).
_NUGGET_DOF = 4.0


def _weight_above(values: FloatArray, weights: FloatArray, x: FloatArray) -> FloatArray:
    """Per row, the weight of ``values`` above each of ``x`` (K, X)."""
    order = np.argsort(values, axis=1)
    v = np.take_along_axis(values, order, axis=1)
    cum = np.concatenate([np.zeros((v.shape[0], 1)),
                          np.cumsum(np.take_along_axis(weights, order, axis=1), axis=1)], axis=1)
    idx = count_le(v, x)
    below = np.take_along_axis(cum, idx, axis=1)
    out: FloatArray = cum[:, -1:] - below
    return out


def _p99_cdf(tail: str, ph: Physics, x: FloatArray) -> FloatArray:
    """P(measured p99 <= x) (x in s, (K, X)) with the physics' gaps or TTFTs as they are:
    the count above x against the 1% allowed, a normal approximation whose variance counts
    the stalled gaps' clusters, and the runs of requests one queue episode delays together
    (see the module doc)."""
    from scipy.special import ndtr

    if tail == "itl_p99_ms":
        d, w, s = ph.durations, np.maximum(ph.weights, 0.0), ph.stall_from
        plain = _weight_above(d[:, :s], w[:, :s], x)
        stalled = _weight_above(d[:, s:], w[:, s:], x) if d.shape[1] > s else 0.0 * plain
        n = w.sum(axis=1, keepdims=True)
        mean, var = plain + stalled, plain + ph.cluster[:, None] * stalled
    else:
        t = ph.ttft
        mean = _weight_above(t, np.ones_like(t), x)
        var = mean * (1.0 if ph.ttft_cluster is None else ph.ttft_cluster[:, None])
        n = np.full((t.shape[0], 1), float(t.shape[1]))
    allowed = (1.0 - SLO_QUANTILE) * n
    out: FloatArray = ndtr((allowed + 0.5 - mean) / np.sqrt(var + 0.25))
    return out


@dataclass(frozen=True)
class _Spread:
    """The physics' predictive p99 of each row at a log-normal residual scale N(mean, var)."""

    log_x: FloatArray  # (K, X) grid of log p99 (s)
    cdf: FloatArray    # (K, X) P(measured p99 <= exp(log_x))

    def quantile(self, q: float) -> FloatArray:
        out = np.empty(self.cdf.shape[0])
        for k in range(out.size):
            f = np.maximum.accumulate(self.cdf[k]) + 1e-12 * np.arange(self.cdf.shape[1])
            out[k] = float(np.interp(q, f, self.log_x[k]))
        return out

    def at(self, log_x: float) -> FloatArray:
        out = np.empty(self.cdf.shape[0])
        for k in range(out.size):
            out[k] = float(np.interp(log_x, self.log_x[k], self.cdf[k], left=0.0, right=1.0))
        return out


def _spread(tail: str, ph: Physics, mean: FloatArray, var: FloatArray) -> _Spread:
    """The measured p99's distribution when every gap (or TTFT) is scaled by exp(r),
    r ~ N(mean, var) per row: the sampling CDF averaged over Gauss-Hermite nodes of r."""
    values = ph.durations if tail == "itl_p99_ms" else ph.ttft
    positive = np.where(values > 0, values, np.nan)
    sd = np.sqrt(var)
    lo = np.log(np.nanmin(positive, axis=1)) + mean - 4.0 * sd - 0.7
    hi = np.log(np.nanmax(positive, axis=1)) + mean + 4.0 * sd + 0.7
    lo, hi = np.nan_to_num(lo, nan=-12.0), np.nan_to_num(hi, nan=0.0)
    log_x = lo[:, None] + (hi - lo)[:, None] * np.linspace(0.0, 1.0, _POINTS)[None, :]
    if not np.any(sd > 0):  # no residual spread: every node is the same r = mean
        return _Spread(log_x, _p99_cdf(tail, ph, np.exp(log_x - mean[:, None])))
    nodes, weights = np.polynomial.hermite_e.hermegauss(_NODES)
    weights = weights / weights.sum()
    cdf = np.zeros_like(log_x)
    for z, pi in zip(nodes, weights, strict=True):
        r = mean + sd * z
        cdf += pi * _p99_cdf(tail, ph, np.exp(log_x - r[:, None]))
    return _Spread(log_x, cdf)


@dataclass(frozen=True)
class _Sites:
    """Where readings (or forecasts) sit for the calibration: the config, the load (the
    physics' rise of the log p99 over its light-load level there: :func:`_rise`) and the
    physics' elasticity d log p99 / d log rate there."""

    configs: tuple[TrialConfig, ...]
    z: FloatArray
    slope: FloatArray
    share: FloatArray  # the p99's share owed to stalls (ITL) or waiting (TTFT): Physics.share
    block: int = 1     # the draft block the window is measured in (residual.similarity)

    def alike(self, other: _Sites) -> FloatArray:
        """How alike the physics' errors at two configs are (:func:`residual.similarity`
        along the window: an error in the step's own cost; which batches and chunks the
        batching caps let run is the physics')."""
        return similarity(self.configs, other.configs, self.block, batching=False)

    def same(self, other: _Sites) -> FloatArray:
        index: dict[TrialConfig, int] = {}
        mine = np.asarray([index.setdefault(c, len(index)) for c in self.configs])
        theirs = np.asarray([index.setdefault(c, len(index)) for c in other.configs])
        out: FloatArray = (mine[:, None] == theirs[None, :]).astype(np.float64)
        return out


@dataclass(frozen=True)
class _Basis:
    """The parts of the covariance between two sets of sites that do not depend on the error
    sizes (computed once, combined for every size the calibration tries)."""

    parts: FloatArray  # shared offsets, weighed by each site's make-up of the tail
    trend: FloatArray  # the trend along the load (_rise)
    alike: FloatArray  # the config effect, shared by similar configs
    knee: FloatArray   # the knee's error, felt through the elasticities

    @classmethod
    def of(cls, a: _Sites, b: _Sites) -> _Basis:
        parts = np.outer(a.share, b.share) + np.outer(1.0 - a.share, 1.0 - b.share)
        knee = np.outer(a.slope, b.slope) * (1.0 + a.same(b))
        return cls(parts.astype(np.float64), np.outer(a.z, b.z).astype(np.float64),
                   a.alike(b), knee.astype(np.float64))


@dataclass(frozen=True)
class _Sizes:
    """The calibration's error sizes (log sd): per config, per reading (the nugget), and of
    the model's knee (its capacity's log error, carried into a p99 by its elasticity)."""

    config: float
    nugget: float
    knee: float
    offset: float = _OFFSET_SD

    def cross(self, a: _Sites, b: _Sites) -> FloatArray:
        """Covariance of the log residuals at ``a`` and ``b`` (the nugget excluded)."""
        return self.combine(_Basis.of(a, b))

    def combine(self, basis: _Basis) -> FloatArray:
        """The covariance with these sizes from its size-free parts."""
        out: FloatArray = (self.offset**2 * basis.parts + _TREND_SD**2 * basis.trend
                           + self.config**2 * basis.alike + self.knee**2 * basis.knee)
        return out


@dataclass(frozen=True)
class _Residual:
    """The calibration of one tail: log(measured / physics median) as a Gaussian process over
    readings — a workload-wide offset, a trend along the load, a config effect similar configs
    share, an error in where the knee is (workload-wide and per config; a reading feels it by
    the physics'
    elasticity there: near saturation a p99 moves many times faster than the rate) and a
    reading-to-reading nugget — with each reading's sampling variance as its own known noise.
    Predicts a new reading's residual (mean, variance)."""

    sites: _Sites
    alpha: FloatArray      # K⁻¹ e
    chol: FloatArray       # Cholesky factor of K
    sizes: _Sizes
    #: log marginal likelihood of the readings (with the sizes' log prior) at ``sizes``
    evidence: float = 0.0

    @classmethod
    def fit(cls, configs: Sequence[TrialConfig], rise: FloatArray, slope: FloatArray,
            share: FloatArray, error: FloatArray, noise_var: FloatArray,
            offset: float = _OFFSET_SD, block: int = 1) -> _Residual:
        sites = _Sites(tuple(configs), rise, slope, share, block)
        basis = _Basis.of(sites, sites)
        evidence, sizes = _best_sizes(basis, error, noise_var, offset)
        if not error.size:
            return cls(sites, np.zeros(0), np.zeros((0, 0)), sizes)
        # the nugget is heavy-tailed (Student-t, by one EM step): a reading the rest cannot
        # explain (a knee the physics puts elsewhere, a shape it gets wrong) takes the extra
        # variance its own leave-one-out residual asks for, instead of widening every reading's
        # nugget — which would let a tightly measured light-load reading barely move a forecast
        noise_var = noise_var + _outlier_var(sizes.cross(sites, sites), sizes.nugget,
                                             error, noise_var)
        evidence, sizes = _best_sizes(basis, error, noise_var, offset)
        chol = np.linalg.cholesky(sizes.cross(sites, sites)
                                  + np.diag(sizes.nugget**2 + noise_var))
        alpha: FloatArray = np.linalg.solve(chol.T, np.linalg.solve(chol, error))
        return cls(sites, alpha, np.asarray(chol, dtype=np.float64), sizes, evidence)

    def predict(self, configs: Sequence[TrialConfig], rise: FloatArray,
                slope: FloatArray, share: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Mean and variance of a new reading's log residual at each (config, load)."""
        at = _Sites(tuple(configs), rise, slope, share, self.sites.block)
        prior = np.diag(self.sizes.cross(at, at)) + self.sizes.nugget**2
        if not self.sites.configs:
            return np.zeros(len(configs)), prior
        cross = self.sizes.cross(at, self.sites)
        mean: FloatArray = cross @ self.alpha
        v = np.linalg.solve(self.chol, cross.T)
        var: FloatArray = np.maximum(prior - (v * v).sum(axis=0), self.sizes.nugget**2)
        return mean, var


def _best_sizes(basis: _Basis, error: FloatArray, noise_var: FloatArray, offset: float
                ) -> tuple[float, _Sizes]:
    """The error sizes of highest log marginal likelihood (with their log-normal prior) of
    ``error`` whose known noise is ``noise_var``, and that score. Every size of the grid is
    factored in one batched Cholesky (the same factorisation, matrix by matrix, as one at a
    time); the grid is walked in the order config, nugget, knee and the first best wins."""
    grid = [_Sizes(float(config), float(nugget), float(knee), offset)
            for config in _SIZES for nugget in _SIZES for knee in _SIZES]
    scores = _size_scores(basis, error, noise_var, grid)
    best: tuple[float, _Sizes] | None = None
    for score, sizes in zip(scores, grid, strict=True):
        if score is not None and (best is None or score > best[0]):
            best = (score, sizes)
    median = _SIZE_PRIOR[0]
    return best if best is not None else (0.0, _Sizes(median, median, median, offset))


def _size_scores(basis: _Basis, error: FloatArray, noise_var: FloatArray,
                 grid: Sequence[_Sizes]) -> list[float | None]:
    """The log marginal likelihood (with the sizes' log-normal prior) of ``error`` at each of
    ``grid`` (None where the covariance is not positive definite)."""
    median, prior_sd = _SIZE_PRIOR

    def prior(s: _Sizes) -> float:
        return 0.5 * sum((math.log(v / median) / prior_sd) ** 2
                         for v in (s.config, s.nugget, s.knee))

    def cov(s: _Sizes) -> FloatArray:
        out: FloatArray = s.combine(basis) + np.diag(s.nugget**2 + noise_var)
        return out

    try:
        chol = np.linalg.cholesky(np.stack([cov(s) for s in grid]))
    except np.linalg.LinAlgError:  # some size is not positive definite: one at a time
        out: list[float | None] = []
        for s in grid:
            try:
                one = np.linalg.cholesky(cov(s))
            except np.linalg.LinAlgError:
                out.append(None)
                continue
            a = np.linalg.solve(one, error)
            out.append(-0.5 * float(a @ a) - float(np.log(np.diag(one)).sum()) - prior(s))
        return out
    a = np.linalg.solve(chol, np.broadcast_to(error[:, None], (len(grid), error.size, 1)))
    return [-0.5 * float(a[k, :, 0] @ a[k, :, 0])
            - float(np.log(np.diag(chol[k])).sum()) - prior(s) for k, s in enumerate(grid)]


def _outlier_var(cross: FloatArray, nugget: float, error: FloatArray, noise_var: FloatArray
                 ) -> FloatArray:
    """Per reading, the variance a Student-t nugget (:data:`_NUGGET_DOF` degrees of freedom)
    adds to it, by one EM step from the Gaussian fit: its nugget and sampling variance scaled
    by (dof + z²) / (dof + 1) - 1 where z is its leave-one-out residual in units of its
    leave-one-out sd; 0 for a reading no worse than 1 sd off."""
    if not error.size:
        return np.zeros(0)
    inv = np.linalg.inv(cross + np.diag(nugget**2 + noise_var))
    d = np.maximum(np.diag(inv), 1e-300)
    z2 = (inv @ error / d) ** 2 * d  # LOO residual² / LOO variance
    extra = np.maximum((_NUGGET_DOF + z2) / (_NUGGET_DOF + 1.0) - 1.0, 0.0)
    out: FloatArray = extra * (nugget**2 + noise_var)
    return out


@dataclass(frozen=True)
class TailForecast:
    """Per (config, rate) row: the p99s a reading will measure (ms) — median and the
    interval of ``level`` — and the chance each, and both, meet the SLO's bounds (1 where the
    SLO has no such bound); and the chance the reading is a sustained rate
    (:mod:`autotune.predict.settle`: 1 outside a capacity reading)."""

    configs: tuple[TrialConfig, ...]
    scales: FloatArray
    level: float
    median: Mapping[str, FloatArray]
    low: Mapping[str, FloatArray]
    high: Mapping[str, FloatArray]
    chance: Mapping[str, FloatArray]
    sustained: FloatArray | None = None

    @property
    def chance_met(self) -> FloatArray:
        """The chance a capacity reading credits the rate: both tails meet their bounds and
        the reading is sustained (the three taken as independent)."""
        parts = [self.chance[t] for t in TAILS]
        if self.sustained is not None:
            parts.append(self.sustained)
        out: FloatArray = np.prod(np.vstack(parts), axis=0)
        return out


class TailModel:
    """The tail's predictive distribution for one workload (see the module doc), fitted to
    ``readings`` on the replica model with the predictor's fitted ``cost`` and ``factors``."""

    def __init__(self, workload: WorkloadModel, cost: StepCostModel, factors: ReplicaFactors,
                 slo: Slo, residuals: Mapping[str, _Residual],
                 settle: SettleCalibration | None = None) -> None:
        self.workload, self.cost, self.factors, self.slo = workload, cost, factors, slo
        self.residuals = residuals
        #: the calibrated lifetimes (:mod:`autotune.predict.settle`)
        self.settle = settle if settle is not None else SettleCalibration()

    @classmethod
    def fit(cls, workload: WorkloadModel, cost: StepCostModel, factors: ReplicaFactors,
            slo: Slo, readings: Sequence[TailReading], *, block: int) -> TailModel:
        """Calibrate both tails on ``readings`` (those the physics can replay), with the
        prefill speed that explains them best (:func:`_with_prefill`); ``block``: the draft
        block, which says how alike two windows are (:func:`residual.similarity`)."""
        rows = list(readings)
        best: tuple[float, TailModel] | None = None
        sd = float(cost.prior_sd()[COST_PARTS.index("tokens")])
        for step in (_PREFILL_STEPS if rows else (0.0,)):
            moved = _with_prefill(cost, step)
            residuals = _calibrate(workload, moved, factors, rows, block)
            score = sum(r.evidence for r in residuals.values()) - 0.5 * (step / sd) ** 2
            if best is None or score > best[0]:
                best = (score, cls(workload, moved, factors, slo, residuals))
        assert best is not None
        model = best[1]
        model.settle = _settle(workload, model.cost, factors, rows)
        return model

    def predict(self, configs: Sequence[TrialConfig], scales: Sequence[float],
                level: float = 0.9) -> TailForecast:
        """The forecast of a reading of each ``configs[i]`` at ``scales[i]`` × the sample's
        rate (ignored in a closed loop)."""
        rows = [TailReading(c, float(s), math.nan, math.nan)
                for c, s in zip(configs, scales, strict=True)]
        scale = _scales(self.workload, rows)
        ph = physics(self.workload, list(configs), scale, self.cost, self.factors)
        slopes = _elasticity(self.workload, list(configs), scale, self.cost, self.factors, ph)
        zero = np.zeros(len(rows))
        rises = _rise(self.workload, list(configs), self.cost, self.factors,
                      {t: _spread(t, ph, zero, zero).quantile(0.5) for t in TAILS})
        tail_q = (1.0 - level) / 2.0
        median, low, high, chance = {}, {}, {}, {}
        for tail in TAILS:
            mean, var = self.residuals[tail].predict(list(configs), rises[tail],
                                                     slopes[tail], ph.share(tail))
            spread = _spread(tail, ph, mean, var)
            median[tail] = np.exp(spread.quantile(0.5)) * 1000.0
            low[tail] = np.exp(spread.quantile(tail_q)) * 1000.0
            high[tail] = np.exp(spread.quantile(1.0 - tail_q)) * 1000.0
            bound = getattr(self.slo, tail)
            chance[tail] = (np.ones(len(rows)) if bound is None
                            else spread.at(math.log(bound / 1000.0)))
        sustained = None
        if self.workload.find_capacity and ph.lifetime is not None and ph.span is not None:
            sustained = self.settle.chance(settle_margins(ph.lifetime, ph.span))
        return TailForecast(tuple(configs), scale, level, median, low, high, chance, sustained)


def _with_prefill(cost: StepCostModel, step: float) -> StepCostModel:
    """``cost`` with its per-token and attention parts ``step`` further (log): how fast a
    prefill chunk runs. The predictor fits the step cost to decode steps, where a few tokens
    per sequence leave these parts loosely pinned; a reading's TTFT (its own prefill, the
    queue of others') and its stalled gaps (chunk steps) pin them."""
    scale = list(cost.log_scale)
    for part in ("tokens", "attention"):
        scale[COST_PARTS.index(part)] += step
    return cost.with_scale(tuple(scale))


def _calibrate(workload: WorkloadModel, cost: StepCostModel, factors: ReplicaFactors,
               rows: Sequence[TailReading], block: int) -> dict[str, _Residual]:
    """Both tails' calibration (:class:`_Residual`) on ``rows`` with ``cost``."""
    configs = [r.config for r in rows]
    scale = _scales(workload, rows)
    medians = _physics_medians(workload, configs, scale, cost, factors) if rows else None
    rises = (_rise(workload, configs, cost, factors, {t: medians[t][0] for t in TAILS})
             if medians is not None else None)
    residuals: dict[str, _Residual] = {}
    for tail in TAILS:
        keep, error, noise = [], [], []
        if medians is not None:
            med, q16, q84, _, _ = medians[tail]
            for i, r in enumerate(rows):
                y = r.value(tail)
                if math.isfinite(y) and y > 0 and np.isfinite([med[i], q16[i], q84[i]]).all():
                    keep.append(i)
                    error.append(math.log(y / 1000.0) - med[i])
                    noise.append(max((q84[i] - q16[i]) / 2.0, _MIN_SAMPLING_SD) ** 2)
        rise, slope, share = ((rises[tail][keep], medians[tail][3][keep],
                               medians[tail][4][keep])
                              if medians is not None and rises is not None
                              else (np.zeros(0), np.zeros(0), np.zeros(0)))
        residuals[tail] = _Residual.fit(
            [configs[i] for i in keep], rise, slope, share,
            np.asarray(error), np.asarray(noise),
            offset=_OFFSET_SD * (1.0 if cost.facts.hardware.known else UNKNOWN_HARDWARE_SD),
            block=block)
    return residuals


def _settle(wl: WorkloadModel, cost: StepCostModel, factors: ReplicaFactors,
            rows: Sequence[TailReading]) -> SettleCalibration:
    """The lifetimes' calibration (:mod:`autotune.predict.settle`) on the readings of ``rows``
    that recorded a lifetime."""
    timed = [r for r in rows if math.isfinite(r.lifetime_s) and r.lifetime_s > 0]
    if not timed or not wl.find_capacity:
        return SettleCalibration()
    ph = physics(wl, [r.config for r in timed], _scales(wl, timed), cost, factors)
    model = ph.lifetime if ph.lifetime is not None else np.full(len(timed), np.nan)
    return SettleCalibration.fit([math.log(r.lifetime_s / m) if 0 < m < math.inf else math.nan
                                  for r, m in zip(timed, model, strict=True)])


def _physics_medians(wl: WorkloadModel, configs: Sequence[TrialConfig], scale: FloatArray,
                     cost: StepCostModel, factors: ReplicaFactors
                     ) -> dict[str, tuple[FloatArray, ...]]:
    """Per tail, the physics' log median p99 (s), its 16th and 84th percentiles (sampling
    alone), its elasticity and the p99's share owed to stalls or waiting (:meth:`Physics.share`)
    at each (config, rate)."""
    ph = physics(wl, configs, scale, cost, factors)
    slopes = _elasticity(wl, configs, scale, cost, factors, ph)
    zero = np.zeros(len(configs))
    out: dict[str, tuple[FloatArray, ...]] = {}
    for tail in TAILS:
        spread = _spread(tail, ph, zero, zero)
        out[tail] = (spread.quantile(0.5), spread.quantile(0.16), spread.quantile(0.84),
                     slopes[tail], ph.share(tail))
    return out


def _rise(wl: WorkloadModel, configs: Sequence[TrialConfig], cost: StepCostModel,
          factors: ReplicaFactors, median: Mapping[str, FloatArray]) -> dict[str, FloatArray]:
    """Per tail, how far the physics' log median p99 at each row (``median``) is above the
    config's at light load (the slowest rate a capacity reading tries, :data:`MIN_SCALE`): the
    load-driven part of the p99, along which the calibration's trend runs (0 at light load,
    where the rate barely moves a p99, so readings at loaded rates do not extrapolate there;
    0 in a closed loop, whose load is the concurrency)."""
    if wl.mode == "closed" or not configs:
        return {tail: np.zeros(len(configs)) for tail in TAILS}
    unique = list(dict.fromkeys(configs))
    ph = physics(wl, unique, np.full(len(unique), MIN_SCALE), cost, factors)
    zero = np.zeros(len(unique))
    index = np.asarray([unique.index(c) for c in configs])
    out = {}
    for tail in TAILS:
        light = _spread(tail, ph, zero, zero).quantile(0.5)[index]
        out[tail] = np.maximum(np.nan_to_num(median[tail] - light), 0.0)
    return out


def _elasticity(wl: WorkloadModel, configs: Sequence[TrialConfig], scale: FloatArray,
                cost: StepCostModel, factors: ReplicaFactors, ph: Physics
                ) -> dict[str, FloatArray]:
    """d log p99 / d log rate of the physics' median at each row (0 in a closed loop, whose
    load is the concurrency), by a step of :data:`_ELASTICITY_STEP` in rate, at most
    :data:`_MAX_ELASTICITY`."""
    if wl.mode == "closed":
        return {tail: np.zeros(len(configs)) for tail in TAILS}
    faster = physics(wl, configs, scale * math.exp(_ELASTICITY_STEP), cost, factors)
    zero = np.zeros(len(configs))
    out = {}
    for tail in TAILS:
        here = _spread(tail, ph, zero, zero).quantile(0.5)
        there = _spread(tail, faster, zero, zero).quantile(0.5)
        out[tail] = np.clip(np.nan_to_num((there - here) / _ELASTICITY_STEP), 0.0,
                            _MAX_ELASTICITY)
    return out


def _scales(wl: WorkloadModel, rows: Sequence[TailReading]) -> FloatArray:
    """Each reading's arrival scale (the policy's in a closed loop: one load per config)."""
    if wl.mode == "closed":
        return np.full(len(rows), wl.time_scale)
    return np.asarray([r.scale for r in rows], dtype=np.float64)
