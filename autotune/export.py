"""Exports of a recommendation: exactly what `vllm serve` takes.

- ``speculative-config``: the JSON object ``--speculative-config`` accepts, with only fields of
  vLLM's ``SpeculativeConfig`` (e.g. ``{"method": "dspark", "model": "novita/kimi-k2.6-dspark",
  "num_speculative_tokens": 5}``).
- ``vllm-args``: the whole flag list (model, parallelism, speculative config, batching, the
  policy's extra args), shell-quoted, one command line.
- ``schedule``: the speculative config plus ``num_speculative_tokens_per_batch_size`` rows
  ``[start_bs, end_bs, K]`` when the best window shrinks as the batch grows.

Files are written atomically (temporary file in the same folder, then rename).
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.errors import ExportError
from autotune.types import SPECULATIVE_CONFIG_KEYS

__all__ = [
    "FORMATS",
    "render",
    "speculative_config",
    "vllm_args",
    "write_atomic",
]

FORMATS = ("speculative-config", "vllm-args", "schedule")


def speculative_config(rec: Mapping[str, Any]) -> dict[str, Any] | None:
    """The recommendation's ``--speculative-config`` object (None: serve without a drafter)."""
    spec = rec.get("speculative_config")
    if not spec:
        return None
    unknown = set(spec) - SPECULATIVE_CONFIG_KEYS
    if unknown:
        raise ExportError(f"speculative config of {rec.get('workload')!r} has fields vLLM's "
                          f"SpeculativeConfig does not know: {sorted(unknown)}")
    return dict(spec)


def schedule_config(rec: Mapping[str, Any],
                    rows: Sequence[Sequence[int]] | None = None) -> dict[str, Any] | None:
    """Speculative config with ``num_speculative_tokens_per_batch_size`` when rows are given.

    Rows are ``[start_bs, end_bs, K]``, contiguous from batch size 1, inclusive ranges.
    """
    spec = speculative_config(rec)
    rows = rows if rows is not None else rec.get("provenance", {}).get("window_schedule")
    if spec is None or not rows:
        return spec
    expected = 1
    for start, end, k in rows:
        if start != expected or end < start or k < 0:
            raise ExportError(f"window schedule rows must cover batch sizes from 1 contiguously "
                              f"with start <= end; got {list(rows)}")
        expected = end + 1
    spec["num_speculative_tokens_per_batch_size"] = [list(r) for r in rows]
    return spec


def vllm_args(rec: Mapping[str, Any]) -> list[str]:
    """The full ``vllm serve`` argument list for a recommendation."""
    serve = rec.get("serve") or {}
    config = rec["config"]
    if not serve.get("model"):
        raise ExportError(f"recommendation for {rec.get('workload')!r} has no serve.model; it "
                          "was stored without its policy's serve section")
    args = ["vllm", "serve", str(serve["model"])]
    if serve.get("tensor_parallel_size"):
        args += ["--tensor-parallel-size", str(serve["tensor_parallel_size"])]
    if serve.get("max_model_len"):
        args += ["--max-model-len", str(serve["max_model_len"])]
    spec = schedule_config(rec) if rec.get("provenance", {}).get("window_schedule") else \
        speculative_config(rec)
    if spec:
        args += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    args += ["--max-num-seqs", str(config["max_num_seqs"]),
             "--max-num-batched-tokens", str(config["max_num_batched_tokens"])]
    args += [str(a) for a in serve.get("extra_args", [])]
    return args


def render(rec: Mapping[str, Any], fmt: str) -> str:
    """The text of one export format (with a trailing newline)."""
    if fmt == "speculative-config":
        spec = speculative_config(rec)
        if spec is None:
            raise ExportError(f"the recommendation for {rec.get('workload')!r} serves without "
                              "speculative decoding (window 0); export --format vllm-args "
                              "instead")
        return json.dumps(spec) + "\n"
    if fmt == "schedule":
        spec = schedule_config(rec)
        if spec is None:
            raise ExportError(f"the recommendation for {rec.get('workload')!r} serves without "
                              "speculative decoding; there is no window schedule to export")
        return json.dumps(spec) + "\n"
    if fmt == "vllm-args":
        return shlex.join(vllm_args(rec)) + "\n"
    raise ExportError(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")


def write_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically: readers see the old file or the new, never half."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        raise ExportError(f"cannot write {target}: {e}") from e
    return target
