"""Can the workload's traffic be served within the SLO at all, by any config measured?

A recommendation is only worth deploying when its config serves the sample's own traffic within
the SLO. In trace mode with the capacity reading a trial measures the highest arrival rate one
replica serves within the SLO, as a multiple of the sample's rate (``load_scale``: capacity =
``load_scale`` × the sample's rate). The workload is **feasible** when the best config's
capacity reaches the policy's ``replay.time_scale`` (1 = the sample's own rate); in closed-loop
mode, or without the capacity reading, when the best config met the SLO as replayed.

An infeasible result is said in one line: the best rate reached, which bound failed and by how
much at the target rate, and what would make it feasible — the SLO the best config does meet
there, enough replicas at the measured per-replica capacity, or a wider search space.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.objective import Outcome, meets_target, slo_margin, unsustained
from autotune.policy import Policy
from autotune.recommend.choose import Scored
from autotune.slo import KEPT_UP, SETTLE_LIFETIMES, Slo, lifetime_s

__all__ = ["Feasibility", "judge_feasibility", "slo_probability"]

#: Spread (log) of one reading's margin to the SLO, before two readings show their own.
READING_SD = 0.1

#: Prefix of the summary keys the capacity reading adds (autotune.orchestrate.capacity): the
#: p99s, failures and share of the rate kept up with, measured at the target rate, whatever
#: rate the trial was finally read at.
AT_TARGET = "target_"


@dataclass(frozen=True)
class Feasibility:
    """The verdict on a workload's best config, for people and for the JSON."""

    feasible: bool
    capacity: float | None   # the best config's capacity, × the sample's rate (trace mode)
    target: float            # the rate it must serve, × the sample's rate
    reason: str              # one line; empty when feasible
    replicas_needed: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"feasible": self.feasible, "capacity": self.capacity, "target": self.target,
                "reason": self.reason, "replicas_needed": self.replicas_needed}


def _num(summary: Mapping[str, Any], key: str) -> float | None:
    v = summary.get(key)
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def _over_bounds(policy: Policy, summary: Mapping[str, Any],
                 prefix: str) -> list[tuple[str, float, float]]:
    """The p99 bounds ``summary`` (keys with ``prefix``) misses: (label, measured, bound)."""
    slo = policy.objective.slo
    out = []
    for name, label, bound in (("ttft_p99_ms", "p99 TTFT", slo.ttft_p99_ms),
                               ("itl_p99_ms", "p99 ITL", slo.itl_p99_ms)):
        measured = _num(summary, prefix + name)
        if bound is not None and measured is not None and measured > bound:
            out.append((label, measured, bound))
    return out


def _misses(policy: Policy, summary: Mapping[str, Any], prefix: str) -> list[str]:
    """The bounds missed in ``summary`` (keys with ``prefix``): "p99 ITL 72 ms > 60 ms"."""
    out = [f"{label} {math.ceil(measured):,} ms > {bound:,.0f} ms"
           for label, measured, bound in _over_bounds(policy, summary, prefix)]
    failed = _num(summary, prefix + "failed_requests")
    if failed:
        out.append(f"{failed:.0f} request(s) failed")
    kept = _num(summary, prefix + "kept_up")
    if kept is not None and kept < KEPT_UP:
        out.append(f"fell behind the arrivals, keeping up with at most {kept:.0%} of the rate")
    return out


def _slo_that_holds(policy: Policy, summary: Mapping[str, Any], prefix: str) -> str:
    """"an SLO of p99 TTFT ≤ 45,210 ms": the bounds the best config does meet there."""
    parts = [f"{label} ≤ {math.ceil(measured):,} ms"
             for label, measured, _ in _over_bounds(policy, summary, prefix)]
    return f"an SLO of {' and '.join(parts)}" if parts else ""


def _space_hint(policy: Policy, best: Scored, met: bool) -> str:
    """A knob of the best config at the edge of the space, in the direction of capacity; when
    the ITL bound fails even at the slowest rate tried, steps are too long at any load and more
    capacity would not help: shorter steps would."""
    assert best.outcome is not None
    itl = _num(best.outcome.summary, "itl_p99_ms")
    bound = policy.objective.slo.itl_p99_ms
    if not met and itl is not None and bound is not None and itl > bound:
        return (f"; p99 ITL misses ({math.ceil(itl):,} ms) even at the slowest rate tried, so "
                "more capacity alone will not help: configs with shorter steps (a smaller "
                "max_num_batched_tokens chunks prefills finer, a smaller window verifies fewer "
                "tokens) may meet it")
    space = policy.space
    hints = []
    for knob in ("max_num_batched_tokens", "max_num_seqs"):
        choices = space.choices(knob)
        if getattr(best.config, knob) == max(choices):
            hints.append(f"space.{knob} above {max(choices)}")
    return f"; or widen {' and '.join(hints)} (the best config uses the largest)" if hints \
        else ""


def _window_too_short(outcome: Outcome) -> str:
    """Why a reading that met the SLO at no rate read no capacity, when the cause is its window
    (:func:`~autotune.objective.unsustained`): how long its requests live and the window they
    need, with the fix. "" otherwise."""
    summary = outcome.summary
    e2e, duration = _num(summary, "e2e_p50_ms"), _num(summary, "duration_s")
    window = _num(summary, "capacity_window_s")
    if not unsustained(outcome) or e2e is None or duration is None or window is None:
        return ""
    life = lifetime_s(e2e / 1000.0, duration, window)
    needed = math.ceil(SETTLE_LIFETIMES * life)
    return (f"no reading was long enough to sustain a rate, so its capacity is unread, not "
            f"shown short (its requests live {life:.3g} s, the median E2E or the drain; its "
            f"window spanned {window:.3g} s of arrivals, under the {SETTLE_LIFETIMES:g} "
            f"lifetimes, {needed:,} s, a sustained reading needs): set replay.window_s to "
            f"{needed:,} s or more")


def judge_feasibility(policy: Policy, best: Scored) -> Feasibility:
    """Whether ``best`` (the workload's best trial) serves the target rate within the SLO."""
    assert best.outcome is not None
    summary = best.outcome.summary
    replay = policy.replay
    target = replay.time_scale
    config = best.config.short()
    capacity = _num(summary, "load_scale")
    met = summary.get("capacity_met_slo")
    if meets_target(best.outcome, target):
        return Feasibility(True, capacity, target, "")
    if capacity is not None and met is not None:
        unread = "" if met else _window_too_short(best.outcome)
        if unread:
            return Feasibility(
                False, capacity, target,
                f"infeasible: best config {config} meets the SLO at no sustained rate down to "
                f"{capacity:.3g}× the sample's: {unread}")
        reached = (f"reaches capacity {capacity:.3g}× the sample's rate" if met else
                   f"meets the SLO at no rate down to {capacity:.3g}× the sample's")
        prefix = AT_TARGET if _num(summary, AT_TARGET + "ttft_p99_ms") is not None else ""
        misses = _misses(policy, summary, prefix)
        needed = math.ceil(target / capacity) if met and capacity > 0 else None
        fixes = []
        if needed is not None:
            fixes.append(f"{needed} replicas at this capacity each")
        slo_fix = _slo_that_holds(policy, summary, prefix)
        if slo_fix:
            fixes.append(slo_fix)
        fix = " or ".join(fixes) if fixes else "a faster config than the space holds"
        at = f"{target:g}× the sample's rate" if target != 1 else "the sample's rate"
        return Feasibility(
            False, capacity, target,
            f"infeasible: best config {config} {reached} (needs {target:g}×); at "
            f"{at} it misses the SLO ({', '.join(misses) or 'p99s over the bounds'}); "
            f"feasible with {fix}{_space_hint(policy, best, bool(met))}", needed)
    misses = _misses(policy, summary, "")
    slo_fix = _slo_that_holds(policy, summary, "")
    mode = (f"at concurrency {replay.concurrency}" if replay.mode == "closed" else
            f"at {target:g}× the sample's rate")
    return Feasibility(
        False, capacity, target,
        f"infeasible: no config measured meets the SLO {mode}; the best, {config}, misses it "
        f"({', '.join(misses) or 'p99s over the bounds'})"
        + (f"; feasible with {slo_fix}" if slo_fix else "") + _space_hint(policy, best, True))


def slo_probability(readings: Sequence[Outcome], slo: Slo, target: float) -> float | None:
    """The probability that the config meets the SLO at ``target`` when deployed, from its
    readings' margins (:func:`~autotune.objective.slo_margin`): normal around their mean, with
    the readings' own spread (at least half of :data:`READING_SD`) or, from one reading,
    :data:`READING_SD`, shrinking with the number of readings. None without a reading."""
    from scipy.stats import norm

    margins = [slo_margin(o, slo, target) for o in readings]
    if not margins:
        return None
    n = len(margins)
    mean = sum(margins) / n
    spread = (math.sqrt(sum((m - mean) ** 2 for m in margins) / (n - 1)) if n > 1 else
              READING_SD)
    sd = max(spread, READING_SD / 2) / math.sqrt(n)
    return round(float(norm.cdf(mean / sd)), 4)
