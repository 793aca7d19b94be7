"""Traffic importers: logs and traces in other formats -> the sample format (docs/traffic.md).

Each format is one module defining an ``IMPORTER`` (a name, a summary and a line parser); adding
a format is adding a module and one entry in :data:`IMPORTERS`. :func:`import_traffic` runs the
named importer over a file and writes the sample atomically; :func:`export_traffic` writes a
sample back out (``vllm-bench``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from autotune.errors import ConfigError
from autotune.traffic.importers import azure, mooncake, openai_log, vllm_bench
from autotune.traffic.importers.base import Importer, LineParser, Row
from autotune.traffic.importers.prompts import PromptPool, load_prompt_pool
from autotune.traffic.importers.run import ImportReport, export_vllm_bench, import_file

__all__ = [
    "EXPORT_FORMATS",
    "IMPORTERS",
    "ImportReport",
    "Importer",
    "LineParser",
    "PromptPool",
    "Row",
    "export_traffic",
    "get_importer",
    "import_traffic",
    "load_prompt_pool",
]

#: Registered input formats by name.
IMPORTERS: dict[str, Importer] = {
    imp.name: imp
    for imp in (azure.IMPORTER, mooncake.IMPORTER, openai_log.IMPORTER, vllm_bench.IMPORTER)
}

#: Formats ``export_traffic`` writes.
EXPORT_FORMATS = ("vllm-bench",)


def get_importer(name: str) -> Importer:
    """The importer registered as ``name``; ConfigError listing the known ones otherwise."""
    try:
        return IMPORTERS[name]
    except KeyError:
        raise ConfigError(f"unknown traffic format {name!r}; known formats: "
                          f"{', '.join(sorted(IMPORTERS))}") from None


def import_traffic(format: str, path: str | Path, out: str | Path, *,
                   workload: str | None = None, prompts: Sequence[str | Path] = (),
                   skip_invalid: bool = False, seed: int = 0,
                   fit_prompts: bool = True) -> ImportReport:
    """Import ``path`` (in ``format``) as a traffic sample written atomically to ``out``.

    ``workload`` labels every request; ``prompts`` (JSONL prompt sets) attaches real texts by
    nearest length to requests that have none, keeping their token counts; ``skip_invalid``
    skips bad rows (counted in the report) instead of failing on the first.
    """
    return import_file(get_importer(format), path, out, workload=workload, prompts=prompts,
                       skip_invalid=skip_invalid, seed=seed, fit_prompts=fit_prompts)


def export_traffic(format: str, sample: str | Path, out: str | Path, *,
                   prompts: Sequence[str | Path] = (), skip_invalid: bool = False,
                   seed: int = 0) -> ImportReport:
    """Write the sample at ``sample`` in ``format`` (only ``vllm-bench`` so far)."""
    if format not in EXPORT_FORMATS:
        raise ConfigError(f"unknown export format {format!r}; known formats: "
                          f"{', '.join(EXPORT_FORMATS)}")
    return export_vllm_bench(sample, out, prompts=prompts, skip_invalid=skip_invalid, seed=seed)
