"""What one measured run tells the predictor, read from what a vLLM server reports.

An :class:`Observation` is built from a trial's summary (and its measurement when at hand):
the objective and whether it met the SLO, the arrival scale it was read at (the capacity
reading), the mean decode step time and decoding batch, the latency p99s and the acceptance
counters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.types import AcceptanceCounts, Measurement, TrialConfig

__all__ = ["DECODE_STATS", "Observation", "decode_stats"]



#: Aggregates of a measurement the predictor reads step time and batch from (a summary may
#: carry them instead of the measurement): Σ decode time, Σ decoded tokens, measured span.
DECODE_STATS = ("decode_time_s", "decode_tokens", "duration_s")


def decode_stats(m: Measurement) -> dict[str, float]:
    """Σ (E2E - TTFT) and Σ (output tokens - 1) over completed requests, and the duration."""
    ok = m.ok
    return {"decode_time_s": float((m.e2e_s - m.ttft_s)[ok].sum()),
            "decode_tokens": float((m.output_tokens[ok] - 1).clip(min=0).sum()),
            "duration_s": float(m.duration_s)}


@dataclass(frozen=True)
class Observation:
    """What one measured run tells the predictor (all from the Measurement's summary)."""

    config: TrialConfig
    value: float | None
    feasible: bool
    scale: float | None = None
    step_s: float | None = None
    batch: float | None = None
    itl_p99_ms: float | None = None
    ttft_p99_ms: float | None = None
    counts: AcceptanceCounts | None = None

    @classmethod
    def from_result(cls, config: TrialConfig, value: float | None, feasible: bool,
                    summary: Mapping[str, Any] | None,
                    measurement: Measurement | None = None) -> Observation:
        """Read an observation from a trial's summary (and its measurement when at hand)."""
        s = dict(summary or {})

        def num(key: str) -> float | None:
            v = s.get(key)
            return float(v) if isinstance(v, int | float) and math.isfinite(v) else None

        counts = None
        acc = s.get("acceptance")
        if isinstance(acc, Mapping):
            try:
                counts = AcceptanceCounts.from_dict(acc)
            except (KeyError, TypeError, ValueError):
                counts = None
        if measurement is not None and measurement.acceptance is not None:
            counts = measurement.acceptance
        length = counts.mean_accepted_length if counts is not None and counts.drafts else 1.0
        step = batch = None
        stats = decode_stats(measurement) if measurement is not None else {
            k: s[k] for k in DECODE_STATS if isinstance(s.get(k), int | float)}
        if len(stats) == len(DECODE_STATS):
            decode, tokens, duration = (float(stats[k]) for k in DECODE_STATS)
            if tokens > 0 and decode > 0:
                step = decode / tokens * length
            if duration > 0:
                batch = decode / duration
        else:
            tpot, rps, tps = num("tpot_mean_ms"), num("requests_per_s"), num("output_tokens_per_s")
            if tpot and rps and tps:
                step = tpot / 1000.0 * length
                batch = rps * tpot / 1000.0 * max(tps / rps - 1.0, 0.0)
        met = s.get("capacity_met_slo")
        return cls(config=config, value=value,
                   feasible=feasible and (met is None or bool(met)),
                   scale=num("load_scale"), step_s=step, batch=batch,
                   itl_p99_ms=num("itl_p99_ms"), ttft_p99_ms=num("ttft_p99_ms"), counts=counts)
