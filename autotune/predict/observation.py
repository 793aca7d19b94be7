"""What one measured run tells the predictor, read from what a vLLM server reports.

An :class:`Observation` is built from a trial's summary (and its measurement when at hand),
through an explicit whitelist (:data:`OBSERVED_FIELDS`): only what a real vLLM server lets a
client measure — per-request latencies and token counts (hence p99s, throughputs, decode
aggregates), the ``/metrics`` acceptance counters, and the capacity reading autotune makes
from them. A backend's own extra readings (the simulator's mean step, batch or KV use) never
reach it. From these: the objective, how far it was from failing the SLO at the rate to serve
(:func:`autotune.slo.margin_from_summary`), the mean decode step time and decoding
batch at every load the run was replayed at, the p99s and the acceptance counters.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.predict.tail import TailReading, tail_readings
from autotune.slo import Slo, margin_from_summary
from autotune.types import AcceptanceCounts, Measurement, TrialConfig

__all__ = ["DECODE_STATS", "OBSERVED_FIELDS", "Observation", "decode_stats", "observed"]

#: Aggregates of a measurement the predictor reads step time and batch from (a summary may
#: carry them instead of the measurement): Σ decode time, Σ decoded tokens, measured span.
DECODE_STATS = ("decode_time_s", "decode_tokens", "duration_s")
#: Summary fields the predictor may read: what a deployed vLLM server provides.
OBSERVED_FIELDS = frozenset({
    *DECODE_STATS, "acceptance", "load_scale", "capacity_met_slo", "itl_p99_ms",
    "ttft_p99_ms", "tpot_mean_ms", "requests_per_s", "output_tokens_per_s", "failed_requests",
    "target_ttft_p99_ms", "target_itl_p99_ms", "target_failed_requests",
})
#: The same of each replay of a capacity reading (autotune.orchestrate.capacity tags them
#: ``replay0_``, ``replay1_``, ... as many as it read).
_OBSERVED_REPLAY = re.compile(r"replay\d+_(scale|decode_time_s|decode_tokens|duration_s"
                              r"|itl_p99_ms|ttft_p99_ms|lifetime_s|window_s)")


def observed(key: str) -> bool:
    """Whether the predictor may read the summary field ``key`` (:data:`OBSERVED_FIELDS`, or
    one of them of a replay of the capacity reading)."""
    return key in OBSERVED_FIELDS or _OBSERVED_REPLAY.fullmatch(key) is not None


def decode_stats(m: Measurement) -> dict[str, float]:
    """Σ (E2E - TTFT) and Σ (output tokens - 1) over completed requests, and the duration."""
    return dict(zip(DECODE_STATS, m.decode_totals(), strict=True))


def _step_and_batch(decode: float, tokens: float, duration: float,
                    length: float) -> tuple[float | None, float | None]:
    """Mean step time (decode time per token × tokens per step) and mean decoding batch."""
    step = decode / tokens * length if tokens > 0 and decode > 0 else None
    batch = decode / duration if duration > 0 and decode > 0 else None
    return step, batch


@dataclass(frozen=True)
class Observation:
    """What one measured run tells the predictor (see the module doc).

    ``feasible``: the run met the SLO at some rate, the caller's verdict
    (:func:`autotune.objective.met_at_some_rate`). ``points`` are ``(scale, step_s, batch)``
    of every replay of the run (the capacity reading replays the trace at several rates on the
    same replica); ``margin`` is how far the run was from failing the SLO at the target rate
    (log; negative: it failed); ``tails`` the p99s each replay read
    (:func:`autotune.predict.tail.tail_readings`).
    """

    config: TrialConfig
    value: float | None
    feasible: bool
    scale: float | None = None
    step_s: float | None = None
    batch: float | None = None
    itl_p99_ms: float | None = None
    ttft_p99_ms: float | None = None
    counts: AcceptanceCounts | None = None
    margin: float | None = None
    margin_censored: bool = False  # the margin is an upper bound (missed at every rate tried)
    points: tuple[tuple[float, float, float], ...] = ()
    #: the p99s of every reading of the run (each rate it was read at)
    tails: tuple[TailReading, ...] = ()

    @classmethod
    def from_result(cls, config: TrialConfig, value: float | None, feasible: bool,
                    summary: Mapping[str, Any] | None, measurement: Measurement | None = None,
                    *, slo: Slo | None = None, target: float = 1.0) -> Observation:
        """Read an observation from a trial's summary (whitelisted fields only) and its
        measurement when at hand; ``feasible`` is the caller's verdict (see the class doc);
        ``slo`` and ``target`` (× the sample's rate) give the margin."""
        s = {k: v for k, v in (summary or {}).items() if observed(k)}

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
            step, batch = _step_and_batch(decode, tokens, duration, length)
        else:
            tpot, rps, tps = num("tpot_mean_ms"), num("requests_per_s"), num("output_tokens_per_s")
            if tpot and rps and tps:
                step = tpot / 1000.0 * length
                batch = rps * tpot / 1000.0 * max(tps / rps - 1.0, 0.0)
        points = []
        for i in itertools.count():
            at = num(f"replay{i}_scale")
            if at is None:
                break
            p_step, p_batch = _step_and_batch(num(f"replay{i}_decode_time_s") or 0.0,
                                              num(f"replay{i}_decode_tokens") or 0.0,
                                              num(f"replay{i}_duration_s") or 0.0, length)
            if p_step is not None and p_batch is not None:
                points.append((at, p_step, p_batch))
        met = s.get("capacity_met_slo")
        margin = (margin_from_summary(s, slo, target) if slo is not None and value is not None
                  else None)
        return cls(config=config, value=value, feasible=feasible, scale=num("load_scale"),
                   step_s=step, batch=batch, itl_p99_ms=num("itl_p99_ms"),
                   ttft_p99_ms=num("ttft_p99_ms"), counts=counts, margin=margin,
                   margin_censored=met is not None and not met, points=tuple(points),
                   tails=tail_readings(config, s, target) if value is not None else ())
