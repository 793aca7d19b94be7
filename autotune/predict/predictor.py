"""Scoring every candidate config of a workload before (and between) expensive trials.

The predictor sees only what a real deployment gives it:

- the sample's requests: lengths, arrival times and the confidence head's per-request
  acceptance predictions (:class:`~autotune.acceptance.AcceptanceModel`);
- published model and hardware facts (:class:`~autotune.predict.facts.Facts`);
- the measurements of the runs the search pays for (:class:`Observation`): acceptance
  counters, the capacity it was read at, mean step time and decoding batch, latency p99s.

From them it predicts, for every config, the objective (goodput or output tokens/s, at capacity
in trace mode) and its SLO risk, with an interval. How:

1. the acceptance model is calibrated against every run's per-position counters
   (:func:`~autotune.acceptance.calibrate`: per-position temperature or isotonic, by held-out
   error);
2. the step-cost model's per-part multipliers are fitted (ridge towards the facts) to the mean
   step times the runs measured at their measured batch; the replica model's ITL and TTFT
   factors to the p99s measured; its usable share of ``max_num_seqs`` to the capacities
   measured (:mod:`autotune.predict.replica`). Twice: continuing from the last fit and from
   the facts; steps 3 and 4 correct each, and the predictions are their mixture, weighed by
   how well each explains the runs (:meth:`Predictor._fits`);
3. what the model still gets wrong at measured configs is spread to their neighbours
   (:mod:`autotune.predict.residual`, a Gaussian process in log-objective space), which gives
   every prediction its standard deviation; an unread config's is widened as far as the
   predictions missed the first readings that tested them (:mod:`autotune.predict.prequential`);
4. where no run pins a config (:func:`~autotune.predict.residual.unpinned`: no run near its
   ``max_num_batched_tokens``), the fitted model's reading is averaged
   with the facts' own and half their gap is added to its uncertainty: a fit made at one
   prefill budget is an extrapolation at another;
5. a config the model predicts is held back by another SLO tail than it predicts at every
   run (p99 TTFT, the queue, where it puts every run's p99 ITL nearer its bound, or the
   reverse) gets the prior's error variance on top
   (:func:`~autotune.predict.residual.novel_regime`): the error size the runs taught was
   learned in another regime.

Nothing here imports a backend: the simulator's hidden truth stays inside ``backends/sim``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from autotune.acceptance import (
    AcceptanceModel,
    CountsObservation,
    HeadCalibration,
    calibrate,
    measured_conditional,
)
from autotune.predict.facts import Facts
from autotune.predict.observation import Observation
from autotune.predict.prequential import check_score, checks_prediction, spread_factor
from autotune.predict.replica import ReplicaOutcomes, predict_replica
from autotune.predict.residual import (
    GP_SCALE,
    binding_tail,
    fit_margin,
    fit_residual,
    novel_regime,
    shrunk_log_ratio,
    uncapped,
    unpinned,
)
from autotune.predict.step_cost import COST_PARTS, StepCostModel
from autotune.predict.tail import TailModel
from autotune.predict.workload import ConfigGrid, ReplicaFactors, WorkloadModel
from autotune.types import Request, Slo, TrialConfig

__all__ = ["Prediction", "Predictor"]

FloatArray = npt.NDArray[np.float64]

_STEP_SD = 0.05          # measurement noise of a run's mean step time (log)
#: Replays of one config at rates within this factor of each other ran about the same batch:
#: their mean steps differ by the replay's noise, not by what the model gets wrong, so they
#: share one point's weight in the step-cost fit (:func:`_crowd_weights`). The readings that
#: pin a capacity to 3% lie within a few per cent of one another; without this, a reading
#: that pins its knee with five readings tells the fit five times what it tells it once.
_SAME_LOAD = math.log(1.25)
#: Prior sd of the replica model's fitted factors (log): ITL durations, TTFT wait, slot wait.
_FACTOR_PRIOR_SD = {"itl": 0.15, "ttft": 0.5, "slots": 0.5}
_MIN_GAIN = 1.0          # loss improvement (in squared standard errors) a factor move must bring
_Z95 = 1.645             # one-sided z of the 95th percentile
#: The log-multipliers a part alone is tried over to match the measured steps
#: (:meth:`Predictor._part_starts`): from a tenth of the facts' to e^20 (10^8 times slower).
_PART_RANGE = (-2.3, 20.0)
#: A fitted cost part this many prior sds from the facts says they do not describe the device.
_BEYOND_PRIOR = 3.0
#: A fit whose weight in the mixture is below this is left out (it explains the runs far worse).
_MIN_WEIGHT = 1e-3


@dataclass(frozen=True)
class Prediction:
    """The predictor's view of one config: objective with an interval, and SLO risk."""

    config: TrialConfig
    value: float            # median prediction of the objective
    low: float              # ~5th percentile
    high: float             # ~95th percentile (the optimistic prediction)
    log_mean: float
    log_sd: float
    risk: float             # probability the config misses the SLOs (infeasible)
    detail: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class _Fit:
    """One fit of the replica model to the runs: its step cost and factors, and the loss it
    leaves (squared standardized errors of the runs, priors included)."""

    cost: StepCostModel
    factors: ReplicaFactors
    loss: float = 0.0
    #: how many measured values the loss sums the errors of (the priors' terms not counted)
    terms: int = 0


@dataclass(frozen=True)
class _Member:
    """One fit's corrected predictions of every config (log objective and margin, with their
    variances) and its raw reading (for the prediction's detail)."""

    out: ReplicaOutcomes
    log_mean: FloatArray
    log_var: FloatArray
    margin: FloatArray
    margin_var: FloatArray
    model_error: float


def _same_fit(a: _Fit, b: _Fit, tol: float = 1e-3) -> bool:
    """Whether two fits landed on the same parameters (one of them is enough)."""
    return bool(np.allclose(a.cost.log_scale, b.cost.log_scale, atol=tol)
                and np.allclose(dataclasses.astuple(a.factors), dataclasses.astuple(b.factors),
                                atol=tol))


def _mixture(weights: FloatArray, means: Sequence[FloatArray], variances: Sequence[FloatArray]
             ) -> tuple[FloatArray, FloatArray]:
    """Mean and variance of a mixture of normals (per config)."""
    m, v = np.vstack(means), np.vstack(variances)
    mean: FloatArray = weights @ m
    var: FloatArray = weights @ (v + (m - mean) ** 2)
    return mean, var


def _normal_cdf(x: FloatArray) -> FloatArray:
    from scipy.special import ndtr

    out: FloatArray = ndtr(x)
    return out


class Predictor:
    """Predicts the objective of every config of ``configs`` for one workload (see module).

    ``observe`` adds a measured run; predictions are refreshed lazily on the next ``predict``.
    Not thread-safe; one instance per workload and search.
    """

    def __init__(self, requests: Sequence[Request], configs: Iterable[TrialConfig], *,
                 block: int, objective: str, slo: Slo, warmup: int = 0, mode: str = "trace",
                 time_scale: float = 1.0, concurrency: int = 1, find_capacity: bool = True,
                 max_model_len: int | None = None, facts: Facts,
                 fit_factors: bool = True, window_s: float | None = None) -> None:
        self.facts = facts
        self.slo = slo
        #: the rate (× the sample's) a config must serve within the SLO
        self.target = time_scale
        self.fit_factors = fit_factors
        self.block = block
        self.objective = objective
        self.raw = AcceptanceModel.from_requests(requests, block)
        self.configs = tuple(configs)
        self.grid = ConfigGrid.of(self.configs)
        self.too_long = bool(max_model_len) and any(
            r.prompt_tokens + r.output_tokens > (max_model_len or 0) for r in requests)
        self.workload = WorkloadModel(requests, self.raw, warmup=warmup, slo=slo,
                                      kv_tokens=self.facts.kv_cache_tokens(), mode=mode,
                                      time_scale=time_scale, concurrency=concurrency,
                                      find_capacity=find_capacity, window_s=window_s)
        self.observations: list[Observation] = []
        #: (config, score) of every prediction a config's first reading put to the test
        self.checks: list[tuple[TrialConfig, float]] = []
        self._unfitted()

    def _unfitted(self) -> None:
        """Forget every fit (the head's calibration, the step cost and factors, the
        predictions and the tail model): the state before any run was observed."""
        self.calibration = HeadCalibration(scheme="no usable counters")
        self.cost = StepCostModel(self.facts)
        self.factors = ReplicaFactors()
        self._state = _Fit(self.cost, self.factors)  # where the next refit starts
        self._predictions: dict[TrialConfig, Prediction] | None = None
        #: the tail model fitted on the predictions it was fitted with (refitted after a refresh)
        self._tail: tuple[dict[TrialConfig, Prediction], TailModel] | None = None
        self._calibrated_runs = 0
        self.model_error = GP_SCALE
        self.spread = 1.0  # how much wider than the residual's an unread config's spread is

    # -- inputs -----------------------------------------------------------------------------
    def observe(self, obs: Observation) -> None:
        """Add a measured (or failed: ``value`` None) run; the next ``predict`` refits. A
        config's first reading is scored against the prediction held for it (prequential)."""
        if checks_prediction(obs, self.observations) and obs.config in (preds := self.predict()):
            self.checks.append((obs.config, check_score(obs, preds[obs.config])))
        self.observations.append(obs)
        self._predictions = None

    @property
    def measured(self) -> list[Observation]:
        return [o for o in self.observations if o.value is not None]

    # -- fitting ----------------------------------------------------------------------------
    def _calibrate(self) -> None:
        runs = [CountsObservation(o.config.num_speculative_tokens, o.counts)
                for o in self.observations
                if o.counts is not None and o.config.num_speculative_tokens > 0
                and not o.config.enable_adaptive_verification]
        if len(runs) == self._calibrated_runs:
            return
        self._calibrated_runs = len(runs)
        if self.raw.with_predictions == 0:
            # no head predictions: the drafter's measured curve is the acceptance model
            measured = measured_conditional(runs, self.block)
            if measured is not None:
                self.calibration = HeadCalibration(scheme="no predictions: measured curve",
                                                   runs=len(runs))
                self.workload.set_acceptance(self.workload.align(self.raw.with_conditional(
                    np.broadcast_to(measured, self.raw.conditional.shape).copy())))
            return
        self.calibration = calibrate(self.raw, runs)
        self.workload.set_acceptance(self.workload.align(self.calibration.apply_to(self.raw)))

    def _step_points(self) -> list[tuple[TrialConfig, float, float]]:
        """(config, arrival scale, measured mean step) of every replay the runs made: the
        capacity reading replays a trace at several rates on one replica, which profiles its
        step time at several batch sizes for free."""
        wl = self.workload
        out = []
        for o in self.measured:
            if o.points and wl.mode != "closed":
                out += [(o.config, scale, step) for scale, step, _ in o.points if step > 0]
            elif o.step_s and o.step_s > 0 and (o.scale or wl.mode == "closed"):
                out.append((o.config, o.scale or wl.time_scale, o.step_s))
        return out

    def _fit_cost(self, cost: StepCostModel, factors: ReplicaFactors) -> StepCostModel:
        """Ridge fit of the cost parts' log-multipliers, from ``cost``: the replica model's
        mean decode step (prefill stalls included) at every load the runs were replayed at,
        against the measured decode time per token × accepted length."""
        from scipy.optimize import least_squares

        residuals = self._cost_residuals(cost, factors)
        if residuals is None:
            return cost
        fit = least_squares(residuals, np.asarray(cost.log_scale), method="trf",
                            diff_step=1e-3, max_nfev=60)
        return cost.with_scale(fit.x)

    def _cost_residuals(self, cost: StepCostModel, factors: ReplicaFactors
                        ) -> Callable[[FloatArray], FloatArray] | None:
        """The step-cost fit's standardized residuals (priors included) as a function of the
        log-multipliers; None when no run measured a step."""
        wl = self.workload
        pts = self._step_points()
        if not pts:
            return None
        grid = ConfigGrid.of([c for c, _, _ in pts])
        scale = np.asarray([s for _, s, _ in pts])
        measured = np.log(np.asarray([step for _, _, step in pts], dtype=np.float64))
        weight = _crowd_weights([c for c, _, _ in pts], scale)
        sd = cost.prior_sd()

        def residuals(x: FloatArray) -> FloatArray:
            at = predict_replica(wl, grid, cost.with_scale(x), factors, self.objective,
                                 scale=scale)
            misfit = (np.log(np.maximum(at.step_s, 1e-6)) - measured) / _STEP_SD
            return np.concatenate([misfit * weight, x / sd])

        return residuals

    def _fit_factors(self, cost: StepCostModel, factors: ReplicaFactors
                     ) -> tuple[ReplicaFactors, float, int]:
        """ITL, TTFT and slot-wait factors that best explain the measured capacities and p99s,
        searched from ``factors``; the loss they leave and how many measured values it sums.

        Coordinate search on a ridge objective: measured vs predicted capacity (trace mode),
        and measured vs predicted p99 ITL and TTFT at the load each run was measured at.
        Then the objective's bias, from the values at capacity.
        """
        wl = self.workload
        pts = [o for o in self.measured if o.feasible and (o.scale or wl.mode == "closed")]
        if not pts:
            return factors, 0.0, 0
        grid = ConfigGrid.of([o.config for o in pts])
        scale = np.asarray([o.scale or wl.time_scale for o in pts])
        log_scale = np.log(scale)
        itl_m = np.asarray([o.itl_p99_ms or np.nan for o in pts])
        ttft_m = np.asarray([o.ttft_p99_ms or np.nan for o in pts])
        terms = int(sum(np.isfinite(m).sum() for m in (itl_m, ttft_m))) \
            + (len(pts) if wl.find_capacity else 0)

        def loss(k: ReplicaFactors) -> float:
            total = (k.itl / _FACTOR_PRIOR_SD["itl"]) ** 2 \
                + (k.ttft / _FACTOR_PRIOR_SD["ttft"]) ** 2 \
                + (k.slots / _FACTOR_PRIOR_SD["slots"]) ** 2
            at = predict_replica(wl, grid, cost, k, self.objective, scale=scale)
            for measured, predicted, sd in ((itl_m, at.itl_p99_ms, 0.15),
                                            (ttft_m, at.ttft_p99_ms, 0.3)):
                ok = np.isfinite(measured) & (measured > 0) & (predicted > 0)
                total += float((np.log(measured[ok] / predicted[ok]) ** 2).sum()) / sd**2
            if wl.find_capacity:
                cap = predict_replica(wl, grid, cost, k, self.objective, bisections=9)
                total += float(((np.log(cap.scale) - log_scale) ** 2).sum()) / 0.05**2
            return total

        best = loss(factors)
        for step in (0.5, 0.25, 0.1):
            for name in ("itl", "ttft", "slots"):
                for delta in (-step, step):
                    trial = replace(factors, **{name: getattr(factors, name) + delta})
                    value = loss(trial)
                    # a move must explain the runs better, not just drift where they are blind
                    if value < best - _MIN_GAIN:
                        factors, best = trial, value
        return self._with_bias(cost, factors), best, terms

    def _with_bias(self, cost: StepCostModel, factors: ReplicaFactors) -> ReplicaFactors:
        """``factors`` with the objective's bias fitted to the values measured at capacity."""
        wl = self.workload
        pts = [o for o in self.measured if o.feasible and (o.scale or wl.mode == "closed")]
        if not pts:
            return factors
        grid = ConfigGrid.of([o.config for o in pts])
        scale = np.asarray([o.scale or wl.time_scale for o in pts])
        at = predict_replica(wl, grid, cost, replace(factors, bias=0.0), self.objective,
                             scale=scale)
        bias = shrunk_log_ratio([o.value for o in pts], at.value, prior_sd=0.2, noise_sd=0.05)
        return replace(factors, bias=bias)

    def _fit(self, start: _Fit) -> _Fit:
        """The step cost, then the replica factors (or only the objective's bias), fitted to
        every run from ``start``; with the loss the fit leaves (squared standardized errors,
        priors included), by which fits from different starts are weighed."""
        cost = self._fit_cost(start.cost, start.factors)
        if self.fit_factors:
            factors, loss, terms = self._fit_factors(cost, start.factors)
        else:
            factors, loss, terms = self._with_bias(cost, start.factors), 0.0, 0
        residuals = self._cost_residuals(cost, factors)
        if residuals is not None:
            loss += float((residuals(np.asarray(cost.log_scale)) ** 2).sum())
            terms += len(self._step_points())
        return _Fit(cost, factors, loss, terms)

    # -- outputs ----------------------------------------------------------------------------
    def _beyond_facts(self, fitted: StepCostModel) -> bool:
        """Whether the facts do not describe this replica's step: its hardware is not in their
        table, and the fit from them had to move some part by more than
        :data:`_BEYOND_PRIOR` of its prior sds (they are off by more than they allow). Within
        that, the facts' split of a step into its parts is kept (a GPU missing from the table
        is still a GPU)."""
        if self.facts.hardware.known:
            return False
        moved = np.abs(np.asarray(fitted.log_scale)) / fitted.prior_sd()
        return bool(moved.max() > _BEYOND_PRIOR)

    def _part_starts(self) -> list[StepCostModel]:
        """Where a fit of the step cost starts when the facts do not describe the replica
        (:meth:`_beyond_facts`): one start per part, that part alone moved until the model's
        steps match the measured ones (the mean of their logs), the others at the facts'.

        The facts' split of a step into its parts is a GPU's. A fit from the facts moves the
        parts whose effect is visible there and leaves one that is negligible there at the
        facts', however much of this device's step it is: its derivative is nil. Which part
        carries a step decides how the configs the runs did not read compare (on a device
        whose per-token compute is most of a step, a short window verifies fewer tokens per
        step and is faster, where on a GPU it is slower). From each start the fit finds that
        part's basin; the runs weigh the fits (:meth:`_fits`), and where they explain them
        alike, the predictions are uncertain where the fits disagree."""
        from scipy.optimize import brentq

        residuals = self._cost_residuals(StepCostModel(self.facts), ReplicaFactors())
        if residuals is None:
            return []
        points = len(self._step_points())
        zero = np.zeros(len(COST_PARTS))

        def gap(part: int, x: float) -> float:
            moved = zero.copy()
            moved[part] = x
            return float(residuals(moved)[:points].mean())

        starts = []
        for part in range(len(COST_PARTS)):
            lo, hi = gap(part, _PART_RANGE[0]), gap(part, _PART_RANGE[1])
            if lo < 0.0 < hi:
                x = brentq(lambda v, k=part: gap(k, v), *_PART_RANGE, xtol=0.05)
                starts.append(StepCostModel(self.facts).with_scale(
                    tuple(x if k == part else 0.0 for k in range(len(COST_PARTS)))))
        return starts

    def model_outcomes(self, configs: Sequence[TrialConfig] | None = None) -> ReplicaOutcomes:
        """The fitted replica model's reading of ``configs`` (default: every candidate)."""
        grid = self.grid if configs is None else ConfigGrid.of(configs)
        return predict_replica(self.workload, grid, self.cost, self.factors, self.objective)

    def _fits(self) -> list[tuple[float, _Fit]]:
        """The fits the predictions mix, with their weights.

        A few runs rarely pin every part of the model: fits from different starts can explain
        them equally well and disagree far from them (on Kimi EAGLE-3 long code prompts, after
        the baseline and one run at 2048 tokens, the fit continued from the baseline's put the
        8192-token configs at 7.8 req/s and the 2048-token ones at 4.8; a fit of the same two
        runs from the facts put them at 1.4 and 7.2; the oracle reads 5.9 and 7.0). So the
        fit continued from the last refresh and a fit from the facts are both kept (and, when
        the facts do not describe the replica, a fit from each part's start:
        :meth:`_part_starts`), weighed by how well they explain the runs (exp(-loss / 2));
        where they disagree, the predictions are uncertain. The better one is where the next
        refresh continues from.

        The losses are in units of the noise each measured value is assumed to carry. When even
        the best fit leaves errors larger than that (its loss per measured value above 1, the
        model cannot explain the runs), the noise was understated by that factor and a gap
        between two fits says that much less: the gap is divided by it before it weighs them
        (the Birge ratio). Without this, a model off by several noise sds everywhere would
        pick one of two fits it explains equally badly by a few units of a loss in hundreds,
        and which one it picks would turn on those few units.
        """
        warm = self._fit(self._state)
        fits = [warm]
        if self.measured:
            cold = self._fit(_Fit(StepCostModel(self.facts), ReplicaFactors()))
            others = [cold]
            if self._beyond_facts(cold.cost):
                others += [self._fit(_Fit(start, ReplicaFactors()))
                           for start in self._part_starts()]
            for fit in others:
                if not any(_same_fit(fit, f) for f in fits):
                    fits.append(fit)
        fits.sort(key=lambda f: f.loss)
        self._state = fits[0]
        self.cost, self.factors = fits[0].cost, fits[0].factors
        birge = max(1.0, fits[0].loss / fits[0].terms) if fits[0].terms else 1.0
        weights = [math.exp(-(f.loss - fits[0].loss) / (2.0 * birge)) for f in fits]
        total = sum(weights)
        return [(w / total, f) for w, f in zip(weights, fits, strict=True)
                if w / total >= _MIN_WEIGHT]  # the best fit's own weight is at least 1/2

    def refresh(self) -> None:
        """Recalibrate, refit and re-predict every config (see the module docstring)."""
        self._calibrate()
        configs = list(self.configs)
        extra = list(dict.fromkeys(o.config for o in self.observations
                                   if o.config not in set(configs)))
        grid_all = configs + extra
        fits = self._fits()
        w = np.asarray([weight for weight, _ in fits])
        w = w / w.sum()
        members = [self._member(fit, grid_all) for _, fit in fits]
        mean, var = _mixture(w, [m.log_mean for m in members], [m.log_var for m in members])
        # more slots than a run ever filled are not much worse than that run (residual.uncapped)
        for i, floor in uncapped(grid_all, [(o.config, o.value, o.batch) for o in self.measured
                                            if o.feasible and o.value and o.batch is not None]):
            mean[i] = max(mean[i], floor)
        margin, margin_var = _mixture(w, [m.margin for m in members],
                                      [m.margin_var for m in members])
        self.model_error = float(w @ np.asarray([m.model_error for m in members]))
        out = members[0].out
        model_sd = np.sqrt(var)
        self.spread = spread_factor([z for _, z in self.checks])  # as the misses show
        read = {o.config for o in self.observations}
        sd = np.where([c in read for c in grid_all], model_sd, model_sd * self.spread)
        risk = 1.0 - _normal_cdf(margin / np.sqrt(margin_var))
        if self.too_long:
            risk = np.ones_like(risk)
        preds = {}
        for i, c in enumerate(grid_all):
            preds[c] = Prediction(
                config=c, value=float(math.exp(mean[i])),
                low=float(math.exp(mean[i] - _Z95 * sd[i])),
                high=float(math.exp(mean[i] + _Z95 * sd[i])),
                log_mean=float(mean[i]), log_sd=float(sd[i]), risk=float(risk[i]),
                detail={"model": float(out.value[i]), "scale": float(out.scale[i]),
                        "step_ms": float(out.step_s[i] * 1000.0),
                        "batch": float(out.batch[i]),
                        "tokens_per_step": float(out.tokens_per_step[i]),
                        "itl_p99_ms": float(out.itl_p99_ms[i]),
                        "ttft_p99_ms": float(out.ttft_p99_ms[i]),
                        "fits": float(len(members)), "model_sd": float(model_sd[i])})
        self._predictions = preds

    def _member(self, fit: _Fit, grid_all: Sequence[TrialConfig]) -> _Member:
        """One fit's predictions of ``grid_all``, corrected by the runs (residual GPs)."""
        out = predict_replica(self.workload, ConfigGrid.of(grid_all), fit.cost, fit.factors,
                              self.objective)
        index = {c: i for i, c in enumerate(grid_all)}
        values = [(index[o.config], o.value) for o in self.measured
                  if o.feasible and o.value and o.value > 0]
        model_log = np.log(np.maximum(out.value, 1e-12))
        model_margin = self._model_margin(out)
        pin = unpinned(grid_all, self.block, sorted({index[o.config] for o in self.measured}))
        spread_value = spread_margin = np.zeros(len(grid_all))
        prior = self._prior_outcomes(grid_all, fit)
        if prior is not None:
            # where no run pins a config, the fitted model and the facts' own are two
            # equally likely readings of it (a correction fitted at one prefill budget is an
            # extrapolation at another): predict their midpoint, with half
            # their gap as uncertainty; a pinned config keeps the fitted reading
            d_value = (model_log - np.log(np.maximum(prior.value, 1e-12))) / 2.0
            d_margin = (model_margin - self._model_margin(prior)) / 2.0
            model_log = model_log - pin * d_value
            model_margin = model_margin - pin * d_margin
            spread_value, spread_margin = d_value**2, d_margin**2
        value_fit = fit_residual(grid_all, model_log, self.block, values)
        margin_fit = fit_margin(grid_all, model_margin, self.block,
                                [(index[o.config], -1.0 if o.margin is None else o.margin,
                                  o.margin is None or o.margin_censored)
                                 for o in self.observations
                                 if o.margin is not None or o.value is None])
        novel = novel_regime(binding_tail(out.itl_p99_ms, out.ttft_p99_ms, self.slo),
                             sorted({index[o.config] for o in self.measured}))
        return _Member(out, value_fit.log_mean,
                       value_fit.log_sd**2 + pin * spread_value + novel * GP_SCALE**2,
                       margin_fit.log_mean, margin_fit.log_sd**2 + pin * spread_margin,
                       value_fit.model_error)

    def _prior_outcomes(self, configs: Sequence[TrialConfig], fit: _Fit
                        ) -> ReplicaOutcomes | None:
        """The replica model on the facts alone (no fitted step-cost multiplier or replica
        factor; ``fit``'s workload-wide bias of the objective kept): None before any fit moved
        them, and on hardware the facts do not describe, where they are no prior to measure
        the fit's drift from."""
        prior_factors = ReplicaFactors(bias=fit.factors.bias)
        if (not self.facts.hardware.known or not self.measured
                or (not any(fit.cost.log_scale) and fit.factors == prior_factors)):
            return None
        return predict_replica(self.workload, ConfigGrid.of(configs), StepCostModel(self.facts),
                               prior_factors, self.objective)

    def _model_margin(self, out: ReplicaOutcomes) -> FloatArray:
        """The model's margin to the SLO at the target rate (log; the measured ones' scale):
        log(capacity / target) with the capacity reading, else log(bound / p99)."""
        if self.workload.find_capacity:
            scale = np.maximum(out.scale, 1e-9)
            return np.where(out.feasible, np.log(scale / self.target),
                            np.log(scale / self.target) - 1.0)
        return np.where(out.feasible, out.margin, np.minimum(out.margin, -0.1))

    def tail_model(self) -> TailModel:
        """The p99s' predictive distribution at any rate (:mod:`autotune.predict.tail`), on
        the current best fit, calibrated on every reading of every run measured. Fitted once
        per refresh: until a new run is observed, every call returns the same model."""
        preds = self.predict()
        if self._tail is None or self._tail[0] is not preds:
            self._tail = (preds, TailModel.fit(self.workload, self.cost, self.factors, self.slo,
                                               [t for o in self.measured for t in o.tails],
                                               block=self.block))
        return self._tail[1]

    def held_out(self, config: TrialConfig) -> Prediction:
        """``config``'s prediction from every run but its own: a copy of this predictor,
        refitted from the facts on the other observations (this one is left as it is). How
        well such predictions cover the held readings is how calibrated the predictor is."""
        import copy

        other = copy.deepcopy(self)
        other.observations = [o for o in self.observations if o.config != config]
        other.checks = [(c, z) for c, z in self.checks if c != config]
        other._unfitted()
        other._calibrated_runs = -1  # recalibrate the head even from no runs
        other.workload.set_acceptance(other.workload.align(other.raw))
        return other.predict()[config]

    def predict(self) -> dict[TrialConfig, Prediction]:
        """Predictions for every candidate (and every measured config), refitting if needed."""
        if self._predictions is None:
            self.refresh()
        assert self._predictions is not None
        return self._predictions


def _crowd_weights(configs: Sequence[TrialConfig], scale: FloatArray) -> FloatArray:
    """Each step point's residual weight: 1 / sqrt(the points of its config whose rate is
    within :data:`_SAME_LOAD` of its own, itself included), so a crowd of readings at one load
    weighs about what one reading there does."""
    log_scale = np.log(scale)
    same = np.asarray([[a == b for b in configs] for a in configs])
    near = np.abs(log_scale[:, None] - log_scale[None, :]) <= _SAME_LOAD
    out: FloatArray = 1.0 / np.sqrt((same & near).sum(axis=1))
    return out
