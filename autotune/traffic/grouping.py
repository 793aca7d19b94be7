"""Automatic workload grouping of requests that carry no ``workload`` label (DESIGN §4).

Labels win: labelled requests keep theirs, and a sample whose requests are all labelled comes
back unchanged. The unlabelled ones are clustered on

- log prompt tokens and log output tokens, and
- the predicted acceptance curve (survival s_k = c_1·…·c_k over the positions every request
  has), when any request has one (requests without are given the mean curve),

each feature standardised; the acceptance block is scaled by sqrt(2 / positions) so the whole
curve weighs as much as the two lengths together (the window depends on the first, batching
on the second). k-means (scipy's ``kmeans2``, k-means++ starts, a seeded
generator, best of several restarts, fitted on at most ``FIT_SAMPLE`` requests) is run for
k = 2..``max_groups``, and k is chosen by the silhouette (computed on a seeded subsample): the
smallest k whose silhouette is within ``SILHOUETTE_SLACK`` of the best. The requests stay one
group when no k reaches ``MIN_SILHOUETTE`` (no substantial structure, after Kaufman &
Rousseeuw); a k that would leave a group smaller than ``min_group`` requests is not a candidate.
Deterministic under ``seed``.

Groups are named by what sets them apart: ``long-prompt-short-output``,
``short-prompt-long-output-high-acceptance``... (a dimension is named when the group centres
differ along it by at least half a standard deviation; ``medium`` sits between). One group is
called ``default``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from autotune.traffic.columns import RequestColumns, collect_columns
from autotune.types import Request

__all__ = [
    "MIN_SILHOUETTE",
    "SINGLE_GROUP",
    "Group",
    "GroupedColumns",
    "Grouping",
    "assign_workloads",
    "describe_groups",
    "group_columns",
    "group_requests",
]

FloatArray = npt.NDArray[np.float64]

#: Name of the only group when the unlabelled requests show no structure.
SINGLE_GROUP = "default"
#: Squared weight of the whole acceptance block (each length feature has 1).
ACCEPTANCE_WEIGHT = 2.0
#: Below this best silhouette the unlabelled requests stay one group.
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
#: Centre spread (in standard deviations) from which a dimension appears in group names.
NAME_SPREAD = 0.5
#: A centre this far (in standard deviations) from the mean is short/long, else medium.
NAME_BAND = 0.3


@dataclass(frozen=True)
class Group:
    """One workload of a sample, labelled or found (``automatic``)."""

    name: str
    requests: int
    automatic: bool
    prompt_tokens_p50: float
    output_tokens_p50: float
    mean_survival: float | None = None
    expected_tokens: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "workload": self.name, "requests": self.requests, "automatic": self.automatic,
            "prompt_tokens_p50": self.prompt_tokens_p50,
            "output_tokens_p50": self.output_tokens_p50,
            "mean_survival": self.mean_survival, "expected_tokens": self.expected_tokens,
        }


def _account(k: int, silhouettes: Mapping[int, float], features: tuple[str, ...],
             groups: Sequence[Group]) -> dict[str, Any]:
    return {
        "k": k,
        "criterion": "silhouette",
        "silhouettes": {str(j): v for j, v in sorted(silhouettes.items())},
        "features": list(features),
        "groups": [g.as_dict() for g in groups],
    }


@dataclass(frozen=True)
class Grouping:
    """The outcome of :func:`group_requests`: labelled requests and how the groups were chosen.

    ``silhouettes`` holds the criterion for every k tried (k >= 2); ``k`` is the number of
    automatic groups (0 when every request had a label); ``features`` names what was used.
    """

    requests: list[Request]
    groups: list[Group]
    k: int
    silhouettes: Mapping[int, float] = field(default_factory=dict)
    features: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return _account(self.k, self.silhouettes, self.features, self.groups)


@dataclass(frozen=True)
class GroupedColumns:
    """The outcome of :func:`group_columns`: the columns with every row labelled, and how (the
    fields of :class:`Grouping`)."""

    columns: RequestColumns
    groups: list[Group]
    k: int
    silhouettes: Mapping[int, float] = field(default_factory=dict)
    features: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return _account(self.k, self.silhouettes, self.features, self.groups)


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


def _features(cols: RequestColumns, rows: npt.NDArray[np.int64]) -> tuple[FloatArray, int]:
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


def _choose(z: FloatArray, seed: int, max_groups: int,
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


def _names(z: FloatArray, labels: npt.NDArray[np.intp], k: int, acc_cols: int) -> list[str]:
    if k == 1:
        return [SINGLE_GROUP]
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
    names = ["-".join(p) or "mixed" for p in parts]
    seen: dict[str, int] = {}
    order = sorted(range(k), key=lambda j: -int((labels == j).sum()))
    for j in order:  # the largest group keeps the plain name
        seen[names[j]] = seen.get(names[j], 0) + 1
        if seen[names[j]] > 1:
            names[j] = f"{names[j]}-{seen[names[j]]}"
    return names


def _summary(name: str, cols: RequestColumns, rows: npt.NDArray[np.int64],
             automatic: bool) -> Group:
    prompt = cols.prompt_tokens[rows].astype(float)
    output = cols.output_tokens[rows].astype(float)
    lengths = cols.acceptance_lengths()[rows]
    with_curve = rows[lengths > 0]
    mean_surv = expected = None
    if len(with_curve):
        lengths = lengths[lengths > 0]
        means = np.empty(len(with_curve))
        totals = np.empty(len(with_curve))
        for n in np.unique(lengths):
            same = np.flatnonzero(lengths == n)
            for start, block in cols.predictions(with_curve[same], int(n)):
                curves = np.cumprod(block, axis=1)
                at = same[start:start + len(block)]
                means[at] = curves.mean(axis=1)
                totals[at] = 1.0 + curves.sum(axis=1)
        mean_surv, expected = float(np.mean(means)), float(np.mean(totals))
    return Group(name=name, requests=len(rows), automatic=automatic,
                 prompt_tokens_p50=float(np.median(prompt)),
                 output_tokens_p50=float(np.median(output)),
                 mean_survival=mean_surv, expected_tokens=expected)


def group_columns(cols: RequestColumns, seed: int = 0, *, max_groups: int = 6,
                  min_group: int | None = None) -> GroupedColumns:
    """Label every row: keep given labels, cluster the rest (see the module docstring).

    ``min_group`` (default: 2 % of the unlabelled requests, at least 10) is the smallest group
    a split may leave. Names of found groups never collide with given labels.
    """
    unlabelled = np.flatnonzero(cols.workload < 0)
    k = 0
    scores: dict[int, float] = {}
    features: tuple[str, ...] = ()
    found: set[str] = set()
    if len(unlabelled):
        floor = min_group if min_group is not None else max(10, math.ceil(0.02 *
                                                                          len(unlabelled)))
        z, acc_cols = _features(cols, unlabelled)
        features = ("log_prompt_tokens", "log_output_tokens") + (
            (f"survival[1..{acc_cols}]",) if acc_cols else ())
        labels, scores = _choose(z, seed, max_groups, max(1, floor))
        k = int(labels.max()) + 1
        names = [_free(name, set(cols.names)) for name in _names(z, labels, k, acc_cols)]
        del z
        found = set(names)
        cols = cols.relabelled(unlabelled, labels, names)
    groups = []
    for code in np.unique(cols.workload):
        rows = np.flatnonzero(cols.workload == code)
        name = cols.names[code] or SINGLE_GROUP
        groups.append(_summary(name, cols, rows, name in found))
    groups.sort(key=lambda g: (-g.requests, g.name))
    return GroupedColumns(columns=cols, groups=groups, k=k, silhouettes=scores,
                          features=features)


def group_requests(requests: Sequence[Request], seed: int = 0, *, max_groups: int = 6,
                   min_group: int | None = None) -> Grouping:
    """Label every request: keep given labels, cluster the rest (see the module docstring).

    ``min_group`` (default: 2 % of the unlabelled requests, at least 10) is the smallest group
    a split may leave. Names of found groups never collide with given labels.
    """
    grouped = group_columns(collect_columns(requests), seed, max_groups=max_groups,
                            min_group=min_group)
    names, codes = grouped.columns.names, grouped.columns.workload
    out = [r if r.workload is not None else replace(r, workload=names[int(codes[i])])
           for i, r in enumerate(requests)]
    return Grouping(requests=out, groups=grouped.groups, k=grouped.k,
                    silhouettes=grouped.silhouettes, features=grouped.features)


def _free(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    n = 2
    while f"{name}-auto{n}" in taken:
        n += 1
    return f"{name}-auto{n}"


def assign_workloads(requests: Sequence[Request], seed: int = 0) -> list[Request]:
    """Every request with a workload label: given labels kept, the others grouped."""
    if all(r.workload is not None for r in requests):
        return list(requests)
    return group_requests(requests, seed).requests


def describe_groups(requests: Sequence[Request], seed: int = 0) -> dict[str, Any]:
    """JSON-ready account of the grouping (for ``traffic inspect``): k, criterion, groups."""
    return group_requests(requests, seed).as_dict()
