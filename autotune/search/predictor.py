"""Scoring every candidate config of a workload before (and between) expensive trials.

The predictor sees only what a real deployment gives it (DESIGN §7, issue 4):

- the sample's requests: lengths, arrival times and the confidence head's per-request
  acceptance predictions (:class:`~autotune.acceptance.AcceptanceModel`);
- published model and hardware facts (:class:`~autotune.search._stepcost.Facts`);
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
   measured (:mod:`._replica`);
3. what the model still gets wrong at measured configs is spread to their neighbours by a
   Gaussian process on (window, adaptive, log max_num_seqs, log max_num_batched_tokens) in
   log-objective space, which gives every prediction its standard deviation.

Nothing here imports a backend: the simulator's hidden truth stays inside ``backends/sim``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from autotune.acceptance import AcceptanceModel, Calibration, CountsObservation, calibrate
from autotune.search._replica import Grid, Knobs, Outcomes, Workload, evaluate
from autotune.search._stepcost import COST_PARTS, CostModel, Facts
from autotune.types import AcceptanceCounts, Measurement, Request, TrialConfig

__all__ = ["DECODE_STATS", "Observation", "Prediction", "Predictor", "decode_stats"]

FloatArray = npt.NDArray[np.float64]

#: Prior standard deviation of each cost part's log-multiplier (how far the facts may be off).
_COST_PRIOR_SD = {"fixed": 0.6, "experts": 0.4, "tokens": 0.4, "attention": 0.6, "drafter": 0.8}
_STEP_SD = 0.05          # measurement noise of a run's mean step time (log)
_GP_SCALE = 0.10         # prior sd of the model's error at an unmeasured config (log objective)
_SCALES = (0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.22, 0.3)
_SCALE_PRIOR_SD = 0.7    # log-normal prior of the model-error sd around _GP_SCALE
_GP_OFFSET = 0.25        # prior sd of a workload-wide offset of the model (log objective)
_GP_NOISE = 0.02         # measurement noise of one run's objective (log)
_FAR_WEIGHT = 0.3        # extra residual noise per unit of log distance below the best run
#: Prior sd of the replica model's fitted factors (log): ITL durations, TTFT wait, slot wait.
_KNOB_PRIOR_SD = {"itl": 0.15, "ttft": 0.5, "slots": 0.5}
_MIN_GAIN = 1.0          # loss improvement (in squared standard errors) a knob move must bring
#: GP lengthscales on (window / block, adaptive, log2 max_num_seqs, log2 max_num_batched_tokens)
_LENGTHS = np.array([0.25, 0.8, 1.5, 1.2])


#: Aggregates of a measurement the predictor reads step time and batch from (a summary may
#: carry them instead of the measurement): Σ decode time, Σ decoded tokens, measured span.
DECODE_STATS = ("decode_time_s", "decode_tokens", "duration_s")


def decode_stats(m: Measurement) -> dict[str, float]:
    """Σ (E2E - TTFT) and Σ (output tokens - 1) over completed requests, and the duration."""
    ok = m.ok
    return {"decode_time_s": float((m.e2e_s - m.ttft_s)[ok].sum()),
            "decode_tokens": float((m.output_tokens[ok] - 1).clip(min=0).sum()),
            "duration_s": float(m.duration_s)}


@dataclass(frozen=True)
class Observation:
    """What one measured run tells the predictor (all from the Measurement's summary)."""

    config: TrialConfig
    value: float | None
    feasible: bool
    scale: float | None = None
    step_s: float | None = None
    batch: float | None = None
    itl_p99_ms: float | None = None
    ttft_p99_ms: float | None = None
    counts: AcceptanceCounts | None = None

    @classmethod
    def from_result(cls, config: TrialConfig, value: float | None, feasible: bool,
                    summary: Mapping[str, Any] | None,
                    measurement: Measurement | None = None) -> Observation:
        """Read an observation from a trial's summary (and its measurement when at hand)."""
        s = dict(summary or {})

        def num(key: str) -> float | None:
            v = s.get(key)
            return float(v) if isinstance(v, int | float) and math.isfinite(v) else None

        counts = None
        acc = s.get("acceptance")
        if isinstance(acc, Mapping):
            try:
                counts = AcceptanceCounts.from_dict(acc)
            except (KeyError, TypeError, ValueError):
                counts = None
        if measurement is not None and measurement.acceptance is not None:
            counts = measurement.acceptance
        length = counts.mean_accepted_length if counts is not None and counts.drafts else 1.0
        step = batch = None
        stats = decode_stats(measurement) if measurement is not None else {
            k: s[k] for k in DECODE_STATS if isinstance(s.get(k), int | float)}
        if len(stats) == len(DECODE_STATS):
            decode, tokens, duration = (float(stats[k]) for k in DECODE_STATS)
            if tokens > 0 and decode > 0:
                step = decode / tokens * length
            if duration > 0:
                batch = decode / duration
        else:
            tpot, rps, tps = num("tpot_mean_ms"), num("requests_per_s"), num("output_tokens_per_s")
            if tpot and rps and tps:
                step = tpot / 1000.0 * length
                batch = rps * tpot / 1000.0 * max(tps / rps - 1.0, 0.0)
        met = s.get("capacity_met_slo")
        return cls(config=config, value=value,
                   feasible=feasible and (met is None or bool(met)),
                   scale=num("load_scale"), step_s=step, batch=batch,
                   itl_p99_ms=num("itl_p99_ms"), ttft_p99_ms=num("ttft_p99_ms"), counts=counts)


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


def _features(configs: Sequence[TrialConfig], block: int) -> FloatArray:
    return np.asarray([[c.num_speculative_tokens / max(block, 1),
                        float(c.enable_adaptive_verification and c.num_speculative_tokens > 0),
                        math.log2(c.max_num_seqs), math.log2(c.max_num_batched_tokens)]
                       for c in configs], dtype=np.float64).reshape(len(configs), 4)


def _kernel(a: FloatArray, b: FloatArray, scale: float = _GP_SCALE) -> FloatArray:
    """A workload-wide offset plus a squared-exponential model error of sd ``scale``."""
    d = (a[:, None, :] - b[None, :, :]) / _LENGTHS
    out: FloatArray = _GP_OFFSET**2 + scale**2 * np.exp(-0.5 * (d**2).sum(axis=2))
    return out


def _model_error(resid: FloatArray, x: FloatArray, noise: FloatArray) -> float:
    """The model-error sd that best explains the residuals (type-II maximum likelihood with a
    log-normal prior around ``_GP_SCALE``): small when the runs agree with the model."""
    best, best_score = _GP_SCALE, -math.inf
    for scale in _SCALES:
        k = _kernel(x, x, scale) + np.diag(noise)
        sign, logdet = np.linalg.slogdet(k)
        fit = float(resid @ np.linalg.solve(k, resid))
        prior = (math.log(scale / _GP_SCALE) / _SCALE_PRIOR_SD) ** 2
        score = -0.5 * (fit + logdet + prior)
        if sign > 0 and score > best_score:
            best, best_score = scale, score
    return best


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
                 block: int, objective: str, slo: Any, warmup: int = 0, mode: str = "trace",
                 time_scale: float = 1.0, concurrency: int = 1, find_capacity: bool = True,
                 max_model_len: int | None = None, facts: Facts | None = None,
                 fit_knobs: bool = True) -> None:
        self.facts = facts or Facts()
        self.fit_knobs = fit_knobs
        self.block = block
        self.objective = objective
        self.raw = AcceptanceModel.from_requests(requests, block)
        self.calibration = Calibration(scheme="no usable counters")
        self.configs = tuple(configs)
        self.grid = Grid.of(self.configs)
        self.cost = CostModel(self.facts)
        self.knobs = Knobs()
        self.too_long = bool(max_model_len) and any(
            r.prompt_tokens + r.output_tokens > (max_model_len or 0) for r in requests)
        self.workload = Workload(requests, self.raw, warmup=warmup, slo=slo,
                                 kv_tokens=self.facts.kv_cache_tokens(), mode=mode,
                                 time_scale=time_scale, concurrency=concurrency,
                                 find_capacity=find_capacity)
        self.observations: list[Observation] = []
        self._predictions: dict[TrialConfig, Prediction] | None = None
        self._calibrated_runs = 0
        self.model_error = _GP_SCALE

    # -- inputs -----------------------------------------------------------------------------
    def observe(self, obs: Observation) -> None:
        """Add a measured (or failed: ``value`` None) run; the next ``predict`` refits."""
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
        self.calibration = calibrate(self.raw, runs)
        self.workload.set_acceptance(self.workload.align(self.calibration.apply_to(self.raw)))

    def _fit_cost(self) -> None:
        """Ridge fit of the cost parts' log-multipliers: the replica model's mean decode step
        (prefill stalls included) at the load each run was measured at, against the run's
        decode time per token × accepted length."""
        from scipy.optimize import least_squares

        wl = self.workload
        pts = [o for o in self.measured
               if o.step_s and o.step_s > 0 and (o.scale or wl.mode == "closed")]
        if not pts:
            return
        grid = Grid.of([o.config for o in pts])
        scale = np.asarray([o.scale or wl.time_scale for o in pts])
        measured = np.log(np.asarray([o.step_s for o in pts], dtype=np.float64))
        sd = np.asarray([_COST_PRIOR_SD[p] for p in COST_PARTS])

        def residuals(x: FloatArray) -> FloatArray:
            at = evaluate(wl, grid, self.cost.with_scale(x), self.knobs, self.objective,
                          scale=scale)
            return np.concatenate([(np.log(np.maximum(at.step_s, 1e-6)) - measured) / _STEP_SD,
                                   x / sd])

        fit = least_squares(residuals, np.asarray(self.cost.log_scale), method="trf",
                            diff_step=1e-3, max_nfev=60)
        self.cost = self.cost.with_scale(fit.x)

    def _fit_knobs(self) -> None:
        """ITL, TTFT and slot-wait factors that best explain the measured capacities and p99s.

        Coordinate search on a ridge objective: measured vs predicted capacity (trace mode),
        and measured vs predicted p99 ITL and TTFT at the load each run was measured at.
        Then the objective's bias, from the values at capacity.
        """
        wl = self.workload
        pts = [o for o in self.measured if o.feasible and (o.scale or wl.mode == "closed")]
        if not pts:
            return
        grid = Grid.of([o.config for o in pts])
        scale = np.asarray([o.scale or wl.time_scale for o in pts])
        log_scale = np.log(scale)
        itl_m = np.asarray([o.itl_p99_ms or np.nan for o in pts])
        ttft_m = np.asarray([o.ttft_p99_ms or np.nan for o in pts])

        def loss(k: Knobs) -> float:
            total = (k.itl / _KNOB_PRIOR_SD["itl"]) ** 2 + (k.ttft / _KNOB_PRIOR_SD["ttft"]) ** 2 \
                + (k.slots / _KNOB_PRIOR_SD["slots"]) ** 2
            at = evaluate(wl, grid, self.cost, k, self.objective, scale=scale)
            for measured, predicted, sd in ((itl_m, at.itl_p99_ms, 0.15),
                                            (ttft_m, at.ttft_p99_ms, 0.3)):
                ok = np.isfinite(measured) & (measured > 0) & (predicted > 0)
                total += float((np.log(measured[ok] / predicted[ok]) ** 2).sum()) / sd**2
            if wl.find_capacity:
                cap = evaluate(wl, grid, self.cost, k, self.objective, bisections=9)
                total += float(((np.log(cap.scale) - log_scale) ** 2).sum()) / 0.05**2
            return total

        knobs = self.knobs
        best = loss(knobs)
        for step in (0.5, 0.25, 0.1):
            for name in ("itl", "ttft", "slots"):
                for delta in (-step, step):
                    trial = replace(knobs, **{name: getattr(knobs, name) + delta})
                    value = loss(trial)
                    # a move must explain the runs better, not just drift where they are blind
                    if value < best - _MIN_GAIN:
                        knobs, best = trial, value
        at = evaluate(wl, grid, self.cost, replace(knobs, bias=0.0), self.objective,
                      scale=scale)
        values = [o.value for o in pts]
        bias = _shrunk_log_ratio(values, at.value, prior_sd=0.2, noise_sd=0.05)
        self.knobs = replace(knobs, bias=bias)

    def _fit_bias(self) -> None:
        """Only the objective's bias (the replica model's factors stay at their prior)."""
        wl = self.workload
        pts = [o for o in self.measured if o.feasible and (o.scale or wl.mode == "closed")]
        if not pts:
            return
        grid = Grid.of([o.config for o in pts])
        scale = np.asarray([o.scale or wl.time_scale for o in pts])
        at = evaluate(wl, grid, self.cost, replace(self.knobs, bias=0.0), self.objective,
                      scale=scale)
        bias = _shrunk_log_ratio([o.value for o in pts], at.value, prior_sd=0.2, noise_sd=0.05)
        self.knobs = replace(self.knobs, bias=bias)

    # -- outputs ----------------------------------------------------------------------------
    def model_outcomes(self, configs: Sequence[TrialConfig] | None = None) -> Outcomes:
        """The fitted replica model's reading of ``configs`` (default: every candidate)."""
        grid = self.grid if configs is None else Grid.of(configs)
        return evaluate(self.workload, grid, self.cost, self.knobs, self.objective)

    def refresh(self) -> None:
        """Recalibrate, refit and re-predict every config (see the module docstring)."""
        self._calibrate()
        self._fit_cost()
        if self.fit_knobs:
            self._fit_knobs()
        else:
            self._fit_bias()
        configs = list(self.configs)
        extra = [o.config for o in self.measured if o.config not in set(configs)]
        grid_all = configs + extra
        out = self.model_outcomes(grid_all)
        model_log = np.log(np.maximum(out.value, 1e-12))
        feats = _features(grid_all, self.block)
        mean = model_log.copy()
        pts = [o for o in self.measured if o.feasible and o.value and o.value > 0]
        scale = _GP_SCALE
        var = np.full(len(grid_all), _GP_OFFSET**2 + scale**2)
        if pts:
            index = {c: i for i, c in enumerate(grid_all)}
            rows = [index[o.config] for o in pts]
            values = np.log([o.value or 1.0 for o in pts])
            resid = values - model_log[rows]
            x = feats[rows]
            # what matters is the model near the top: a run far below the best counts as a
            # noisier reading of the residual there (it says little about the optimum)
            noise = _GP_NOISE**2 + (_FAR_WEIGHT * np.maximum(values.max() - values, 0.0)) ** 2
            scale = _model_error(resid, x, noise)
            k_xx = _kernel(x, x, scale) + np.diag(noise)
            k_sx = _kernel(feats, x, scale)
            alpha = np.linalg.solve(k_xx, resid)
            mean = model_log + k_sx @ alpha
            v = np.linalg.solve(k_xx, k_sx.T)
            var = np.maximum(_GP_OFFSET**2 + scale**2 - (k_sx * v.T).sum(axis=1), 1e-8)
        self.model_error = scale
        sd = np.sqrt(var)
        margin_sd = 0.15
        risk = 1.0 - _normal_cdf(out.margin / margin_sd)
        risk = np.where(out.feasible, risk, np.maximum(risk, 0.5))
        if self.too_long:
            risk = np.ones_like(risk)
        preds = {}
        for i, c in enumerate(grid_all):
            preds[c] = Prediction(
                config=c, value=float(math.exp(mean[i])),
                low=float(math.exp(mean[i] - 1.645 * sd[i])),
                high=float(math.exp(mean[i] + 1.645 * sd[i])),
                log_mean=float(mean[i]), log_sd=float(sd[i]), risk=float(risk[i]),
                detail={"model": float(out.value[i]), "scale": float(out.scale[i]),
                        "step_ms": float(out.step_s[i] * 1000.0),
                        "batch": float(out.batch[i]),
                        "tokens_per_step": float(out.tokens_per_step[i]),
                        "itl_p99_ms": float(out.itl_p99_ms[i]),
                        "ttft_p99_ms": float(out.ttft_p99_ms[i])})
        self._predictions = preds

    def predict(self) -> dict[TrialConfig, Prediction]:
        """Predictions for every candidate (and every measured config), refitting if needed."""
        if self._predictions is None:
            self.refresh()
        assert self._predictions is not None
        return self._predictions


def _shrunk_log_ratio(measured: Sequence[float | None], predicted: FloatArray, *,
                      prior_sd: float, noise_sd: float) -> float:
    """Posterior mean of a shared log factor from log(measured / predicted), prior N(0, sd²)."""
    logs = [math.log(m / p) for m, p in zip(measured, predicted, strict=True)
            if m is not None and m > 0 and p > 0 and math.isfinite(p)]
    if not logs:
        return 0.0
    precision = 1.0 / prior_sd**2 + len(logs) / noise_sd**2
    return float(sum(logs) / noise_sd**2 / precision)
