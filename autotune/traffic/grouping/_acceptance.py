"""Splitting requests by what changes the best draft window (private to the grouping package).

Within a group of requests, acceptance predictions are first summarised per request as the
least-squares line of logit(c_k) over the positions: its level and its slope. One source's
requests scatter around one point (a per-request difficulty moves the level, noise both), so
a mixture of sources is a mixture of blobs: a Gaussian mixture (EM, full covariances, k-means++
starts from a seeded generator) is fitted for k = 1..``MAX_COMPONENTS`` and k is chosen by the
BIC, and only when the mixture explains at least ``MIN_LOGLIK_GAIN`` nats a request more than
one Gaussian (on a large sample the BIC alone finds "structure" in any small departure from a
Gaussian; a real mixture of sources gains several times that).

Components are then judged by what they change: with window n a request of ``out`` output
tokens takes out / E_n verify steps, E_n = 1 + s_1 + … + s_n, and a step costs 1 + a·n (a: the
cost of verifying one more position relative to a step; from about 0.01 for a memory-bound
small batch to a tenth or more for large, compute-bound ones). So a group's time at window n is
(1 + a·n)·Σ out/E_n, additive over requests. Two groups are kept apart only when serving each
at its own best window saves at least ``MIN_GAIN`` of their time over serving both at the
window best for the two together, for some a of ``COSTS``; otherwise (the windows agree, or
the difference is too small to matter) they are merged, the closest pair first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autotune.traffic.columns import RequestColumns

__all__ = ["COSTS", "MIN_GAIN", "MIN_LOGLIK_GAIN", "AcceptanceSplit", "split_by_acceptance"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Relative verification cost per drafted position (a step costs 1 + a·n at window n).
COSTS = (0.01, 0.02, 0.04, 0.08, 0.16)
#: Smallest saving (share of the pair's serving time) that keeps two groups apart.
MIN_GAIN = 0.005
#: Smallest log-likelihood gain per request (nats) of a mixture over one Gaussian.
MIN_LOGLIK_GAIN = 0.01
#: Most mixture components tried.
MAX_COMPONENTS = 4
#: Requests the mixture is fitted on (a seeded subsample); every request is then assigned.
FIT_SAMPLE = 20_000
#: EM restarts per k and iteration cap; EM stops when the mean log-likelihood gains < TOL.
RESTARTS = 2
ITERATIONS = 100
TOL = 1e-5
#: Logits of predictions are taken of values clipped to [EPS, 1 - EPS] (0.000 and 1.000 occur).
EPS = 1e-3
#: Rows per block when per-request arrays are computed.
CHUNK = 65_536


@dataclass(frozen=True)
class AcceptanceSplit:
    """How one group's requests were split: ``labels`` per row (0 = the group with the lowest
    expected tokens per step), ``components`` chosen by the BIC, ``gain`` (share of serving time
    saved by per-group windows, at the cost ``cost`` where it is largest) and each group's best
    window at every cost of ``COSTS``."""

    labels: npt.NDArray[np.intp]
    components: int
    loglik_gain: float
    gain: float
    cost: float
    windows: list[list[int]]

    @property
    def k(self) -> int:
        return len(self.windows) or 1

    def as_dict(self) -> dict[str, object]:
        return {"components": self.components, "loglik_gain": round(self.loglik_gain, 4),
                "groups": self.k, "gain": round(self.gain, 4), "at_cost": self.cost,
                "best_windows": {str(a): [w[i] for w in self.windows]
                                 for i, a in enumerate(COSTS)} if self.windows else {}}


def _line_features(cols: RequestColumns, rows: IntArray, positions: int) -> FloatArray:
    """Per row: level and slope of logit(c_k) over the first ``positions`` positions."""
    k = np.arange(positions, dtype=np.float64)
    kc = k - k.mean()
    denom = float((kc ** 2).sum())
    out = np.empty((len(rows), 2 if positions > 1 else 1))
    for start, block in cols.predictions(rows, positions):
        q = np.clip(block, EPS, 1.0 - EPS)
        logits = np.log(q / (1.0 - q))
        out[start:start + len(block), 0] = logits.mean(axis=1)
        if positions > 1:
            out[start:start + len(block), 1] = logits @ kc / denom
    return out


def _step_sums(cols: RequestColumns, rows: IntArray, positions: int,
               comp: npt.NDArray[np.intp], k: int) -> FloatArray:
    """Per component (rows of the result): the sum of out / E_n over its rows for n =
    1..positions (time units at window n before the step cost), block by block."""
    sums = np.zeros((k, positions))
    weights = cols.output_tokens[rows].astype(np.float64)
    for start, block in cols.predictions(rows, positions):
        expected = 1.0 + np.cumsum(np.cumprod(block, axis=1), axis=1)
        steps = weights[start:start + len(block), None] / expected
        np.add.at(sums, comp[start:start + len(block)], steps)
    return sums


def _cost_table(positions: int) -> FloatArray:
    windows = np.arange(1, positions + 1, dtype=np.float64)
    table: FloatArray = 1.0 + np.asarray(COSTS)[:, None] * windows[None, :]
    return table


def _best_time(times: FloatArray, costs: FloatArray) -> FloatArray:
    """Per cost: the time of the group at its best window (``times``: per window)."""
    best: FloatArray = (costs * times[None, :]).min(axis=1)
    return best


def _merge_loss(a: FloatArray, b: FloatArray, costs: FloatArray) -> float:
    """Largest (over costs) share of time the pair saves by separate windows."""
    apart = _best_time(a, costs) + _best_time(b, costs)
    together = _best_time(a + b, costs)
    return float((together / np.maximum(apart, 1e-300) - 1.0).max())


def _logpdf(x: FloatArray, mean: FloatArray, cov: FloatArray) -> FloatArray:
    d = x.shape[1]
    chol = np.linalg.cholesky(cov)
    sol = np.linalg.solve(chol, (x - mean).T)
    logdet = 2.0 * float(np.log(np.diag(chol)).sum())
    out: FloatArray = -0.5 * ((sol ** 2).sum(axis=0) + logdet + d * math.log(2 * math.pi))
    return out


def _log_resp(x: FloatArray, weights: FloatArray, means: FloatArray,
              covs: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Log responsibilities (rows x k) and per-row log-likelihood."""
    logp = np.column_stack([np.log(weights[j]) + _logpdf(x, means[j], covs[j])
                            for j in range(len(weights))])
    top = logp.max(axis=1, keepdims=True)
    total = top[:, 0] + np.log(np.exp(logp - top).sum(axis=1))
    return logp - total[:, None], total


@dataclass(frozen=True)
class _Mixture:
    weights: FloatArray
    means: FloatArray
    covs: FloatArray
    loglik: float  # mean per row

    def assign(self, x: FloatArray) -> npt.NDArray[np.intp]:
        labels = np.empty(len(x), dtype=np.intp)
        for start in range(0, len(x), CHUNK):
            resp, _ = _log_resp(x[start:start + CHUNK], self.weights, self.means, self.covs)
            labels[start:start + CHUNK] = resp.argmax(axis=1)
        return labels


def _em(x: FloatArray, k: int, rng: np.random.Generator) -> _Mixture:
    n, d = x.shape
    ridge = 1e-6 * np.eye(d)
    centres = [x[int(rng.integers(n))]]
    for _ in range(k - 1):  # k-means++ starts
        dist = np.min(((x[:, None, :] - np.asarray(centres)[None]) ** 2).sum(axis=2), axis=1)
        total = float(dist.sum())
        pick = int(rng.choice(n, p=dist / total)) if total > 0 else int(rng.integers(n))
        centres.append(x[pick])
    means = np.asarray(centres, dtype=np.float64)
    covs = np.repeat((np.cov(x.T).reshape(d, d) + ridge)[None], k, axis=0)
    weights = np.full(k, 1.0 / k)
    previous = -math.inf
    loglik = -math.inf
    for _ in range(ITERATIONS):
        log_resp, rows = _log_resp(x, weights, means, covs)
        loglik = float(rows.mean())
        resp = np.exp(log_resp)
        mass = resp.sum(axis=0) + 1e-12
        weights = mass / n
        means = (resp.T @ x) / mass[:, None]
        for j in range(k):
            diff = x - means[j]
            covs[j] = (resp[:, j, None] * diff).T @ diff / mass[j] + ridge
        if loglik - previous < TOL:
            break
        previous = loglik
    return _Mixture(weights, means, covs, loglik)


def _fit(x: FloatArray, rng: np.random.Generator) -> tuple[_Mixture, float]:
    """The BIC's mixture (k = 1 unless it gains MIN_LOGLIK_GAIN a row) and its gain."""
    n, d = x.shape
    params = d + d * (d + 1) // 2
    fits = [_em(x, 1, rng)]
    for k in range(2, MAX_COMPONENTS + 1):
        if n < 20 * k:
            break
        fits.append(max((_em(x, k, rng) for _ in range(RESTARTS)), key=lambda m: m.loglik))
    bic = [-2.0 * n * m.loglik + (len(m.weights) * (params + 1) - 1) * math.log(n)
           for m in fits]
    best = int(np.argmin(bic))
    gain = fits[best].loglik - fits[0].loglik
    if gain < MIN_LOGLIK_GAIN:
        return fits[0], gain
    return fits[best], gain


def _merge(times: list[FloatArray], sizes: list[int], min_group: int,
           costs: FloatArray) -> list[list[int]]:
    """Merge components (closest pair first) until every pair's separate windows save at
    least MIN_GAIN and every group holds ``min_group`` rows; the members of each group."""
    members = [[j] for j in range(len(times))]
    times = list(times)
    sizes = list(sizes)
    while len(members) > 1:
        small = [i for i, s in enumerate(sizes) if s < min_group]
        pairs = [(i, j) for i in range(len(members)) for j in range(i + 1, len(members))
                 if not small or i in small or j in small]
        losses = {(i, j): _merge_loss(times[i], times[j], costs) for i, j in pairs}
        (i, j), loss = min(losses.items(), key=lambda kv: (kv[1], kv[0]))
        if not small and loss >= MIN_GAIN:
            break
        members[i] += members.pop(j)
        times[i] = times[i] + times.pop(j)
        sizes[i] += sizes.pop(j)
    return members


def split_by_acceptance(cols: RequestColumns, rows: IntArray, seed: int,
                        min_group: int) -> AcceptanceSplit | None:
    """Split ``rows`` (one group) by their acceptance predictions, or None when none has any.

    Rows without predictions join the largest group. Deterministic under ``seed``.
    """
    lengths = cols.acceptance_lengths()[rows]
    present = lengths > 0
    if not present.any():
        return None
    with_curve = rows[present]
    positions = int(lengths[present].min())
    costs = _cost_table(positions)
    features = _line_features(cols, with_curve, positions)
    std = features.std(axis=0)
    keep = std > 1e-9
    single = np.zeros(len(rows), dtype=np.intp)
    if not keep.any() or len(with_curve) < 2 * min_group:
        return AcceptanceSplit(single, 1, 0.0, 0.0, COSTS[0], [])
    x = (features[:, keep] - features[:, keep].mean(axis=0)) / std[keep]
    del features
    rng = np.random.default_rng([seed, 14])
    fit = x if len(x) <= FIT_SAMPLE else x[np.sort(rng.choice(len(x), FIT_SAMPLE,
                                                              replace=False))]
    mixture, loglik_gain = _fit(fit, rng)
    components = len(mixture.weights)
    comp = mixture.assign(x) if components > 1 else np.zeros(len(x), dtype=np.intp)
    del x
    sums = _step_sums(cols, with_curve, positions, comp, components)
    times = [sums[j] for j in range(components)]
    sizes = [int(n) for n in np.bincount(comp, minlength=components)]
    present_ids = [j for j in range(components) if sizes[j] > 0]
    members = _merge([times[j] for j in present_ids], [sizes[j] for j in present_ids],
                     min_group, costs)
    members = [[present_ids[m] for m in group] for group in members]
    group_times = [sum((times[j] for j in group), np.zeros(positions)) for group in members]
    # Order groups by expected tokens per step at the full window (output tokens / steps).
    outs = np.bincount(comp, weights=cols.output_tokens[with_curve].astype(np.float64),
                       minlength=components)
    order = sorted(range(len(members)), key=lambda g: (
        float(outs[members[g]].sum()) / max(float(group_times[g][-1]), 1e-300), g))
    code = np.zeros(components, dtype=np.intp)
    for rank, g in enumerate(order):
        code[members[g]] = rank
    labels = np.zeros(len(rows), dtype=np.intp)
    labels[present] = code[comp]
    if not present.all():
        largest = int(np.bincount(labels[present]).argmax())
        labels[~present] = largest
    windows = [[int(w) + 1 for w in (costs * group_times[g][None, :]).argmin(axis=1)]
               for g in order]
    total_apart = sum(_best_time(group_times[g], costs) for g in order)
    together = _best_time(sum(group_times, np.zeros(positions)), costs)
    savings = together / np.maximum(total_apart, 1e-300) - 1.0
    at = int(savings.argmax())
    if len(members) == 1:
        windows = [windows[0]]
    return AcceptanceSplit(labels, components, loglik_gain, float(savings[at]) if
                           len(members) > 1 else 0.0, COSTS[at], windows)


def order_words(k: int) -> Sequence[str]:
    """Acceptance words for k groups, lowest expected tokens first."""
    return ("low", *(["medium"] * (k - 2)), "high")
