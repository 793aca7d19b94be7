"""Traffic samples: the streaming reader, summaries, workload grouping and replay schedules.

The sample format: docs/traffic.md. Importers of other formats live in
:mod:`autotune.traffic.importers`.
"""

from __future__ import annotations

from autotune.traffic.grouping import assign_workloads, describe_groups
from autotune.traffic.sample import Sample, estimate_tokens, file_sha256, read_sample
from autotune.traffic.writer import write_jsonl

__all__ = ["Sample", "assign_workloads", "describe_groups", "estimate_tokens", "file_sha256",
           "read_sample", "write_jsonl"]
