"""First stage: k-means on standardised log prompt/output tokens and the survival curve, k by
the silhouette (private to the grouping package; the rule is in the package docstring)."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from autotune.traffic.columns import RequestColumns

FloatArray = npt.NDArray[np.float64]

#: Centre spread (in standard deviations) from which a dimension appears in group names.
NAME_SPREAD = 0.5
#: A centre this far (in standard deviations) from the mean is short/long, else medium.
NAME_BAND = 0.3
#: Squared weight of the whole acceptance block (each length feature has 1).
ACCEPTANCE_WEIGHT = 2.0

#: Below this best silhouette the requests stay one length group.
MIN_SILHOUETTE = 0.5
#: Prefer the smallest k whose silhouette is this close to the best one.
SILHOUETTE_SLACK = 0.05
#: Requests the silhouette is computed on (a seeded subsample; O(m²) distances).
SILHOUETTE_SAMPLE = 2000
#: k-means restarts per k (the lowest within-group sum of squares wins).
RESTARTS = 4
#: Lloyd iterations at most per k-means fit.
ITERATIONS = 50
#: Larger samples are fitted on a seeded subsample of this size, then every request is given
#: its nearest centre.
FIT_SAMPLE = 50_000


def _acceptance_block(cols: RequestColumns, rows: npt.NDArray[np.int64]) -> FloatArray | None:
    """Survival curves over the positions every curve has; rows without one get the mean."""
    lengths = cols.acceptance_lengths()[rows]
    present = lengths > 0
    if not present.any():
        return None
    positions = int(lengths[present].min())
    surv = np.full((len(rows), positions), np.nan)
    surv[present] = cols.survival(rows[present], positions)
    surv[~present] = np.nanmean(surv, axis=0)
    return surv


def length_features(cols: RequestColumns, rows: npt.NDArray[np.int64]) -> tuple[FloatArray, int]:
    """Standardised, weighted features of ``rows`` and the number of acceptance columns."""
    lengths = np.log(np.column_stack([cols.prompt_tokens[rows],
                                      cols.output_tokens[rows]]).astype(float))
    block = _acceptance_block(cols, rows)
    z = lengths if block is None else np.hstack([lengths, block])
    del lengths, block
    std = z.std(axis=0)
    z -= z.mean(axis=0)  # in place: a million rows of features are 80 MB each copy
    z /= np.where(std > 1e-12, std, 1.0)
    acc_cols = z.shape[1] - 2
    if acc_cols:
        z[:, 2:] *= math.sqrt(ACCEPTANCE_WEIGHT / acc_cols)
    return z, acc_cols


def _lloyd(fit: FloatArray, k: int,
           rng: np.random.Generator) -> tuple[FloatArray, npt.NDArray[np.int32]]:
    """scipy's ``kmeans2(fit, k, iter=ITERATIONS, minit="++", missing="raise")``, stopped as
    soon as the labels repeat (from then on every iteration gives the same centres, so the
    result is the same, bit for bit; kmeans2 itself always runs every iteration)."""
    from scipy.cluster.vq import kmeans2

    centres, labels = kmeans2(fit, k, iter=1, minit="++", missing="raise", seed=rng,
                              check_finite=False)
    for _ in range(ITERATIONS - 1):
        nxt, nxt_labels = kmeans2(fit, centres, iter=1, minit="matrix", missing="raise",
                                  check_finite=False)
        if np.array_equal(nxt_labels, labels):
            break
        centres, labels = nxt, nxt_labels
    return centres, labels


def _kmeans(z: FloatArray, k: int, rng: np.random.Generator) -> npt.NDArray[np.intp] | None:
    """Labels of the best of ``RESTARTS`` k-means fits (on a subsample when ``z`` is huge)."""
    from scipy.cluster.vq import ClusterError, vq

    fit = z if len(z) <= FIT_SAMPLE else z[np.sort(rng.choice(len(z), FIT_SAMPLE, replace=False))]
    best: tuple[float, FloatArray] | None = None
    for _ in range(RESTARTS):
        try:
            centres, labels = _lloyd(fit, k, rng)
        except ClusterError:  # an empty cluster: k too large for these points
            continue
        sse = float(((fit - centres[labels]) ** 2).sum())
        if best is None or sse < best[0]:
            best = (sse, centres)
    if best is None:
        return None
    labels, _ = vq(z, best[1], check_finite=False)
    return np.asarray(labels, dtype=np.intp)


def _silhouette(z: FloatArray, labels: npt.NDArray[np.intp], k: int) -> float:
    from scipy.spatial.distance import cdist

    dist = cdist(z, z)
    counts = np.bincount(labels, minlength=k).astype(float)
    sums = np.stack([dist[:, labels == j].sum(axis=1) for j in range(k)], axis=1)
    own = counts[labels]
    a = sums[np.arange(len(z)), labels] / np.maximum(own - 1, 1)
    other = sums / np.maximum(counts, 1)
    other[np.arange(len(z)), labels] = np.inf
    other[:, counts == 0] = np.inf
    b = other.min(axis=1)
    s = np.where(own > 1, (b - a) / np.maximum(np.maximum(a, b), 1e-12), 0.0)
    return float(s.mean())


def choose_lengths(z: FloatArray, seed: int, max_groups: int,
                   min_group: int) -> tuple[npt.NDArray[np.intp], dict[int, float]]:
    n = len(z)
    rng = np.random.default_rng(seed)
    sub = np.sort(rng.choice(n, size=min(n, SILHOUETTE_SAMPLE), replace=False))
    scores: dict[int, float] = {}
    fits: dict[int, npt.NDArray[np.intp]] = {}
    distinct = len(np.unique(z, axis=0)) if n else 0
    for k in range(2, max_groups + 1):
        if n < k * min_group or distinct < k:
            break
        labels = _kmeans(z, k, rng)
        if labels is None or np.bincount(labels, minlength=k).min() < min_group:
            continue
        scores[k] = _silhouette(z[sub], labels[sub], k)
        fits[k] = labels
    single = np.zeros(n, dtype=np.intp)
    if not scores or max(scores.values()) < MIN_SILHOUETTE:
        return single, scores
    best = max(scores.values())
    k = min(k for k, s in scores.items() if s >= best - SILHOUETTE_SLACK)
    return fits[k], scores


def first_stage_names(z: FloatArray, labels: npt.NDArray[np.intp], k: int,
                      acc_cols: int) -> list[str]:
    """Words for what sets each group apart ("" for one group)."""
    if k == 1:
        return [""]
    dims = [("prompt", z[:, 0], ("short", "long")), ("output", z[:, 1], ("short", "long"))]
    if acc_cols:
        level = z[:, 2:].sum(axis=1)
        spread = level.std()
        dims.append(("acceptance", level / (spread if spread > 1e-12 else 1.0), ("low", "high")))
    parts: list[list[str]] = [[] for _ in range(k)]
    for dim, values, (low, high) in dims:
        centres = np.array([values[labels == j].mean() for j in range(k)])
        if centres.max() - centres.min() < NAME_SPREAD:
            continue
        for j, c in enumerate(centres):
            word = low if c < -NAME_BAND else high if c > NAME_BAND else "medium"
            parts[j].append(f"{word}-{dim}")
    return ["-".join(p) or "mixed" for p in parts]
