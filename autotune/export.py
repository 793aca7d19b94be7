"""Exports of a recommendation: exactly what `vllm serve` takes.

- ``speculative-config``: the JSON object ``--speculative-config`` accepts, with only fields of
  vLLM's ``SpeculativeConfig`` (e.g. ``{"method": "dspark", "model": "novita/kimi-k2.6-dspark",
  "num_speculative_tokens": 5}``).
- ``vllm-args``: the whole flag list (model, parallelism, speculative config, batching, the
  policy's extra args) of the measured recommended config, shell-quoted, one command line.
- ``production-stack``: a values file for the vLLM production-stack Helm chart (``vllm-stack``):
  one ``servingEngineSpec.modelSpec`` entry per workload of a capacity plan, with its
  ``replicaCount`` and ``requestGPU``, the chart's ``vllmConfig`` fields (``tensorParallelSize``,
  ``maxModelLen``, ``maxNumSeqs``) and the rest of the measured command line, the speculative
  config included, in ``vllmConfig.extraArgs`` (:func:`production_stack_values`).
- ``schedule``: the speculative config plus ``num_speculative_tokens_per_batch_size`` rows
  ``[start_bs, end_bs, K]`` (inclusive ranges from batch size 1 up to the recommended
  ``max_num_seqs``) when the run's trials show the best window shrinking as the batch grows
  (:func:`autotune.recommend.schedule.window_schedule`, computed when the recommendation is
  made); otherwise the plain speculative config, and :func:`schedule_note` says why.

Files are written atomically (temporary file in the same folder, then rename).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import ExportError
from autotune.store.records import RecommendationRecord
from autotune.types import SPECULATIVE_CONFIG_KEYS

__all__ = [
    "FORMATS",
    "Deployment",
    "export_stem",
    "outputs_flagged",
    "outputs_reason",
    "pick_for_export",
    "production_stack_values",
    "render",
    "requirements_note",
    "schedule_config",
    "schedule_note",
    "speculative_config",
    "vllm_args",
    "write_atomic",
]

FORMATS = ("speculative-config", "vllm-args", "schedule", "production-stack")


def speculative_config(rec: RecommendationRecord) -> dict[str, Any] | None:
    """The recommendation's ``--speculative-config`` object (None: serve without a drafter)."""
    spec = rec.speculative_config
    if not spec:
        return None
    unknown = set(spec) - SPECULATIVE_CONFIG_KEYS
    if unknown:
        raise ExportError(f"speculative config of {rec.workload!r} has fields vLLM's "
                          f"SpeculativeConfig does not know: {sorted(unknown)}")
    return dict(spec)


def schedule_config(rec: RecommendationRecord,
                    rows: Sequence[Sequence[int]] | None = None) -> dict[str, Any] | None:
    """Speculative config with ``num_speculative_tokens_per_batch_size`` when rows exist.

    Rows are ``[start_bs, end_bs, K]``, contiguous from batch size 1, inclusive ranges, K at
    most ``num_speculative_tokens``, which stays the recommended (measured) window.
    """
    spec = speculative_config(rec)
    rows = rows if rows is not None else rec.provenance.get("window_schedule")
    if spec is None or not rows:
        return spec
    expected = 1
    for start, end, k in rows:
        if start != expected or end < start or k < 1:
            raise ExportError(f"window schedule rows must cover batch sizes from 1 contiguously "
                              f"with start <= end and K >= 1; got {list(rows)}")
        expected = end + 1
    window = int(spec["num_speculative_tokens"])
    if any(int(r[2]) > window for r in rows):
        raise ExportError(f"window schedule rows {list(rows)} exceed the recommended window "
                          f"{window} (num_speculative_tokens), which vLLM never drafts beyond")
    spec["num_speculative_tokens_per_batch_size"] = [[int(x) for x in r] for r in rows]
    return spec


def schedule_note(rec: RecommendationRecord) -> str | None:
    """Why ``--format schedule`` gives the plain config (None when it has a schedule)."""
    prov = rec.provenance
    if prov.get("window_schedule") or not rec.speculative_config:
        return None
    by_level = prov.get("window_by_max_num_seqs") or {}
    thin = prov.get("window_levels_left_out") or {}
    left_out = ("; left out, with fewer than 2 trials meeting the SLO: "
                + ", ".join(f"max_num_seqs {level} ({n})" for level, n in thin.items())
                if thin else "")
    if not by_level:
        return (f"no per-batch-size schedule for {rec.workload!r}: its run compared no windows "
                f"at any max_num_seqs level{left_out}; exporting the plain speculative config")
    pairs = sorted((int(a), int(b)) for a, b in by_level.items())
    seen = ", ".join(f"max_num_seqs {level}: K={k}" for level, k in pairs)
    window = rec.speculative_config.get("num_speculative_tokens")
    why = ("a window of 0 (no drafter) is best at some level, and a schedule row needs K >= 1"
           if any(k <= 0 for _, k in pairs) else
           f"the best window (capped at the recommended window {window}) does not shrink as "
           "max_num_seqs grows")
    return (f"no per-batch-size schedule for {rec.workload!r}: {why} in run "
            f"{rec.run}'s trials ({seen}){left_out}; exporting the plain speculative config")


#: What of vLLM each key of an export needs beyond standard speculative decoding.
_DSPARK = "vLLM 0.33 or newer with DSpark (deepseek-ai/DeepSpec)"
_NEEDS = {
    "enable_adaptive_verification": _DSPARK,
    "dspark_draft_topk": _DSPARK,
    "num_speculative_tokens_per_batch_size": "vLLM 0.33 or newer (per-batch-size schedule)",
}


def requirements_note(rec: RecommendationRecord, spec: Mapping[str, Any] | None) -> str:
    """Which vLLM build the export's keys need, and the one it was measured with."""
    needs: dict[str, list[str]] = {}
    if spec and spec.get("method") == "dspark":
        needs.setdefault(_DSPARK, []).append("method dspark")
    for key in sorted(spec or {}):
        if key in _NEEDS:
            needs.setdefault(_NEEDS[key], []).append(key)
    parts = [f"{', '.join(keys)} need {build}" for build, keys in needs.items()]
    text = ("; ".join(parts) if parts else
            "standard vLLM speculative-decoding flags (--speculative-config, --max-num-seqs, "
            "--max-num-batched-tokens)")
    measured = rec.provenance.get("vllm_version")
    backend = rec.backend
    where = (f"measured with vLLM {measured}" if measured else
             f"measured on the {backend} backend" + (" (simulated, not a real engine)"
                                                     if backend == "sim" else ""))
    return f"{text}; {where}"


def outputs_flagged(rec: RecommendationRecord) -> bool:
    """Whether ``rec``'s outputs differed from the baseline's beyond the engine's numerics
    (the output check stored in its provenance, docs/outputs.md)."""
    check = rec.provenance.get("outputs")
    return isinstance(check, dict) and bool(check.get("flagged"))


def outputs_reason(rec: RecommendationRecord) -> str:
    """The output check's one-line verdict for ``rec`` ("outputs not checked" without one)."""
    check = rec.provenance.get("outputs")
    if not isinstance(check, dict):
        return "outputs not checked"
    return str(check.get("reason") or "outputs not checked")


def pick_for_export(recs: Sequence[RecommendationRecord], active: RecommendationRecord | None,
                    workload: str, *, force: bool) -> RecommendationRecord:
    """The recommendation ``export`` writes: the active one, unless the workload's newest
    result is infeasible (then an ExportError with why, or with ``force`` that result).

    ``recs`` is the workload's history, newest first.
    """
    newest = recs[0] if recs else None
    newer = newest is not None and (active is None or newest.id > active.id)
    if newest is not None and newer and newest.status == "infeasible":
        if force:
            return newest
        keep = (f"; the active recommendation #{active.id} was tuned on earlier traffic"
                if active else "")
        raise ExportError(f"{workload!r} is infeasible (run {newest.run}): {newest.reason}"
                          f"{keep}; export it anyway with --force")
    if newest is not None and newer and outputs_flagged(newest):
        if force:
            return newest
        keep = (f"; the active recommendation #{active.id} predates it" if active else "")
        raise ExportError(f"{workload!r}: the newest recommendation #{newest.id} (run "
                          f"{newest.run}) is flagged: {outputs_reason(newest)}{keep}; export "
                          "it anyway with --force")
    if active is None:
        raise ExportError(f"no active recommendation for {workload!r}"
                          + (f" (its newest is {newest.status}: {newest.reason})" if newest
                             else "; run: autotune start --traffic SAMPLE --once"))
    return active


def vllm_args(rec: RecommendationRecord) -> list[str]:
    """The full ``vllm serve`` argument list for a recommendation."""
    serve = rec.serve
    config = rec.trial_config
    if not serve.get("model"):
        raise ExportError(f"recommendation for {rec.workload!r} has no serve.model; it "
                          "was stored without its policy's serve section")
    args = ["vllm", "serve", str(serve["model"])]
    if serve.get("tensor_parallel_size"):
        args += ["--tensor-parallel-size", str(serve["tensor_parallel_size"])]
    if serve.get("max_model_len"):
        args += ["--max-model-len", str(serve["max_model_len"])]
    spec = speculative_config(rec)
    if spec:
        args += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    args += ["--max-num-seqs", str(config.max_num_seqs),
             "--max-num-batched-tokens", str(config.max_num_batched_tokens)]
    args += [str(a) for a in serve.get("extra_args", [])]
    return args


@dataclass(frozen=True)
class Deployment:
    """A recommendation with the replicas a capacity plan gives it, and the plan's one-line
    account of the count (which rate, which headroom, which run)."""

    rec: RecommendationRecord
    replicas: int
    gpus_per_replica: int
    why: str

    def comment(self) -> str:
        return (f"# replicas: {self.replicas} of this command ({self.gpus_per_replica} GPUs "
                f"each, {self.replicas * self.gpus_per_replica} GPUs): "
                + " ".join(self.why.split()))


def render(rec: RecommendationRecord, fmt: str, deployment: Deployment | None = None) -> str:
    """The text of one export format (with a trailing newline); ``deployment`` adds the
    plan's replica count to ``vllm-args``."""
    if fmt == "speculative-config":
        spec = speculative_config(rec)
        if spec is None:
            raise ExportError(f"the recommendation for {rec.workload!r} serves without "
                              "speculative decoding (window 0); export --format vllm-args "
                              "instead")
        return json.dumps(spec) + "\n"
    if fmt == "schedule":
        spec = schedule_config(rec)
        if spec is None:
            raise ExportError(f"the recommendation for {rec.workload!r} serves without "
                              "speculative decoding; there is no window schedule to export")
        return json.dumps(spec) + "\n"
    if fmt == "vllm-args":
        note = " ".join(f"{rec.workload}: {requirements_note(rec, speculative_config(rec))}"
                        .split())  # one comment line, whatever the label or version hold
        count = f"{deployment.comment()}\n" if deployment is not None else ""
        return f"# {note}\n{count}" + shlex.join(vllm_args(rec)) + "\n"
    if fmt == "production-stack":
        raise ExportError("production-stack values cover every workload of a capacity plan: "
                          "autotune export --format production-stack [--run RUN], without "
                          "--workload")
    raise ExportError(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")


#: The vllm-stack chart version whose documented fields ``production-stack`` writes
#: (vllm-project/production-stack, helm/Chart.yaml and helm/values.schema.json).
PRODUCTION_STACK_CHART = "vllm-stack 0.1.12"
_IMAGE = ("vllm/vllm-openai", "latest")
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


def _release_name(workload: str, taken: set[str]) -> str:
    """A modelSpec name Kubernetes takes in resource names (lowercase letters, digits, ``-``),
    unique among the entries."""
    base = _NOT_DNS.sub("-", workload.lower()).strip("-")[:40] or "workload"
    name, i = base, 2
    while name in taken:
        name, i = f"{base}-{i}", i + 1
    taken.add(name)
    return name


def _stack_entry(d: Deployment, name: str) -> dict[str, Any]:
    rec, serve, config = d.rec, d.rec.serve, d.rec.trial_config
    if not serve.get("model"):
        raise ExportError(f"recommendation for {rec.workload!r} has no serve.model; it "
                          "was stored without its policy's serve section")
    measured = rec.provenance.get("vllm_version")
    vllm_config: dict[str, Any] = {}
    if serve.get("tensor_parallel_size"):
        vllm_config["tensorParallelSize"] = int(serve["tensor_parallel_size"])
    if serve.get("max_model_len"):
        vllm_config["maxModelLen"] = int(serve["max_model_len"])
    vllm_config["maxNumSeqs"] = config.max_num_seqs
    # the chart passes --no-enable-prefix-caching unless this is set; vLLM's default (what the
    # trials ran with) is on
    vllm_config["enablePrefixCaching"] = True
    extra = ["--max-num-batched-tokens", str(config.max_num_batched_tokens)]
    spec = speculative_config(rec)
    if spec:
        extra += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    extra += [str(a) for a in serve.get("extra_args", [])]
    vllm_config["extraArgs"] = extra
    return {"name": name, "repository": _IMAGE[0],
            "tag": f"v{measured}" if measured else _IMAGE[1],
            "modelURL": str(serve["model"]), "replicaCount": d.replicas,
            "requestGPU": d.gpus_per_replica, "vllmConfig": vllm_config}


def production_stack_values(deployments: Sequence[Deployment],
                            left_out: Sequence[tuple[str, str]] = (), header: str = "") -> str:
    """A values file for the vLLM production-stack chart: one ``servingEngineSpec.modelSpec``
    entry per deployment (see the module doc); ``left_out`` (workload, why) and ``header``
    become comment lines."""
    import yaml

    if not deployments:
        why = "; ".join(f"{w}: {r}" for w, r in left_out) or "no workload"
        raise ExportError(f"no workload to deploy ({why})")
    taken: set[str] = set()
    entries = [_stack_entry(d, _release_name(d.rec.workload, taken)) for d in deployments]
    lines = [f"# vLLM production-stack values ({PRODUCTION_STACK_CHART}), written by autotune"]
    lines += [f"# {' '.join(line.split())}" for line in header.splitlines() if line.strip()]
    for d, entry in zip(deployments, entries, strict=True):
        lines.append(f"# {entry['name']}: workload {d.rec.workload!r}, recommendation #"
                     f"{d.rec.id} ({d.rec.status}); {' '.join(d.why.split())}; "
                     + " ".join(requirements_note(d.rec, speculative_config(d.rec)).split()))
    for workload, why in left_out:
        lines.append(f"# left out: {workload!r}: {' '.join(why.split())}")
    body = yaml.safe_dump({"servingEngineSpec": {"modelSpec": entries}}, sort_keys=False,
                          width=1000)
    return "\n".join(lines) + "\n" + body


_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def export_stem(workload: str) -> str:
    """The file name stem of a workload's exports, safe whatever the label holds.

    Letters, digits, ``.``, ``_`` and ``-`` are kept and every other run of characters becomes
    ``_`` (so ``../../etc/x`` stays in the export directory), a leading dot too (no hidden files,
    no ``..``), and the stem is cut to 100 characters (file names have 255 bytes). A label that
    had to change gets a hash of itself appended, so two labels never share a file.
    """
    stem = _UNSAFE_IN_NAME.sub("_", workload)[:100]
    if stem.startswith("."):
        stem = "_" + stem[1:]
    if stem != workload:
        stem += "-" + hashlib.sha256(workload.encode("utf-8", "replace")).hexdigest()[:8]
    return stem


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
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; exports are for everyone
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        raise ExportError(f"cannot write {target}: {e}") from e
    return target
