"""Automatic workload grouping of requests that carry no ``workload`` label.

Labels win: labelled requests keep theirs, and a sample whose requests are all labelled comes
back unchanged. The unlabelled ones are split in two stages:

1. **Shape** (as before): k-means (scipy's ``kmeans2``, k-means++ starts, a seeded generator,
   best of several restarts, fitted on at most 50,000 requests) on standardised log prompt
   and log output tokens and, when requests carry predictions, the survival curve (weighing as
   much as the two lengths) for k = 2..``max_groups``; k is chosen by the silhouette (on a
   seeded subsample): the smallest k within 0.05 of the best, and one group when no k reaches
   ``MIN_SILHOUETTE``; a k that would leave a group under ``min_group`` is not a candidate.
   The silhouette only sees well-separated groups: sources that differ in acceptance alone
   overlap request by request (the true partition of chat/code/math scores ~0.05) and pass
   here as one group.
2. **Acceptance**, within each first-stage group, when requests carry predictions: each request's
   curve becomes the level and slope of logit(c_k) over the positions; a Gaussian mixture
   chosen by the BIC finds sources that differ (even when their requests overlap), and groups
   are kept apart only when giving each its own best window saves serving time — the window's
   expected tokens per step against the cost of verifying more positions, over a range of
   verification costs (see ``_acceptance``). Sources whose best windows agree, or whose
   difference would save under 0.5 %, stay together, and one source stays one group.

Groups are named by what sets them apart: ``long-prompt-short-output``, ``high-acceptance``,
``short-prompt-long-output-low-acceptance``... (a length dimension is named when the group
centres differ along it by at least half a standard deviation; ``medium`` sits between). One
group is called ``default``. Deterministic under ``seed``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from autotune.traffic.columns import RequestColumns, collect_columns
from autotune.traffic.grouping._acceptance import (
    COSTS,
    MIN_GAIN,
    AcceptanceSplit,
    order_words,
    split_by_acceptance,
)
from autotune.traffic.grouping._lengths import (
    MIN_SILHOUETTE,
    choose_lengths,
    first_stage_names,
    length_features,
)
from autotune.types import Request

__all__ = [
    "COSTS",
    "MIN_GAIN",
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
             groups: Sequence[Group], acceptance: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {
        "k": k,
        "criterion": "silhouette (lengths), window gain (acceptance)",
        "silhouettes": {str(j): v for j, v in sorted(silhouettes.items())},
        "features": list(features),
        "acceptance": [dict(a) for a in acceptance],
        "groups": [g.as_dict() for g in groups],
    }


@dataclass(frozen=True)
class Grouping:
    """The outcome of :func:`group_requests`: labelled requests and how the groups were chosen.

    ``silhouettes`` holds the length criterion for every k tried (k >= 2); ``k`` is the number
    of automatic groups (0 when every request had a label); ``features`` names what was used;
    ``acceptance`` says, per length group, how its acceptance split was decided.
    """

    requests: list[Request]
    groups: list[Group]
    k: int
    silhouettes: Mapping[int, float] = field(default_factory=dict)
    features: tuple[str, ...] = ()
    acceptance: tuple[Mapping[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return _account(self.k, self.silhouettes, self.features, self.groups, self.acceptance)


@dataclass(frozen=True)
class GroupedColumns:
    """The outcome of :func:`group_columns`: the columns with every row labelled, and how (the
    fields of :class:`Grouping`)."""

    columns: RequestColumns
    groups: list[Group]
    k: int
    silhouettes: Mapping[int, float] = field(default_factory=dict)
    features: tuple[str, ...] = ()
    acceptance: tuple[Mapping[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return _account(self.k, self.silhouettes, self.features, self.groups, self.acceptance)


def _unique(names: list[str], sizes: Sequence[int]) -> list[str]:
    """Clashes get a numeric suffix; the largest group keeps the plain name."""
    seen: dict[str, int] = {}
    out = list(names)
    for j in sorted(range(len(names)), key=lambda j: (-sizes[j], j)):
        seen[names[j]] = seen.get(names[j], 0) + 1
        if seen[names[j]] > 1:
            out[j] = f"{names[j]}-{seen[names[j]]}"
    return out


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


def _split(cols: RequestColumns, rows: npt.NDArray[np.int64], seed: int, max_groups: int,
           floor: int) -> tuple[npt.NDArray[np.intp], list[str], dict[int, float],
                                tuple[str, ...], list[dict[str, Any]]]:
    """Labels (codes into the returned names) of the unlabelled ``rows``, and the account."""
    z, acc_cols = length_features(cols, rows)
    length_labels, scores = choose_lengths(z, seed, max_groups, floor)
    k_len = int(length_labels.max()) + 1
    length_names = first_stage_names(z, length_labels, k_len, acc_cols)
    del z
    labels = np.zeros(len(rows), dtype=np.intp)
    names: list[str] = []
    sizes: list[int] = []
    account: list[dict[str, Any]] = []
    for j in range(k_len):
        members = np.flatnonzero(length_labels == j)
        split: AcceptanceSplit | None = split_by_acceptance(cols, rows[members], seed + j,
                                                            floor)
        sub = split.labels if split is not None else np.zeros(len(members), dtype=np.intp)
        k_acc = split.k if split is not None else 1
        if split is not None:
            account.append({"within": length_names[j] or "all", **split.as_dict()})
        words = order_words(k_acc) if k_acc > 1 else [""]
        for a in range(k_acc):
            labels[members[sub == a]] = len(names)
            acc = f"{words[a]}-acceptance" if words[a] else ""
            if acc and "acceptance" in length_names[j]:
                acc = ""  # named by the first stage already; clashes get a suffix
            names.append("-".join(p for p in (length_names[j], acc) if p) or SINGLE_GROUP)
            sizes.append(int((sub == a).sum()))
    features = ("log_prompt_tokens", "log_output_tokens") + (
        (f"survival[1..{acc_cols}]", "acceptance_logit_level_slope") if acc_cols else ())
    return labels, _unique(names, sizes), scores, features, account


def group_columns(cols: RequestColumns, seed: int = 0, *, max_groups: int = 6,
                  min_group: int | None = None) -> GroupedColumns:
    """Label every row: keep given labels, split the rest (see the module docstring).

    ``min_group`` (default: 2 % of the unlabelled requests, at least 10) is the smallest group
    a split may leave. Names of found groups never collide with given labels.
    """
    unlabelled = np.flatnonzero(cols.workload < 0)
    k = 0
    scores: dict[int, float] = {}
    features: tuple[str, ...] = ()
    account: list[dict[str, Any]] = []
    found: set[str] = set()
    if len(unlabelled):
        floor = min_group if min_group is not None else max(10, math.ceil(0.02 *
                                                                          len(unlabelled)))
        labels, names, scores, features, account = _split(cols, unlabelled, seed, max_groups,
                                                          max(1, floor))
        names = [_free(name, set(cols.names)) for name in names]
        used = np.unique(labels)
        k = len(used)
        found = {names[int(u)] for u in used}
        cols = cols.relabelled(unlabelled, labels, names)
    groups = []
    for code in np.unique(cols.workload):
        rows = np.flatnonzero(cols.workload == code)
        name = cols.names[code] or SINGLE_GROUP
        groups.append(_summary(name, cols, rows, name in found))
    groups.sort(key=lambda g: (-g.requests, g.name))
    return GroupedColumns(columns=cols, groups=groups, k=k, silhouettes=scores,
                          features=features, acceptance=tuple(account))


def group_requests(requests: Sequence[Request], seed: int = 0, *, max_groups: int = 6,
                   min_group: int | None = None) -> Grouping:
    """Label every request: keep given labels, split the rest (see the module docstring).

    ``min_group`` (default: 2 % of the unlabelled requests, at least 10) is the smallest group
    a split may leave. Names of found groups never collide with given labels.
    """
    grouped = group_columns(collect_columns(requests), seed, max_groups=max_groups,
                            min_group=min_group)
    names, codes = grouped.columns.names, grouped.columns.workload
    out = [r if r.workload is not None else replace(r, workload=names[int(codes[i])])
           for i, r in enumerate(requests)]
    return Grouping(requests=out, groups=grouped.groups, k=grouped.k,
                    silhouettes=grouped.silhouettes, features=grouped.features,
                    acceptance=grouped.acceptance)


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
    """JSON-ready account of the grouping (for ``traffic inspect``): k, criteria, groups."""
    return group_requests(requests, seed).as_dict()
