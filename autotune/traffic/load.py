"""Loading a whole sample for tuning: validate every line first, then split into workloads.

Nothing is written anywhere until a sample has loaded whole: a bad line stops the run before
the database sees it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from autotune.traffic.sample import file_sha256, read_sample
from autotune.traffic.summary import UNLABELLED
from autotune.types import Request

__all__ = ["LoadedSample", "load_sample", "split_workloads", "workload_requests"]


@dataclass(frozen=True)
class LoadedSample:
    path: Path
    sha256: str
    size_bytes: int
    requests: list[Request]
    skipped: int = 0
    skip_errors: list[str] = field(default_factory=list)


def load_sample(path: str | Path, *, skip_invalid: bool = False,
                max_acceptance: int = 64) -> LoadedSample:
    """Read and validate every line of a sample (raises TrafficError on the first bad one)."""
    sample = read_sample(path, skip_invalid=skip_invalid, max_acceptance=max_acceptance)
    requests = list(sample)
    p = Path(path)
    return LoadedSample(path=p, sha256=file_sha256(p), size_bytes=p.stat().st_size,
                        requests=requests, skipped=sample.skipped, skip_errors=sample.errors)


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
