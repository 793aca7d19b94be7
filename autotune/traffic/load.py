"""Loading a whole sample for tuning: validate every line first, then split into workloads.

Nothing is written anywhere until a sample has loaded whole: a bad line stops the run before
the database sees it.

:func:`load_sample` keeps every request as an object (~550 bytes each). :func:`read_workloads`
gives a tuning pass what it uses — per workload the requests a trial replays, the summary, the
drift features — holding the whole sample only as columns (~100 bytes a request) and reading
back just the replayed lines, so a million-request sample fits a few hundred MB.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from autotune.errors import TrafficError
from autotune.traffic.columns import RequestColumns, collect_columns
from autotune.traffic.drift import WorkloadFeatures
from autotune.traffic.sample import file_sha256, read_sample
from autotune.traffic.summary import UNLABELLED, summarize_columns
from autotune.types import Request

__all__ = ["LoadedSample", "SampleWorkloads", "WorkloadTraffic", "load_sample",
           "read_workloads", "split_workloads", "workload_requests"]


@dataclass(frozen=True)
class LoadedSample:
    """A whole validated sample; ``too_long`` of the ``skipped`` lines exceeded max_model_len."""

    path: Path
    sha256: str
    size_bytes: int
    requests: list[Request]
    skipped: int = 0
    skip_errors: list[str] = field(default_factory=list)
    too_long: int = 0


def load_sample(path: str | Path, *, skip_invalid: bool = False,
                max_acceptance: int = 64, max_model_len: int | None = None) -> LoadedSample:
    """Read and validate every line of a sample (raises TrafficError on the first bad one).

    ``max_model_len`` (the policy's ``serve.max_model_len``) makes a request longer than the
    server's context a bad line. Arrivals are re-based so that the earliest is 0 (a log with
    ``timestamp`` need not be sorted).
    """
    sample = read_sample(path, skip_invalid=skip_invalid, max_acceptance=max_acceptance,
                         max_model_len=max_model_len)
    requests = list(sample)
    earliest = min((r.arrival_s for r in requests if r.arrival_s is not None), default=0.0)
    if earliest < 0:
        requests = [replace(r, arrival_s=r.arrival_s - earliest)
                    if r.arrival_s is not None else r for r in requests]
    p = Path(path)
    return LoadedSample(path=p, sha256=file_sha256(p), size_bytes=p.stat().st_size,
                        requests=requests, skipped=sample.skipped, skip_errors=sample.errors,
                        too_long=sample.too_long)


def split_workloads(requests: Sequence[Request], seed: int = 0) -> dict[str, list[Request]]:
    """Requests by workload; unlabelled requests are grouped automatically (labels win)."""
    if any(r.workload is None for r in requests):
        requests = _assign(requests, seed)
    out: dict[str, list[Request]] = {}
    for r in requests:
        out.setdefault(r.workload or UNLABELLED, []).append(r)
    return dict(sorted(out.items()))


def _assign(requests: Sequence[Request], seed: int) -> list[Request]:
    try:
        from autotune.traffic.grouping import assign_workloads
    except ImportError:  # grouping not installed in this checkout yet
        return [r if r.workload else replace(r, workload=UNLABELLED) for r in requests]
    return list(assign_workloads(requests, seed=seed))


def workload_requests(requests: Sequence[Request], max_requests: int) -> list[Request]:
    """The first ``max_requests`` requests in arrival order, arrivals re-based to start at 0."""
    timed = [r for r in requests if r.arrival_s is not None]
    if len(timed) == len(requests) and timed:
        ordered = sorted(requests, key=lambda r: (r.arrival_s or 0.0, r.line))[:max_requests]
        t0 = ordered[0].arrival_s or 0.0
        return [replace(r, arrival_s=(r.arrival_s or 0.0) - t0) for r in ordered]
    return [replace(r, arrival_s=None) for r in list(requests)[:max_requests]]


@dataclass(frozen=True)
class WorkloadTraffic:
    """One workload of a sample as a tuning pass uses it.

    ``replay`` is :func:`workload_requests` of the workload's requests; ``summary`` is its
    :class:`~autotune.traffic.summary.WorkloadSummary` as a dict; ``features`` what drift is
    judged on (:mod:`autotune.traffic.drift`), over all its requests.
    """

    name: str
    requests: int
    replay: list[Request]
    summary: dict[str, Any]
    features: WorkloadFeatures


@dataclass(frozen=True)
class SampleWorkloads:
    """A validated sample split into workloads, without an object per request."""

    path: Path
    sha256: str
    size_bytes: int
    requests: int
    workloads: dict[str, WorkloadTraffic]
    skipped: int = 0
    skip_errors: list[str] = field(default_factory=list)
    too_long: int = 0


def read_workloads(path: str | Path, *, max_requests: int, skip_invalid: bool = False,
                   max_acceptance: int = 64, max_model_len: int | None = None,
                   seed: int = 0) -> SampleWorkloads:
    """What ``split_workloads(load_sample(...).requests, seed)`` gives a pass, per workload
    (replayed requests, summary, drift features), in two reads of the file: one into columns,
    one parsing only the replayed lines. TrafficError when the file changes in between."""
    from autotune.traffic.grouping import group_columns

    p = Path(path)
    sample = read_sample(p, skip_invalid=skip_invalid, max_acceptance=max_acceptance,
                         max_model_len=max_model_len)
    sha256 = file_sha256(p) if p.is_file() else ""
    cols = collect_columns(sample)
    if (cols.workload < 0).any():
        cols = group_columns(cols, seed).columns
    summaries = {s.workload: s.as_dict() for s in summarize_columns(cols, total=False)}
    chosen = {name: _replayed(cols, rows, max_requests) for name, rows in _members(cols).items()}
    lines = np.concatenate([cols.line[rows] for rows in chosen.values()])
    picked = {r.line: r for r in sample.pick(lines.tolist())}
    if file_sha256(p) != sha256 or len(picked) != len(lines):
        raise TrafficError.at(str(p), None, None, "changed while it was being read; a sample "
                              "must stay as it is while a pass loads it (write a new file and "
                              "rename it over the old one)")
    workloads = {}
    for name, rows in _members(cols).items():
        timed = not np.isnan(cols.arrival_s[rows]).any()
        replay = [picked[int(line)] for line in cols.line[chosen[name]]]
        t0 = (replay[0].arrival_s or 0.0) if timed else 0.0
        replay = [replace(r, workload=name,
                          arrival_s=(r.arrival_s or 0.0) - t0 if timed else None)
                  for r in replay]
        workloads[name] = WorkloadTraffic(name, len(rows), replay, summaries[name],
                                          WorkloadFeatures.of_columns(cols, rows))
    return SampleWorkloads(path=p, sha256=sha256, size_bytes=p.stat().st_size,
                           requests=len(cols), workloads=workloads, skipped=sample.skipped,
                           skip_errors=sample.errors, too_long=sample.too_long)


def _members(cols: RequestColumns) -> dict[str, np.ndarray]:
    """Row indices per workload name, sorted by name (unlabelled rows under ``default``)."""
    names = [*cols.names, UNLABELLED]
    out: dict[str, np.ndarray] = {}
    for code in np.unique(cols.workload):
        rows = np.flatnonzero(cols.workload == code)
        name = names[code]
        out[name] = np.sort(np.concatenate([out[name], rows])) if name in out else rows
    return dict(sorted(out.items()))


def _replayed(cols: RequestColumns, rows: np.ndarray, max_requests: int) -> np.ndarray:
    """:func:`workload_requests`'s choice, as row indices in replay order."""
    arrivals = cols.arrival_s[rows]
    if len(rows) and not np.isnan(arrivals).any():
        order = np.lexsort((cols.line[rows], arrivals))  # by arrival, then line
        return rows[order[:max_requests]]
    return rows[:max_requests]
