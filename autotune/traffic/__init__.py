"""Traffic samples: the streaming reader, summaries, and replay schedules (DESIGN §4)."""

from __future__ import annotations

from autotune.traffic.sample import Sample, estimate_tokens, file_sha256, read_sample

__all__ = ["Sample", "estimate_tokens", "file_sha256", "read_sample"]
