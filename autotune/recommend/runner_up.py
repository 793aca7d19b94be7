"""How far the recommendation leads the runner-up, and whether replay noise could explain it.

Two configs whose values differ by less than the spread of one config's replays cannot be
ranked by those replays: the recommendation is then one of a close race, and it says so. The
runner-up is the best other config measured, chosen by the same rule as the recommendation
(:func:`~autotune.recommend.choose.select_best`); a race is only run between configs of the same
standing (both meet the SLO at the rate to serve, or neither does).

The lead is ``best / runner-up - 1`` (each the mean of its readings). Its 95% interval comes
from the noise this run measured, the wider of:

* **repeated readings** — where the run read some configs more than once (a close call or a
  close race read again), the pooled spread of one reading's log value, ``sd``; the lead is
  then uncertain by ``1.96 · sd · sqrt(1/n_best + 1/n_runner_up)``. This is the noise between
  replays: the machine, the arrivals, the batching.
* **requests** — the bootstrap interval of the two trials' rates
  (:func:`~autotune.recommend.significance.compare_rates`): which requests one replay happened
  to measure. It is the only estimate when nothing was read twice; it leaves out what varies
  between replays of the same requests (the machine, the batching), which the text then says.

The race is **close** when that interval includes zero: the runner-up may serve as well, and
more readings of both (or a longer sample) would be needed to rank them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.objective import Outcome, Standard, meets, pooled_log_sd
from autotune.recommend.choose import Scored, select_best
from autotune.recommend.significance import CONFIDENCE, Comparison
from autotune.slo import Slo
from autotune.types import TrialConfig

__all__ = ["Race", "reading_spread", "runner_up_race"]


@dataclass(frozen=True)
class Race:
    """The recommendation against its runner-up (for people and for the JSON)."""

    runner_up: TrialConfig
    runner_up_value: float
    lead: float                      # best / runner-up - 1, each the mean of its readings
    low: float | None                # the lead's 95% interval (None: no noise estimate)
    high: float | None
    readings: tuple[int, int]        # readings of the best and of the runner-up
    reading_sd: float | None         # one reading's spread (log), from repeats in this run
    repeated_configs: int            # configs read more than once, behind reading_sd
    source: str                      # "repeated readings" or "requests" (which set the interval)

    @property
    def close(self) -> bool:
        """The lead's interval includes zero: replay noise could explain it."""
        return self.low is not None and self.low <= 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"config": self.runner_up.as_dict(), "value": self.runner_up_value,
                "lead": self.lead,
                "lead_ci": [self.low, self.high] if self.low is not None else None,
                "readings": list(self.readings), "reading_sd": self.reading_sd,
                "repeated_configs": self.repeated_configs, "noise_from": self.source,
                "close_race": self.close}

    def describe(self) -> str:
        """One line: "a close race: it leads w3×16 by 1.5% (95% interval ...) ..."."""
        other = self.runner_up.short()
        if self.low is None or self.high is None:
            return (f"leads the runner-up {other} by {self.lead:.1%} (no noise estimate: "
                    f"neither trial kept its requests)")
        ci = f"95% interval {self.low:+.1%} to {self.high:+.1%}"
        repeats = (f"one reading varies by {self.reading_sd:.1%} over the "
                   f"{self.repeated_configs} config{'s' if self.repeated_configs != 1 else ''}"
                   f" read more than once" if self.reading_sd is not None else "")
        if self.source == "repeated readings":
            noise = repeats
        elif repeats:
            noise = f"from the two trials' requests, wider than the repeats ({repeats})"
        else:
            noise = ("from the two trials' requests; nothing was read twice, so "
                     "replay-to-replay noise is not counted")
        if not self.close:
            return f"leads the runner-up {other} by {self.lead:.1%} ({ci}; {noise})"
        return (f"a close race: it leads the runner-up {other} by only {self.lead:.1%}, inside "
                f"the measured noise ({ci}; {noise}); either may serve better — more readings "
                f"of both, or a longer sample, would rank them")


def reading_spread(trials: Sequence[Scored]) -> tuple[float | None, int]:
    """One reading's spread (sd of the log value, pooled over the configs read more than
    once) and how many configs it rests on; (None, 0) when nothing was read twice."""
    values: dict[TrialConfig, list[float]] = {}
    for t in trials:
        if t.outcome is not None and t.outcome.value > 0:
            values.setdefault(t.config, []).append(t.outcome.value)
    sd, _ = pooled_log_sd(values.values())
    return sd, sum(len(v) > 1 for v in values.values())


def _standing(outcome: Outcome, target: float) -> tuple[bool, bool]:
    """Which of :func:`select_best`'s groups the config is in: it meets the SLO at the rate to
    serve; it meets it at some rate."""
    return (meets(outcome, Standard.AT_TARGET, target),
            meets(outcome, Standard.AT_SOME_RATE, target))


def runner_up_race(trials: Sequence[Scored], best: Scored, slo: Slo | None, target: float,
                   compare: Callable[[int, int], Comparison | None]) -> Race | None:
    """``best`` (the recommendation, as :func:`select_best` chose it) against the runner-up of
    the same standing; None without one. ``compare(best trial, runner-up trial)`` is the
    request bootstrap of the two trials' rates (None when they kept no requests)."""
    if best.outcome is None or best.outcome.value <= 0:
        return None
    others = [t for t in trials if t.config != best.config]
    second = select_best(others, target, slo)
    if (second is None or second.outcome is None or second.outcome.value <= 0
            or _standing(second.outcome, target) != _standing(best.outcome, target)):
        return None
    n_best = sum(t.config == best.config and t.outcome is not None for t in trials)
    n_second = sum(t.config == second.config and t.outcome is not None for t in trials)
    lead = best.outcome.value / second.outcome.value - 1.0
    sd, repeated = reading_spread(trials)
    intervals: list[tuple[float, float, str]] = []
    if sd is not None:
        from scipy.stats import norm

        half = float(norm.ppf(0.5 + CONFIDENCE / 2)) * sd * math.sqrt(1.0 / n_best + 1.0 / n_second)
        ratio = 1.0 + lead
        intervals.append((ratio * math.exp(-half) - 1.0, ratio * math.exp(half) - 1.0,
                          "repeated readings"))
    cmp = (compare(best.trial_id, second.trial_id)
           if best.trial_id is not None and second.trial_id is not None else None)
    if cmp is not None:
        intervals.append((cmp.low, cmp.high, "requests"))
    low = high = None
    source = ""
    if intervals:
        low, high, source = max(intervals, key=lambda i: i[1] - i[0])
    return Race(second.config, second.outcome.value, lead, low, high, (n_best, n_second), sd,
                repeated, source)
