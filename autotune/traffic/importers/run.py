"""Running an importer over a file, and exporting a sample to vllm-bench.

Two streaming passes over the input: the first validates every row and finds the earliest time
(so ``arrival_s`` is measured from it even when the log is not sorted), the second converts the
rows and hands them one at a time to the atomic writer. Nothing is written when the first pass
finds a bad row (without ``skip_invalid``) or when no row is valid.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autotune.errors import TrafficError
from autotune.traffic.importers.base import Importer, Row
from autotune.traffic.importers.prompts import PromptPool, load_prompt_pool
from autotune.traffic.importers.vllm_bench import bench_record
from autotune.traffic.lines import iter_lines
from autotune.traffic.sample import MAX_SPAN_S, estimate_tokens, read_sample
from autotune.traffic.writer import write_jsonl

__all__ = ["ImportReport", "export_vllm_bench", "import_file", "iter_rows"]

_KEEP_ERRORS = 20


@dataclass
class ImportReport:
    """What an import (or export) did: counts, the first skip reasons, the time span."""

    format: str
    source: str
    out: str
    action: str = "imported"
    requests: int = 0
    skipped: int = 0
    errors: list[str] = field(default_factory=list)
    span_s: float | None = None
    prompts_attached: int = 0
    out_of_order: int = 0
    workloads: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action, "format": self.format, "source": self.source,
            "out": self.out,
            "requests": self.requests, "skipped": self.skipped, "errors": list(self.errors),
            "span_s": self.span_s, "prompts_attached": self.prompts_attached,
            "out_of_order": self.out_of_order, "workloads": dict(self.workloads),
        }


def iter_rows(importer: Importer, path: str | Path, report: ImportReport,
              skip_invalid: bool = False) -> Iterator[Row]:
    """Stream the valid rows of ``path``; count (and, with ``skip_invalid``, skip) bad ones."""
    src = Path(path)
    parser = importer.parser(str(src))
    report.skipped = 0
    report.errors = []
    for raw in iter_lines(src, what="a trace or log file"):
        if raw.blank:
            continue
        try:
            row = parser.parse(raw.text(), raw.number)
        except TrafficError as e:
            if not skip_invalid:
                raise
            report.skipped += 1
            if len(report.errors) < _KEEP_ERRORS:
                report.errors.append(str(e))
            continue
        if row is not None:
            yield row


def _record(row: Row, *, stem: str, origin: float | None, workload: str | None,
            pool: PromptPool | None, rng: np.random.Generator,
            fit: bool) -> tuple[dict[str, Any], bool]:
    """The sample line of ``row``, and whether a prompt text was attached from ``pool``."""
    prompt = row.prompt
    attached = False
    prompt_tokens = row.prompt_tokens
    if prompt is None and pool is not None and prompt_tokens is not None:
        prompt = pool.pick(prompt_tokens, rng, fit=fit)
        attached = True
    if prompt_tokens is None:
        if not prompt:  # parsers guarantee one of the two; keep the invariant explicit
            raise TrafficError.at(stem, row.line, "prompt_tokens", "missing and no prompt text")
        prompt_tokens = estimate_tokens(prompt)
    rec: dict[str, Any] = {"id": row.id if row.id is not None else f"{stem}:{row.line}"}
    if row.time_s is not None and origin is not None:
        rec["arrival_s"] = round(row.time_s - origin, 6)
    label = workload or row.workload
    if label:
        rec["workload"] = label
    rec["prompt_tokens"] = prompt_tokens
    rec["output_tokens"] = row.output_tokens
    rec.update(row.extra)
    if prompt is not None:
        rec["prompt"] = prompt
    return rec, attached


def import_file(importer: Importer, path: str | Path, out: str | Path, *,
                workload: str | None = None, prompts: Sequence[str | Path] = (),
                skip_invalid: bool = False, seed: int = 0,
                fit_prompts: bool = True) -> ImportReport:
    """Convert ``path`` (in ``importer``'s format) to a traffic sample at ``out``."""
    if workload is not None and not workload.strip():
        raise TrafficError("--workload must be a non-empty label")
    src = Path(path)
    report = ImportReport(format=importer.name, source=str(src), out=str(out))
    pool = load_prompt_pool(prompts) if prompts else None

    # Pass 1: validate everything, find the time origin, the span and the order.
    origin = last = latest = None
    first_timed: bool | None = None
    valid = 0
    for row in iter_rows(importer, src, report, skip_invalid):
        valid += 1
        timed = row.time_s is not None
        if first_timed is None:
            first_timed = timed
        elif timed != first_timed:
            raise TrafficError.at(str(src), row.line, "timestamp",
                                  ("given here but missing on earlier rows" if timed else
                                   "missing here but given on earlier rows")
                                  + "; give it on every row or on none")
        if row.time_s is None:
            continue
        origin = row.time_s if origin is None else min(origin, row.time_s)
        latest = row.time_s if latest is None else max(latest, row.time_s)
        if latest - origin > MAX_SPAN_S:
            raise TrafficError.at(str(src), row.line, "timestamp",
                                  f"puts the rows {latest - origin:,.0f} s apart, more than "
                                  f"{MAX_SPAN_S:,.0f} s (a year); is this row's time in the "
                                  "unit of the others?")
        if last is not None and row.time_s < last:
            report.out_of_order += 1
        last = row.time_s
    if not valid:
        what = (f"all {report.skipped} rows are invalid (first: {report.errors[0]})"
                if report.skipped else "it holds no requests")
        raise TrafficError.at(str(src), None, None, f"nothing to import: {what}")
    report.span_s = (latest - origin) if origin is not None and latest is not None else None

    # Pass 2: convert and write (atomically).
    rng = np.random.default_rng(seed)
    stem = src.name.split(".")[0] or src.name
    workloads: dict[str, int] = {}

    def records() -> Iterator[dict[str, Any]]:
        for row in iter_rows(importer, src, report, skip_invalid):
            rec, attached = _record(row, stem=stem, origin=origin, workload=workload, pool=pool,
                                    rng=rng, fit=fit_prompts)
            report.prompts_attached += attached
            label = rec.get("workload")
            if isinstance(label, str):
                workloads[label] = workloads.get(label, 0) + 1
            yield rec

    report.requests = write_jsonl(records(), out)
    report.workloads = workloads
    return report


def export_vllm_bench(sample: str | Path, out: str | Path, *,
                      prompts: Sequence[str | Path] = (), skip_invalid: bool = False,
                      seed: int = 0) -> ImportReport:
    """Write a sample as the JSONL of ``vllm bench serve --dataset-name custom``.

    Requests without prompt text get one from ``prompts`` (nearest length); without
    ``prompts`` such a request is an error naming its line.
    """
    report = ImportReport(format="vllm-bench", source=str(sample), out=str(out),
                          action="exported")
    pool = load_prompt_pool(prompts) if prompts else None
    rng = np.random.default_rng(seed)
    reader = read_sample(sample, skip_invalid=skip_invalid)

    def records() -> Iterable[dict[str, Any]]:
        for req in reader:
            if req.prompt is None and pool is not None:
                report.prompts_attached += 1
                yield {"prompt": pool.pick(req.prompt_tokens, rng),
                       "output_tokens": req.output_tokens}
            else:
                yield bench_record(req, str(sample))

    report.requests = write_jsonl(records(), out)
    report.skipped, report.errors = reader.skipped, list(reader.errors)
    return report
