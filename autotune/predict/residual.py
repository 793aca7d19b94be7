"""What the replica model still gets wrong at measured configs, spread to their neighbours.

A Gaussian process on (window / block, adaptive, log2 max_num_seqs, log2
max_num_batched_tokens) in log-objective space: a workload-wide offset plus a
squared-exponential model error whose size, how far it carries along ``max_num_seqs``, and how
much of it is the batching's alone (shared by every window) are not known. The value's
process averages its predictions over them, each weighed by how well it explains the runs
(its marginal likelihood times a prior); the margin's takes the likeliest. It gives every
prediction its mean correction and its standard deviation.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autotune.types import Slo, TrialConfig

__all__ = ["CAP_BINDS", "GP_NOISE", "GP_OFFSET", "GP_SCALE", "MARGIN_NOISE", "MARGIN_SCALE",
           "MORE_SLOTS_LOSS", "Residual", "binding_tail", "fit_margin", "fit_residual",
           "novel_regime", "shrunk_log_ratio", "similarity", "uncapped", "unpinned"]

FloatArray = npt.NDArray[np.float64]

GP_SCALE = 0.10          # prior sd of the model's error at an unmeasured config (log objective)
_SCALES = (0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.22, 0.3)
_SCALE_PRIOR_SD = 0.7    # log-normal prior of the model-error sd around GP_SCALE
GP_OFFSET = 0.25         # prior sd of a workload-wide offset of the model (log objective)
GP_NOISE = 0.02          # measurement noise of one run's objective (log)
_FAR_WEIGHT = 0.3        # extra residual noise per unit of log distance below the best run
#: The model-error sd is at least this share of how far the fitted model misses the runs on
#: average (log): on one CPU core, where the model missed every run by 35-45%, it ranked 32
#: sequences 28% below 8 sequences; they read 4% above.
_LEVEL_SHARE = 0.5
#: GP lengthscales on (window / block, adaptive, log2 max_num_seqs, log2 max_num_batched_tokens)
_LENGTHS = np.array([0.25, 0.8, 1.5, 1.2])
#: The lengthscales along log2 ``max_num_seqs`` the value's GP chooses from (log-normal prior
#: around _LENGTHS' 1.5, sd _SCALE_PRIOR_SD). Whether the model's error carries from one cap to
#: another is the workload's: where batches stay below every cap the space offers, configs
#: that differ only in it read alike (one CPU core, chat-high, window 1, 2048 tokens: 32 and
#: 128 sequences within 1.3%), while a burst the cap clips can set them 36% apart. Runs that
#: differ only in the cap show which it is; with 1.5 alone, a run at 8 sequences left the
#: same config at 128 with 98% of its prior variance.
_SLOT_LENGTHS = (1.5, 3.0, 6.0)
_SLOT_AXIS = 2
#: The shares of the model-error variance the value's GP chooses from for a part that depends
#: on the batching knobs alone (log2 ``max_num_seqs`` and ``max_num_batched_tokens``), the same
#: at every window and verification mode. What the replica model gets wrong about a prefill
#: budget or a slot count (its chunk stalls, its slot wait) is mostly the engine's, not the
#: drafter's. With the window's short lengthscale alone, a budget's gain read at one window
#: reaches the next window at a correlation of about 0.6 (Kimi EAGLE-3, code: window 5 read
#: 6.94 at 2048 tokens and 5.71 at 8192, window 3 read 5.76 at 8192, and the model kept window
#: 3 at 2048 at 5.2-6.3; it reads 6.98). Runs at two windows that move alike with the budget
#: choose a share; runs that move apart choose none.
_BATCHING_SHARES = (0.0, 0.5, 0.8)
_BATCHING_AXES = slice(2, 4)


def _features(configs: Sequence[TrialConfig], block: int) -> FloatArray:
    return np.asarray([[c.num_speculative_tokens / max(block, 1),
                        float(c.enable_adaptive_verification and c.num_speculative_tokens > 0),
                        math.log2(c.max_num_seqs), math.log2(c.max_num_batched_tokens)]
                       for c in configs], dtype=np.float64).reshape(len(configs), 4)


def _kernel(a: FloatArray, b: FloatArray, scale: float = GP_SCALE,
            offset: float = GP_OFFSET, lengths: FloatArray = _LENGTHS,
            share: float = 0.0) -> FloatArray:
    """A workload-wide offset plus a squared-exponential model error of sd ``scale``, of which
    a ``share`` of the variance depends on the batching knobs alone."""
    d2 = ((a[:, None, :] - b[None, :, :]) / lengths) ** 2
    full = np.exp(-0.5 * d2.sum(axis=2))
    if share:
        full = (1.0 - share) * full + share * np.exp(-0.5 * d2[:, :, _BATCHING_AXES].sum(axis=2))
    out: FloatArray = offset**2 + scale**2 * full
    return out


def similarity(a: Sequence[TrialConfig], b: Sequence[TrialConfig], block: int, *,
               batching: bool = True) -> FloatArray:
    """How alike the model's errors at configs ``a`` and ``b`` are: the correlation of the
    squared-exponential part of this module's process (1 for the same config); with
    ``batching`` False, along the knobs that change what one step computes alone (the window,
    adaptive verification), the batching caps (``max_num_seqs``, ``max_num_batched_tokens``)
    taken as alike: for an error in the step's own cost, where the caps only choose which
    batches and chunks run."""
    fa, fb = _features(a, block), _features(b, block)
    if not batching:
        fa[:, _BATCHING_AXES], fb[:, _BATCHING_AXES] = 0.0, 0.0
    out: FloatArray = _kernel(fa, fb, scale=1.0, offset=0.0)
    return out


def _hyperparameters(resid: FloatArray, x: FloatArray, noise: FloatArray,
                     scales: Sequence[float], center: float, prior_sd: float, offset: float,
                     lengths: FloatArray, slot_lengths: Sequence[float] = (),
                     shares: Sequence[float] = (0.0,)
                     ) -> list[tuple[float, float, FloatArray, float]]:
    """Every (log posterior, model-error sd, lengthscales, batching-only share) of the grid:
    the sd among ``scales`` (log-normal prior around ``center``), the lengthscale along
    ``max_num_seqs`` among ``slot_lengths`` (none: the one of ``lengths``; log-normal prior
    around it), the share among ``shares``; the log posterior is the residuals' log marginal
    likelihood plus the log prior (up to a constant), -inf where the covariance is singular."""
    default = float(lengths[_SLOT_AXIS])
    out = []
    for slot, share, scale in itertools.product(slot_lengths or (default,), shares, scales):
        ls = lengths.copy()
        ls[_SLOT_AXIS] = slot
        k = _kernel(x, x, scale, offset, ls, share) + np.diag(noise)
        sign, logdet = np.linalg.slogdet(k)
        fit = float(resid @ np.linalg.solve(k, resid))
        prior = ((math.log(scale / center) / prior_sd) ** 2
                 + (math.log(slot / default) / _SCALE_PRIOR_SD) ** 2)
        out.append((-0.5 * (fit + logdet + prior) if sign > 0 else -math.inf, scale, ls, share))
    return out


def _model_error(resid: FloatArray, x: FloatArray, noise: FloatArray,
                 scales: Sequence[float] = _SCALES, center: float = GP_SCALE,
                 prior_sd: float = _SCALE_PRIOR_SD, offset: float = GP_OFFSET,
                 lengths: FloatArray = _LENGTHS, slot_lengths: Sequence[float] = (),
                 shares: Sequence[float] = (0.0,)) -> tuple[float, FloatArray, float]:
    """The likeliest of :func:`_hyperparameters` (type-II maximum likelihood; the first of
    the grid wins a tie): its model-error sd, lengthscales and batching-only share."""
    best, best_score = (center, lengths, shares[0]), -math.inf
    for score, scale, ls, share in _hyperparameters(resid, x, noise, scales, center, prior_sd,
                                                    offset, lengths, slot_lengths, shares):
        if score > best_score:
            best, best_score = (scale, ls, share), score
    return best


#: Hyperparameters whose posterior weight is below this share of the likeliest one's are left
#: out of the value's average (they change its mean and sd by less than a thousandth).
_NEGLIGIBLE = 1e-4


@dataclass(frozen=True)
class Residual:
    """The corrected log objective of every config and its standard deviation."""

    log_mean: FloatArray
    log_sd: FloatArray
    model_error: float   # the fitted sd of the model's error (GP_SCALE before any run)


def fit_residual(configs: Sequence[TrialConfig], model_log: FloatArray, block: int,
                 measured: Sequence[tuple[int, float]]) -> Residual:
    """Correct the model's log objective ``model_log`` of ``configs`` by the runs measured.

    ``measured`` pairs an index into ``configs`` with the measured objective (> 0) there.
    What matters is the model near the top: a run far below the best counts as a noisier
    reading of the residual there (it says little about the optimum).
    """
    feats = _features(configs, block)
    if not measured:
        sd = np.full(len(configs), math.sqrt(GP_OFFSET**2 + GP_SCALE**2))
        return Residual(model_log.copy(), sd, GP_SCALE)
    rows = [i for i, _ in measured]
    values = np.log([v for _, v in measured])
    resid = values - model_log[rows]
    x = feats[rows]
    noise = GP_NOISE**2 + (_FAR_WEIGHT * np.maximum(values.max() - values, 0.0)) ** 2
    # a model that misses the very runs it was fitted to by a common factor is not to be
    # trusted to a few per cent in how it ranks the configs between them
    floor = _LEVEL_SHARE * abs(float(resid.mean()))
    grid = _hyperparameters(resid, x, noise,
                            [s for s in _SCALES if s >= floor] or [_SCALES[-1]], GP_SCALE,
                            _SCALE_PRIOR_SD, GP_OFFSET, _LENGTHS, _SLOT_LENGTHS,
                            _BATCHING_SHARES)
    top = max(score for score, _, _, _ in grid)
    weights, means, variances, sizes = [], [], [], []
    for score, scale, lengths, share in grid:
        weight = math.exp(score - top) if math.isfinite(score) else 0.0
        if weight < _NEGLIGIBLE:
            continue
        k_xx = _kernel(x, x, scale, lengths=lengths, share=share) + np.diag(noise)
        k_sx = _kernel(feats, x, scale, lengths=lengths, share=share)
        v = np.linalg.solve(k_xx, k_sx.T)
        weights.append(weight)
        means.append(k_sx @ np.linalg.solve(k_xx, resid))
        variances.append(np.maximum(GP_OFFSET**2 + scale**2 - (k_sx * v.T).sum(axis=1), 1e-8))
        sizes.append(scale)
    # the mixture over the hyperparameters: a few runs that agree rule a small model error
    # in, not the larger ones out, and the runs' neighbours keep the larger ones' spread
    w = np.asarray(weights) / sum(weights)
    mean = w @ np.vstack(means)
    var = w @ (np.vstack(variances) + (np.vstack(means) - mean) ** 2)
    return Residual(model_log + mean, np.sqrt(var), float(w @ np.asarray(sizes)))


#: How much worse (log) than a run whose slots never filled the same config with more slots
#: may be predicted (:func:`uncapped`): in a burst the cap may bind, and more slots batch more.
MORE_SLOTS_LOSS = 0.05
#: A run was not held back by its ``max_num_seqs`` when, with its mean decoding batch and
#: requests coming and going independently (Poisson occupancy), the batch would reach the cap
#: at most this share of the time: a mean batch up to 2.9 of 8 slots, 20 of 32, 103 of 128.
CAP_BINDS = 0.01


def uncapped(configs: Sequence[TrialConfig], runs: Sequence[tuple[TrialConfig, float, float]]
             ) -> list[tuple[int, float]]:
    """The least log objective an unmeasured config may be predicted at, where a run says:
    the same config with a higher ``max_num_seqs`` than a run whose slots never filled is at
    most :data:`MORE_SLOTS_LOSS` below that run's reading.

    ``runs`` holds (config, value, mean decoding batch) of the runs measured. ``max_num_seqs``
    only caps how many requests run at once: a run whose mean batch would reach its cap at
    most :data:`CAP_BINDS` of the time was (almost) never held back by it, so with a higher
    cap and every other knob the same the scheduler makes (almost) the same steps. The replica
    model's slot physics is fitted, not known, and may write those configs off: on one CPU core
    it put 32 and 128 sequences 26% below 8 at a mean batch of 1.9, where they read 4% above.
    Returns (index into ``configs``, floor) for every such unmeasured config, from the best
    run standing for it. It is a floor only: where the model already predicts more, it stands.

    The Poisson test is an approximation, and bursty arrivals break it: on the same CPU core
    (chat-low, window 3, 8192-token chunks) 8 sequences read 0.0235 at a mean batch of 1.09
    and 32 or 128 read 0.0151, 36% below, not 5%; a burst filled the 8 slots, and capping it
    kept the p99s down. A floor that is wrong costs a run on a config the model would have
    written off; the model writing off a config that serves more costs the recommendation.
    """
    from scipy.stats import poisson

    measured = {c for c, _, _ in runs}
    best: dict[int, float] = {}
    for run, value, batch in runs:
        if value <= 0 or float(poisson.sf(run.max_num_seqs - 1, max(batch, 0.0))) > CAP_BINDS:
            continue
        for i, c in enumerate(configs):
            if (c not in measured and c.max_num_seqs > run.max_num_seqs
                    and c.num_speculative_tokens == run.num_speculative_tokens
                    and c.enable_adaptive_verification == run.enable_adaptive_verification
                    and c.max_num_batched_tokens == run.max_num_batched_tokens):
                best[i] = max(best.get(i, -math.inf), math.log(value) - MORE_SLOTS_LOSS)
    return sorted(best.items())


#: The model's error on a config's margin to the SLO (log): its prior sd, a workload-wide
#: part, and the noise of one reading.
MARGIN_SCALE = 0.3
MARGIN_OFFSET = 0.4
MARGIN_NOISE = 0.1
#: Model-error sds the margin's GP chooses from (the runs show how wrong the model is).
_MARGIN_SCALES = (0.1, 0.2, 0.3, 0.5, 0.8, 1.2, 2.0, 3.0)
#: The margin varies more slowly with the window than the objective does (whether a config
#: keeps up with its traffic is mostly a matter of batching and prefill budget).
_MARGIN_LENGTHS = np.array([0.5, 0.8, 1.5, 1.2])


def fit_margin(configs: Sequence[TrialConfig], model_margin: FloatArray, block: int,
               measured: Sequence[tuple[int, float, bool]]) -> Residual:
    """Correct the model's margin to the SLO (log; negative: it fails) by the measured ones.

    ``measured`` holds (config index, margin, censored): a censored margin is only an upper
    bound (the config missed at every rate tried), so it corrects the model only where the
    model thought better of it. Every measured margin counts, misses included: a config that
    missed pulls its neighbours' margins down, one that passed pulls them up. Returns the
    corrected margin of every config and its sd (the chance it meets the SLO is
    Φ(mean / sd)).
    """
    feats = _features(configs, block)
    prior = math.sqrt(MARGIN_OFFSET**2 + MARGIN_SCALE**2)
    if not measured:
        return Residual(model_margin.copy(), np.full(len(configs), prior), MARGIN_SCALE)
    rows = [i for i, _, _ in measured]
    resid = np.asarray([m - model_margin[i] if not censored else min(0.0, m - model_margin[i])
                        for i, m, censored in measured])
    x = feats[rows]
    noise = np.full(len(rows), MARGIN_NOISE**2)
    scale, _, _ = _model_error(resid, x, noise, _MARGIN_SCALES, MARGIN_SCALE, 1.0,
                               MARGIN_OFFSET, _MARGIN_LENGTHS)
    k_xx = _kernel(x, x, scale, MARGIN_OFFSET, _MARGIN_LENGTHS) + np.diag(noise)
    k_sx = _kernel(feats, x, scale, MARGIN_OFFSET, _MARGIN_LENGTHS)
    alpha = np.linalg.solve(k_xx, resid)
    v = np.linalg.solve(k_xx, k_sx.T)
    top = MARGIN_OFFSET**2 + scale**2
    var = np.maximum(top - (k_sx * v.T).sum(axis=1), 1e-6) + MARGIN_NOISE**2
    return Residual(model_margin + k_sx @ alpha, np.sqrt(var), scale)


#: How much of a measured config's own uncertainty its reading leaves (variance ratio).
_PIN_NOISE = 0.01


def unpinned(configs: Sequence[TrialConfig], block: int, measured: Sequence[int]) -> FloatArray:
    """For every config, the share of its prior variance the runs at ``measured`` (indices
    into ``configs``) leave unexplained along the prefill budget: 1 far from every run's
    ``max_num_batched_tokens``, 0 at a measured config (its reading pins it).

    The posterior variance ratio of a unit squared-exponential process on log2
    ``max_num_batched_tokens`` with the residual GP's lengthscale. The budget is the knob a fit
    does not carry over: it decides which tail binds (a prefill chunk's stall on p99 ITL, the
    prefill queue on p99 TTFT), which runs at one budget cannot tell apart. The fit carries
    the others: the window through the acceptance counters every run calibrates, the slots
    through the fitted slot wait.
    """
    if not measured:
        return np.ones(len(configs))
    feats = _features(configs, block)[:, 3:]
    x = feats[list(measured)]
    lengths = _LENGTHS[3:]
    k_xx = _kernel(x, x, 1.0, 0.0, lengths) + _PIN_NOISE * np.eye(len(x))
    k_sx = _kernel(feats, x, 1.0, 0.0, lengths)
    explained = (k_sx * np.linalg.solve(k_xx, k_sx.T).T).sum(axis=1)
    out: FloatArray = np.clip(1.0 - explained, 0.0, 1.0)
    out[list(measured)] = 0.0
    return out


def binding_tail(itl_p99_ms: FloatArray, ttft_p99_ms: FloatArray, slo: Slo) -> FloatArray:
    """Which SLO tail is nearer its bound, per reading: 0 the p99 ITL, 1 the p99 TTFT
    (NaN where a reading or a bound is missing: one tail only is no regime to tell apart)."""
    if slo.itl_p99_ms is None or slo.ttft_p99_ms is None:
        return np.full(len(itl_p99_ms), np.nan)
    itl = np.asarray(itl_p99_ms, dtype=float) / slo.itl_p99_ms
    ttft = np.asarray(ttft_p99_ms, dtype=float) / slo.ttft_p99_ms
    return np.where(np.isfinite(itl) & np.isfinite(ttft), (ttft > itl).astype(float), np.nan)


def novel_regime(tails: FloatArray, measured: Sequence[int]) -> FloatArray:
    """1 for a config whose predicted binding tail (``tails``, :func:`binding_tail` of the
    model's own reading) the model predicts at none of the ``measured`` configs, else 0 (0 at
    the measured configs and wherever a tail is unknown).

    The residual GP learns the model's error size at the runs, in the regime the model puts
    them in, and the model's ITL physics and its queue (TTFT) physics err apart: on Llama-70B
    on one MI300X every run of a mixed workload sat where the model says p99 ITL binds, while
    at 8 slots it says the queue does, and it read that config 12% low, 4.5 times the error
    size the runs taught. Such a config gets the prior's error variance (:data:`GP_SCALE`) on
    top, until a run is read where the model predicts that tail. (The model's tail, not the
    run's: where the model puts a whole prefill budget in the wrong regime, as on Llama-70B on
    4xH100 for code, the runs it reads there teach that regime's error all the same.)
    """
    seen = {float(tails[i]) for i in measured if np.isfinite(tails[i])}
    if not seen:
        return np.zeros(len(tails))
    out: FloatArray = np.where(np.isfinite(tails) & ~np.isin(tails, list(seen)), 1.0, 0.0)
    out[list(measured)] = 0.0
    return out


def shrunk_log_ratio(measured: Sequence[float | None], predicted: FloatArray, *,
                      prior_sd: float, noise_sd: float) -> float:
    """Posterior mean of a shared log factor from log(measured / predicted), prior N(0, sd²)."""
    logs = [math.log(m / p) for m, p in zip(measured, predicted, strict=True)
            if m is not None and m > 0 and p > 0 and math.isfinite(p)]
    if not logs:
        return 0.0
    precision = 1.0 / prior_sd**2 + len(logs) / noise_sd**2
    return float(sum(logs) / noise_sd**2 / precision)
