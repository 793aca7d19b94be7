"""What a trial's summary says of its tail: the measured p99s of every reading it made, at the
rate each was read (the readings :mod:`autotune.predict.tail` calibrates on)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.types import TrialConfig

__all__ = ["TailReading", "replay_tail_keys", "tail_readings"]


def replay_tail_keys(i: int) -> tuple[str, str]:
    """The summary keys of reading i's p99s (``replay{i}_itl_p99_ms``, ``replay{i}_ttft_p99_ms``),
    written by the capacity reading next to its decode aggregates."""
    return f"replay{i}_itl_p99_ms", f"replay{i}_ttft_p99_ms"


@dataclass(frozen=True)
class TailReading:
    """One reading's measured p99s (ms; NaN: not measured) at ``scale`` × the sample's rate
    (a closed loop's readings all have the policy's scale), and its request lifetime (s,
    :func:`autotune.slo.lifetime_s`) with the replica seconds its arrivals spanned (NaN: not
    recorded)."""

    config: TrialConfig
    scale: float
    itl_p99_ms: float
    ttft_p99_ms: float
    lifetime_s: float = math.nan
    window_s: float = math.nan

    def value(self, tail: str) -> float:
        return self.itl_p99_ms if tail == "itl_p99_ms" else self.ttft_p99_ms


def _num(summary: Mapping[str, Any], key: str) -> float:
    v = summary.get(key)
    return float(v) if isinstance(v, int | float) and math.isfinite(v) and v > 0 else math.nan


def tail_readings(config: TrialConfig, summary: Mapping[str, Any],
                  target: float) -> tuple[TailReading, ...]:
    """Every reading of a trial's summary with p99s: each ``replay{i}`` of a capacity reading
    that recorded them (:func:`replay_tail_keys`), with its lifetime and window, else the kept
    reading (at ``load_scale``) and the reading at the rate to serve (``target``, the
    ``target_*`` p99s); without a capacity reading, the one replay at ``target``."""
    out: dict[float, TailReading] = {}
    for i in itertools.count():
        scale = _num(summary, f"replay{i}_scale")
        if not math.isfinite(scale):
            break
        itl, ttft = (_num(summary, k) for k in replay_tail_keys(i))
        if math.isfinite(itl) or math.isfinite(ttft):
            out[scale] = TailReading(config, scale, itl, ttft,
                                     _num(summary, f"replay{i}_lifetime_s"),
                                     _num(summary, f"replay{i}_window_s"))
    if out:
        return tuple(out[s] for s in sorted(out))
    kept = _num(summary, "load_scale")
    if not math.isfinite(kept):
        kept = target
    out[kept] = TailReading(config, kept, _num(summary, "itl_p99_ms"),
                            _num(summary, "ttft_p99_ms"))
    at_target = TailReading(config, target, _num(summary, "target_itl_p99_ms"),
                            _num(summary, "target_ttft_p99_ms"))
    if target not in out and (math.isfinite(at_target.itl_p99_ms)
                              or math.isfinite(at_target.ttft_p99_ms)):
        out[target] = at_target
    return tuple(out[s] for s in sorted(out))
