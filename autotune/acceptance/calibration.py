"""Calibrating the confidence head's predictions against measured acceptance counters.

What a backend measures is aggregate: per draft position k, how many drafts had tokens 1..k
accepted (vLLM's ``spec_decode_num_accepted_tokens_per_pos``). The measured conditional rate at
position k is ``A_k / A_{k-1}`` (``A_0`` = drafts) over ``A_{k-1}`` exposures. The model's
prediction of the same quantity is the step-weighted mean over requests
(:meth:`~autotune.acceptance.curves.AcceptanceModel.draft_conditional`), so a calibration map g
applied to every request's conditionals is fitted so that these aggregates match.

Two families:

- ``temperature``: per position k, ``g_k(c) = sigmoid(logit(c) / T_k)`` (one temperature per
  draft position, as the DSpark paper calibrates its head); positions beyond the measured
  window take the last measured position's temperature;
- ``isotonic``: one monotone, piecewise-linear map g shared by every position, with knots at
  quantiles of the predictions, fitted by bounded least squares on its increments (so it stays
  non-decreasing) with a small pull towards the identity.

The family is picked by held-out error: leave one run out when several runs are measured;
with a single run, two-fold cross-validation over its drafts (the histogram of accepted
lengths follows from the per-position counters, so the drafts can be split into two random
halves without seeing any single draft). The identity is kept when neither family beats it.
Errors are ECE over draft positions, Σ_k A_{k-1} |predicted c_k - measured c_k| / Σ_k A_{k-1},
positions
being the bins (aggregate counters carry no per-draft confidences to bin by). Only runs whose
every draft verified the whole window count (adaptive verification or a tight token budget cut
windows, and cut drafts read as rejections the counters cannot tell apart).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from autotune.acceptance.curves import AcceptanceModel
from autotune.types import AcceptanceCounts

__all__ = ["CountsObservation", "HeadCalibration", "calibrate", "ece", "split_counts", "usable"]

FloatArray = npt.NDArray[np.float64]
Method = Literal["identity", "temperature", "isotonic"]

_CLIP = 1e-4
_LOG_T = (math.log(0.1), math.log(10.0))
#: Pull of the isotonic map towards the identity (relative to the total exposure).
_RIDGE = 1e-3
_PASSES = 3


def _logit(p: FloatArray) -> FloatArray:
    q = np.clip(p, _CLIP, 1.0 - _CLIP)
    out: FloatArray = np.log(q / (1.0 - q))
    return out


def _sigmoid(x: FloatArray) -> FloatArray:
    out: FloatArray = 1.0 / (1.0 + np.exp(-x))
    return out


@dataclass(frozen=True)
class CountsObservation:
    """The acceptance counters of one run at window ``window``."""

    window: int
    counts: AcceptanceCounts

    @property
    def exposure(self) -> FloatArray:
        """A_{k-1}: drafts that reached position k (k = 1..window)."""
        a = np.asarray(self.counts.accepted_per_pos[: self.window], dtype=np.float64)
        return np.concatenate([[float(self.counts.drafts)], a[:-1]])

    @property
    def rates(self) -> FloatArray:
        """Measured conditional acceptance A_k / A_{k-1} per position."""
        a = np.asarray(self.counts.accepted_per_pos[: self.window], dtype=np.float64)
        exp = self.exposure
        out: FloatArray = np.divide(a, exp, out=np.zeros_like(a), where=exp > 0)
        return out


def measured_conditional(observations: Sequence[CountsObservation],
                         block: int) -> FloatArray | None:
    """The conditional acceptance per position the runs measured, pooled over runs (a run at
    window N measures positions 1..N), continued past the widest window with its last value.
    For samples without the head's predictions. None without usable counters."""
    obs = [o for o in observations if usable(o)]
    if not obs:
        return None
    width = min(block, max(o.window for o in obs))
    accepted = np.zeros(width)
    exposed = np.zeros(width)
    for o in obs:
        w = min(o.window, width)
        accepted[:w] += np.asarray(o.counts.accepted_per_pos[:w], dtype=np.float64)
        exposed[:w] += o.exposure[:w]
    cond = np.divide(accepted, exposed, out=np.zeros(width), where=exposed > 0)
    out = np.full(block, cond[-1])
    out[:width] = cond
    result: FloatArray = np.clip(out, 0.0, 1.0)
    return result


def usable(obs: CountsObservation) -> bool:
    """Counters with drafts, one per position, and every draft verifying the whole window."""
    c = obs.counts
    return (obs.window > 0 and c.drafts > 0 and len(c.accepted_per_pos) >= obs.window
            and c.draft_tokens >= obs.window * c.drafts)


@dataclass(frozen=True)
class HeadCalibration:
    """A fitted map from predicted to calibrated conditional acceptance (see module doc)."""

    method: Method = "identity"
    temperatures: tuple[float, ...] = ()
    knots_x: tuple[float, ...] = ()
    knots_y: tuple[float, ...] = ()
    ece_before: float | None = None
    ece_after: float | None = None
    ece_in_sample: float | None = None
    heldout: dict[str, float] = field(default_factory=dict)
    scheme: str = ""
    runs: int = 0
    positions: int = 0

    def apply(self, conditional: FloatArray) -> FloatArray:
        """Calibrated conditionals (same shape; rows = requests, columns = positions)."""
        if self.method == "temperature" and self.temperatures:
            k = conditional.shape[1]
            t = np.asarray(self.temperatures, dtype=np.float64)
            t = np.concatenate([t, np.full(max(0, k - t.size), t[-1])])[:k]
            return _sigmoid(_logit(conditional) / t[None, :])
        if self.method == "isotonic" and self.knots_x:
            out: FloatArray = np.interp(conditional, self.knots_x, self.knots_y)
            return out
        return conditional.copy()

    def apply_to(self, model: AcceptanceModel) -> AcceptanceModel:
        return model.with_conditional(self.apply(model.conditional))

    def params(self) -> dict[str, Any]:
        """JSON-ready parameters, as stored in the calibrations table."""
        out: dict[str, Any] = {"scheme": self.scheme, "runs": self.runs,
                               "positions": self.positions, "heldout_ece": dict(self.heldout),
                               "ece_in_sample": self.ece_in_sample}
        if self.method == "temperature":
            out["temperatures"] = [round(t, 5) for t in self.temperatures]
        if self.method == "isotonic":
            out["knots_x"] = [round(x, 5) for x in self.knots_x]
            out["knots_y"] = [round(y, 5) for y in self.knots_y]
        return out


# -- errors -------------------------------------------------------------------------------------
def _errors(model: AcceptanceModel, observations: Sequence[CountsObservation]
            ) -> list[tuple[FloatArray, FloatArray]]:
    """Per observation: (|predicted - measured| per position, exposure per position)."""
    out = []
    for obs in observations:
        pred = model.draft_conditional(obs.window)
        out.append((np.abs(pred - obs.rates), obs.exposure))
    return out


def ece(model: AcceptanceModel, observations: Sequence[CountsObservation],
        mask: Sequence[FloatArray] | None = None) -> float | None:
    """ECE over draft positions (exposure-weighted mean |predicted - measured| conditional)."""
    num = den = 0.0
    for i, (err, w) in enumerate(_errors(model, observations)):
        if mask is not None:
            w = w * mask[i]
        num += float((err * w).sum())
        den += float(w.sum())
    return num / den if den > 0 else None


# -- temperature --------------------------------------------------------------------------------
def _position_loss(base: FloatArray, need: FloatArray, log_t: FloatArray, k: int,
                   terms: Sequence[tuple[int, float, float]]) -> Callable[[float], float]:
    """The temperature fit's loss at position ``k`` as a function of its log temperature, the
    others held at ``log_t``: Σ exposure · (logit predicted - logit measured)² over the runs
    (``terms``: window, exposure at k, measured logit at k).

    What :meth:`AcceptanceModel.draft_conditional` reads at position k, in closed form in the
    new column c_k: with P the survival up to k-1 and Q_j = c_(k+1)·…·c_j, a request's
    expected tokens at window n are 1 + ΣP + P_(k-1)·c_k·Σ_(j<n) Q_j, its steps
    (O - 1) / that, and the step-weighted conditional at k is Σ steps·P_(k-1)·c_k /
    Σ steps·P_(k-1). Only c_k changes inside the loop, so nothing else is recomputed.
    """
    cond = _sigmoid(base / np.exp(log_t)[None, :])
    prefix = np.cumprod(cond[:, :k], axis=1)
    before = prefix.sum(axis=1)
    p_prev = prefix[:, -1] if k > 0 else np.ones(base.shape[0])
    after = np.cumsum(np.concatenate([np.ones((base.shape[0], 1)),
                                      np.cumprod(cond[:, k + 1:], axis=1)], axis=1), axis=1)
    windows = sorted({n for n, _, _ in terms})
    tails = {n: after[:, n - 1 - k] for n in windows}
    column = base[:, k]

    def loss(x: float) -> float:
        c_k = _sigmoid(column / math.exp(x))
        lead = p_prev * c_k
        total = 0.0
        for n, w, target in terms:
            steps = need / (1.0 + before + lead * tails[n])
            den = float((steps * p_prev).sum())
            pred = float((steps * lead).sum()) / den if den > 0 else 0.0
            q = min(max(pred, _CLIP), 1.0 - _CLIP)
            diff = math.log(q / (1.0 - q)) - target
            total += w * diff * diff
        return total

    return loss


def _fit_temperature(model: AcceptanceModel, obs: Sequence[CountsObservation],
                     masks: Sequence[FloatArray]) -> HeadCalibration:
    """Per-position temperatures; positions without data interpolate their neighbours."""
    from scipy.optimize import minimize_scalar

    block = model.block
    top = max(o.window for o in obs)
    has = np.zeros(block, dtype=bool)
    for o, m in zip(obs, masks, strict=True):
        has[: o.window] |= (m * o.exposure) > 0
    log_t = np.zeros(block)

    def fill() -> None:
        idx = np.flatnonzero(has)
        if idx.size:
            log_t[:] = np.interp(np.arange(block), idx, log_t[idx])

    base = _logit(model.conditional)
    need = np.maximum(model.output_tokens - 1.0, 1.0)

    for _ in range(_PASSES):
        for k in range(top):
            if not has[k]:
                continue
            terms = [(o.window, o.exposure[k] * m[k], _logit(np.array([o.rates[k]]))[0])
                     for o, m in zip(obs, masks, strict=True) if k < o.window]
            terms = [(n, w, target) for n, w, target in terms if w > 0]
            log_t[k] = float(minimize_scalar(_position_loss(base, need, log_t, k, terms),
                                             bounds=_LOG_T, method="bounded",
                                             options={"xatol": 1e-4}).x)
        fill()
    last = int(np.flatnonzero(has)[-1]) if has.any() else -1
    if last >= 0:
        log_t[last + 1:] = log_t[last]
    return HeadCalibration(method="temperature", temperatures=tuple(float(math.exp(x))
                                                                for x in log_t))


# -- isotonic -----------------------------------------------------------------------------------
def _knots(model: AcceptanceModel) -> FloatArray:
    q = np.quantile(model.conditional, [0.05, 0.25, 0.5, 0.75, 0.95])
    return np.unique(np.clip(np.concatenate([[0.0], q, [1.0]]), 0.0, 1.0))


def _hat(x: FloatArray, knots: FloatArray) -> FloatArray:
    """Piecewise-linear interpolation weights: (len(x), len(knots)); rows sum to 1."""
    idx = np.clip(np.searchsorted(knots, x, side="right") - 1, 0, knots.size - 2)
    left, right = knots[idx], knots[idx + 1]
    frac = np.clip((x - left) / np.maximum(right - left, 1e-12), 0.0, 1.0)
    out = np.zeros((x.size, knots.size))
    rows = np.arange(x.size)
    out[rows, idx] = 1.0 - frac
    out[rows, idx + 1] += frac
    return out


def _fit_isotonic(model: AcceptanceModel, obs: Sequence[CountsObservation],
                  masks: Sequence[FloatArray]) -> HeadCalibration:
    """Monotone piecewise-linear map shared by all positions (bounded least squares)."""
    from scipy.optimize import lsq_linear

    knots = _knots(model)
    j = knots.size
    # y = L @ v with v = (y_0, d_1..d_{j-1}), d >= 0: y stays non-decreasing
    lower = np.tril(np.ones((j, j)))
    cur = model
    y = knots.copy()
    total = sum(float((o.exposure * m).sum()) for o, m in zip(obs, masks, strict=True)) or 1.0
    hats = [_hat(model.conditional[:, k], knots) for k in range(model.block)]
    for _ in range(_PASSES):
        rows_a: list[FloatArray] = []
        rows_b: list[float] = []
        surv = cur.survival()
        for o, m in zip(obs, masks, strict=True):
            w = cur.steps(o.window)
            for k in range(o.window):
                weight = o.exposure[k] * m[k]
                if weight <= 0:
                    continue
                u = w * (surv[:, k - 1] if k > 0 else 1.0)
                coef = (u[:, None] * hats[k]).sum(axis=0) / max(float(u.sum()), 1e-12)
                s = math.sqrt(weight / total)
                rows_a.append(s * coef @ lower)
                rows_b.append(s * float(o.rates[k]))
        r = math.sqrt(_RIDGE)
        a = np.vstack([*rows_a, r * lower]) if rows_a else r * lower
        b = np.concatenate([np.asarray(rows_b), r * knots])
        lb = np.zeros(j)
        ub = np.concatenate([[1.0], np.full(j - 1, 1.0)])
        v = lsq_linear(a, b, bounds=(lb, ub)).x
        y = np.clip(lower @ v, 0.0, 1.0)
        cur = model.with_conditional(np.interp(model.conditional, knots, y))
    return HeadCalibration(method="isotonic", knots_x=tuple(float(x) for x in knots),
                       knots_y=tuple(float(v) for v in y))


_FITTERS: dict[str, Callable[[AcceptanceModel, Sequence[CountsObservation],
                              Sequence[FloatArray]], HeadCalibration]] = {
    "temperature": _fit_temperature,
    "isotonic": _fit_isotonic,
}


# -- selection ----------------------------------------------------------------------------------
def split_counts(counts: AcceptanceCounts, window: int, seed: int = 0
                 ) -> tuple[AcceptanceCounts, AcceptanceCounts]:
    """Two random halves of a run's drafts with their counters (multivariate hypergeometric
    split of the histogram of accepted lengths 0..window)."""
    a = np.asarray(counts.accepted_per_pos[:window], dtype=np.int64)
    hist = np.concatenate([[counts.drafts], a]) - np.concatenate([a, [0]])
    hist = np.maximum(hist, 0)
    rng = np.random.default_rng(seed)
    first = rng.multivariate_hypergeometric(hist, int(hist.sum()) // 2)
    halves = []
    for h in (first, hist - first):
        drafts = int(h.sum())
        per_pos = tuple(int(h[k + 1:].sum()) for k in range(window))
        accepted = int(sum(per_pos))
        halves.append(AcceptanceCounts(drafts, drafts * window, accepted, per_pos))
    return halves[0], halves[1]


def _heldout(method: str, model: AcceptanceModel,
             obs: Sequence[CountsObservation]) -> tuple[float | None, str]:
    """Held-out ECE of a family (``identity``: no fit): leave one run out, or two-fold
    cross-validation over the drafts of a single run."""
    if len(obs) >= 2:
        folds = [([o for j, o in enumerate(obs) if j != i], [obs[i]]) for i in range(len(obs))]
        scheme = "leave-one-run-out"
    else:
        only = obs[0]
        a, b = split_counts(only.counts, only.window)
        halves = [CountsObservation(only.window, a), CountsObservation(only.window, b)]
        folds = [([halves[0]], [halves[1]]), ([halves[1]], [halves[0]])]
        scheme = "two-fold split of the drafts"
    num = den = 0.0
    for train, test in folds:
        if method == "identity":
            fitted = model
        else:
            fitted = _FITTERS[method](model, train, [np.ones(o.window) for o in train]
                                      ).apply_to(model)
        err = ece(fitted, test)
        w = float(sum(o.exposure.sum() for o in test))
        if err is not None:
            num, den = num + err * w, den + w
    return (num / den if den else None), scheme


def calibrate(model: AcceptanceModel,
              observations: Sequence[CountsObservation]) -> HeadCalibration:
    """Fit both families, pick the one with the lowest held-out ECE (identity if none helps).

    Unusable observations (cut windows, no drafts) are ignored; without any, the identity is
    returned with no ECE.
    """
    obs = [o for o in observations if usable(o)]
    if not obs:
        return HeadCalibration(scheme="no usable counters")
    before = ece(model, obs)
    heldout: dict[str, float] = {}
    scheme = ""
    for method in ("identity", *_FITTERS):
        err, scheme = _heldout(method, model, obs)
        if err is not None:
            heldout[method] = err
    best = min(heldout, key=lambda m: (heldout[m], m != "identity")) if heldout else "identity"
    positions = max(o.window for o in obs)
    if best == "identity":
        return HeadCalibration(ece_before=before, ece_after=heldout.get("identity", before),
                           ece_in_sample=before,
                           heldout=heldout, scheme=scheme, runs=len(obs), positions=positions)
    cal = _FITTERS[best](model, obs, [np.ones(o.window) for o in obs])
    in_sample = ece(cal.apply_to(model), obs)
    return HeadCalibration(method=cal.method, temperatures=cal.temperatures, knots_x=cal.knots_x,
                       knots_y=cal.knots_y, ece_before=before, ece_after=heldout[best],
                       ece_in_sample=in_sample, heldout=heldout, scheme=scheme, runs=len(obs),
                       positions=positions)
