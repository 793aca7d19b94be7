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

from autotune.types import Request

__all__ = [
    "MIN_SILHOUETTE",
    "SINGLE_GROUP",
    "Group",
    "Grouping",
    "assign_workloads",
    "describe_groups",
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
        return {
            "k": self.k,
            "criterion": "silhouette",
            "silhouettes": {str(k): v for k, v in sorted(self.silhouettes.items())},
            "features": list(self.features),
            "groups": [g.as_dict() for g in self.groups],
        }


def _acceptance_block(requests: Sequence[Request]) -> FloatArray | None:
    """Survival curves over the positions every curve has; rows without one get the mean."""
    curves = [r.acceptance for r in requests]
    present = [c for c in curves if c]
    if not present:
        return None
    positions = min(len(c) for c in present)
    surv = np.full((len(requests), positions), np.nan)
    for i, c in enumerate(curves):
        if c:
            surv[i] = np.cumprod(np.asarray(c[:positions], dtype=float))
    mean = np.nanmean(surv, axis=0)
    rows = np.isnan(surv[:, 0])
    surv[rows] = mean
    return surv


def _features(requests: Sequence[Request]) -> tuple[FloatArray, int]:
    """Standardised, weighted features and the number of acceptance columns."""
    lengths = np.log(np.array([[r.prompt_tokens, r.output_tokens] for r in requests],
                              dtype=float))
    block = _acceptance_block(requests)
    raw = lengths if block is None else np.hstack([lengths, block])
    std = raw.std(axis=0)
    z = (raw - raw.mean(axis=0)) / np.where(std > 1e-12, std, 1.0)
    if block is not None:
        z[:, 2:] *= math.sqrt(ACCEPTANCE_WEIGHT / block.shape[1])
    return z, 0 if block is None else block.shape[1]


def _kmeans(z: FloatArray, k: int, rng: np.random.Generator) -> npt.NDArray[np.intp] | None:
    """Labels of the best of ``RESTARTS`` k-means fits (on a subsample when ``z`` is huge)."""
    from scipy.cluster.vq import ClusterError, kmeans2, vq

    fit = z if len(z) <= FIT_SAMPLE else z[np.sort(rng.choice(len(z), FIT_SAMPLE, replace=False))]
    best: tuple[float, FloatArray] | None = None
    for _ in range(RESTARTS):
        try:
            centres, labels = kmeans2(fit, k, iter=50, minit="++", missing="raise", seed=rng)
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


def _summary(name: str, members: Sequence[Request], automatic: bool) -> Group:
    prompt = np.array([r.prompt_tokens for r in members], dtype=float)
    output = np.array([r.output_tokens for r in members], dtype=float)
    curves = [np.cumprod(np.asarray(r.acceptance, dtype=float)) for r in members if r.acceptance]
    mean_surv = float(np.mean([c.mean() for c in curves])) if curves else None
    expected = float(np.mean([1.0 + c.sum() for c in curves])) if curves else None
    return Group(name=name, requests=len(members), automatic=automatic,
                 prompt_tokens_p50=float(np.median(prompt)),
                 output_tokens_p50=float(np.median(output)),
                 mean_survival=mean_surv, expected_tokens=expected)


def group_requests(requests: Sequence[Request], seed: int = 0, *, max_groups: int = 6,
                   min_group: int | None = None) -> Grouping:
    """Label every request: keep given labels, cluster the rest (see the module docstring).

    ``min_group`` (default: 2 % of the unlabelled requests, at least 10) is the smallest group
    a split may leave. Names of found groups never collide with given labels.
    """
    unlabelled = [i for i, r in enumerate(requests) if r.workload is None]
    out = list(requests)
    k = 0
    scores: dict[int, float] = {}
    features: tuple[str, ...] = ()
    found: set[str] = set()
    if unlabelled:
        todo = [requests[i] for i in unlabelled]
        floor = min_group if min_group is not None else max(10, math.ceil(0.02 * len(todo)))
        z, acc_cols = _features(todo)
        features = ("log_prompt_tokens", "log_output_tokens") + (
            (f"survival[1..{acc_cols}]",) if acc_cols else ())
        labels, scores = _choose(z, seed, max_groups, max(1, floor))
        k = int(labels.max()) + 1
        taken = {r.workload for r in requests if r.workload is not None}
        names = [_free(name, taken) for name in _names(z, labels, k, acc_cols)]
        found = set(names)
        for i, label in zip(unlabelled, labels, strict=True):
            out[i] = replace(requests[i], workload=names[int(label)])
    members: dict[str, list[Request]] = {}
    for r in out:
        members.setdefault(r.workload or SINGLE_GROUP, []).append(r)
    groups = [_summary(name, rs, name in found) for name, rs in members.items()]
    groups.sort(key=lambda g: (-g.requests, g.name))
    return Grouping(requests=out, groups=groups, k=k, silhouettes=scores, features=features)


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
