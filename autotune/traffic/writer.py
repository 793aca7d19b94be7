"""Atomic writing of JSON Lines files (traffic samples, vllm-bench datasets).

:func:`write_jsonl` streams records into a temporary file beside the target and renames it over
the target only when every record was written: an error (a bad input row, a full disk, Ctrl-C)
leaves the target as it was and no temporary file behind. A target ending in ``.gz`` is
gzip-compressed (with a zero mtime, so equal content gives equal bytes).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO, cast

from autotune.errors import TrafficError
from autotune.types import Request

__all__ = ["request_record", "write_jsonl"]


def request_record(request: Request, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The sample line of ``request`` (docs/traffic.md): the fields that are set, prompt last."""
    rec: dict[str, Any] = {"id": request.id}
    if request.arrival_s is not None:
        rec["arrival_s"] = request.arrival_s
    if request.workload is not None:
        rec["workload"] = request.workload
    rec["prompt_tokens"] = request.prompt_tokens
    rec["output_tokens"] = request.output_tokens
    rec["temperature"] = request.temperature
    if request.acceptance is not None:
        rec["acceptance"] = list(request.acceptance)
    if extra:
        rec.update(extra)
    if request.prompt is not None:
        rec["prompt"] = request.prompt
    return rec


def _dumps(record: Mapping[str, Any]) -> str:
    try:
        return json.dumps(record, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError as e:  # NaN/Infinity: never valid in a sample
        bad = [k for k, v in record.items() if isinstance(v, float) and not math.isfinite(v)]
        raise TrafficError(f"cannot write a non-finite number in field(s) {bad}: {e}") from e


def write_jsonl(records: Iterable[Mapping[str, Any]], path: str | Path) -> int:
    """Write ``records`` as JSON Lines to ``path`` atomically; returns the number written.

    ``records`` is consumed lazily (one record in memory at a time). Any exception raised while
    iterating it propagates unchanged after the temporary file is removed.
    """
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as e:
        raise TrafficError.at(str(target), None, None,
                              f"cannot write here ({e.strerror or e}); pick a writable -o path"
                              ) from e
    tmp = Path(tmp_name)
    count = 0
    try:
        with os.fdopen(fd, "wb") as raw:
            stream = cast(BinaryIO, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="")
                          if target.name.endswith(".gz") else raw)
            try:
                for rec in records:
                    stream.write(_dumps(rec).encode("utf-8"))
                    stream.write(b"\n")
                    count += 1
            finally:
                if stream is not raw:
                    stream.close()
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise TrafficError.at(str(target), None, None,
                                  f"cannot write ({e.strerror or e})") from e
        raise
    return count
