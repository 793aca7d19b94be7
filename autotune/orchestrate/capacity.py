"""The capacity reading of a trial: the highest traffic rate a replica serves within the SLOs.

Replaying a production trace at its own rate leaves a well-sized replica idle part of the time:
every config then serves every request and goodput equals the arrival rate, so configs cannot
be told apart. Following DistServe, a trial's goodput is instead measured at the highest rate
the replica sustains: the trace is replayed on the same replica at rising (or falling) speeds
(``time_scale``, doubling or halving), then bisected, and the fastest replay that meets the SLO
(:meth:`autotune.slo.Slo.check`: every request completed, p99 TTFT and p99 ITL within bounds)
is the trial's measurement (``extra["load_scale"]`` says how fast). No server restart happens
between replays, so on real hardware this costs replay time only.
"""

from __future__ import annotations

import math
from dataclasses import replace

from autotune.backends import Replica
from autotune.types import Measurement, Progress, ReplaySchedule, Slo

__all__ = ["MAX_SCALE", "MIN_SCALE", "replay_at_capacity"]

MIN_SCALE = 1 / 64
MAX_SCALE = 64.0


def _tag(m: Measurement, scale: float, tried: dict[float, tuple[bool, Measurement]],
         feasible: bool, at_target: Measurement, slo: Slo) -> Measurement:
    """The kept replay, tagged with the scale it ran at; with what the replay at the target
    rate (the schedule's own ``time_scale``) measured: ``target_*`` p99s and failures, which
    say by how much a config misses the SLO at the rate it must serve; and with every replay's
    decode aggregates (``replay{i}_*``): the same replica at several loads profiles its step
    time at several batch sizes."""
    check = at_target.slo_check(slo)
    extra = {**m.extra, "load_scale": scale, "capacity_replays": float(len(tried)),
             "capacity_met_slo": 1.0 if feasible else 0.0,
             "target_ttft_p99_ms": check.ttft_p99_ms, "target_itl_p99_ms": check.itl_p99_ms,
             "target_failed_requests": float(check.failed_requests)}
    for i, (s, (_, replayed)) in enumerate(sorted(tried.items())):
        decode, tokens, span = replayed.decode_totals()
        extra.update({f"replay{i}_scale": s, f"replay{i}_decode_time_s": decode,
                      f"replay{i}_decode_tokens": tokens, f"replay{i}_duration_s": span})
    return replace(m, extra=extra)


def replay_at_capacity(replica: Replica, schedule: ReplaySchedule, slo: Slo,
                       progress: Progress | None = None, max_replays: int = 7) -> Measurement:
    """The measurement at the highest ``time_scale`` that meets ``slo`` (see module doc).

    When even the slowest tried rate misses the SLO, the slowest replay is returned (tagged
    ``capacity_met_slo = 0``) so the search sees by how much it misses.
    """
    wall = 0.0
    tried: dict[float, tuple[bool, Measurement]] = {}

    def run(scale: float) -> bool:
        nonlocal wall
        m = replica.replay(replace(schedule, time_scale=scale), progress)
        wall += m.wall_time_s
        tried[scale] = (m.slo_check(slo).met, m)
        return tried[scale][0]

    scale = schedule.time_scale
    lo: float | None = None  # fastest known feasible
    hi: float | None = None  # slowest known infeasible
    if run(scale):
        lo = scale
        while len(tried) < max_replays and scale * 2 <= MAX_SCALE:
            scale *= 2
            if run(scale):
                lo = scale
            else:
                hi = scale
                break
    else:
        hi = scale
        while len(tried) < max_replays and scale / 2 >= MIN_SCALE:
            scale /= 2
            if run(scale):
                lo = scale
                break
            hi = scale
    while lo is not None and hi is not None and len(tried) < max_replays:
        mid = math.sqrt(lo * hi)
        if run(mid):
            lo = mid
        else:
            hi = mid
    at_target = tried[schedule.time_scale][1]
    if lo is None:
        slowest = min(tried)
        kept = _tag(tried[slowest][1], slowest, tried, False, at_target, slo)
    else:
        kept = _tag(tried[lo][1], lo, tried, True, at_target, slo)
    return replace(kept, wall_time_s=wall)
