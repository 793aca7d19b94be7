"""A trial's reading: the objective it scored and the SLO constraints it must meet.

:func:`score_measurement` turns a backend's :class:`~autotune.types.Measurement` into an
:class:`Outcome`: the objective value (goodput, requests per second meeting the SLO, or output
tokens per second) and the replay's SLO constraints from :meth:`autotune.slo.Slo.check`. The
search strategies learn from outcomes; the recommendation step (:mod:`autotune.recommend`)
picks among them.

**The best measured config** is defined here, once, for every part that needs it (the
searcher's leader, the guided search's incumbent, the recommendation): :func:`rank_measured`.
A config stands when every one of its readings succeeded and meets a :class:`Standard` — the
SLO at the rate to serve (:func:`meets_target`), or at some rate the capacity reading tried
(:func:`met_at_some_rate`) — and its value is the mean of its readings; the best is the
highest value.

**Configs read alike** (:func:`read_alike`) differ only in a cap no reading reached: their
readings differ by replay noise alone, so a lead between them is not one a re-read decides,
and the guided search does not read the second one to learn what the first one showed.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Generic, TypeVar

from autotune.slo import KEPT_UP, margin_from_summary
from autotune.types import (
    PEAK_IN_FLIGHT,
    SEQS_REACHED,
    TOKENS_REACHED,
    Measurement,
    Slo,
    TrialConfig,
)

__all__ = ["CLOSE_CALL", "Outcome", "Standard", "Standing", "close_call", "mean_value", "meets",
           "meets_target", "met_at_some_rate", "pooled_log_sd", "rank_measured", "read_alike",
           "score_measurement", "slo_margin", "unsustained"]

K = TypeVar("K", bound=Hashable)

#: A reading this close to failing (log margin, about 10%) is read again before it is trusted.
CLOSE_CALL = 0.1


@dataclass(frozen=True)
class Outcome:
    """The search's reading of one measured trial.

    ``constraints`` follow Optuna's convention: a trial is feasible when every value is <= 0
    (:class:`autotune.slo.SloCheck`: each measured p99 minus its bound in milliseconds, and the
    number of failed requests).
    """

    value: float
    constraints: dict[str, float]
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.constraints.values())

    @property
    def violation(self) -> float:
        return sum(max(0.0, v) for v in self.constraints.values())


def score_measurement(measurement: Measurement, objective: str, slo: Slo) -> Outcome:
    """Objective value (goodput or output tokens/s) and SLO constraints of a measurement."""
    summary = measurement.summary(slo)
    raw = summary.get(objective)
    value = float(raw) if isinstance(raw, int | float) and math.isfinite(raw) else 0.0
    return Outcome(value=value, constraints=measurement.slo_check(slo).constraints,
                   summary=summary)


def meets_target(outcome: Outcome, target: float) -> bool:
    """The trial meets the SLO at ``target`` × the sample's rate: its capacity reaches it, or
    (no capacity reading) it met the SLO as replayed."""
    scale, met = outcome.summary.get("load_scale"), outcome.summary.get("capacity_met_slo")
    if not isinstance(scale, int | float) or met is None:
        return outcome.feasible
    return bool(met) and outcome.feasible and scale >= target * (1 - 1e-9)


def met_at_some_rate(outcome: Outcome) -> bool:
    """The trial met the SLO at some rate: its capacity reading found one (down to the slowest
    it tried), or (no capacity reading) it met the SLO as replayed. A capacity reading that
    met it at no rate keeps its slowest replay, whose p99s may be within bounds (it fell
    behind the arrivals): that is a miss."""
    met = outcome.summary.get("capacity_met_slo")
    return outcome.feasible and (met is None or bool(met))


def unsustained(outcome: Outcome) -> bool:
    """The trial met the SLO at no rate only because no reading of it was long enough to
    sustain a rate: its p99s are within bounds, no request failed and it kept up with the
    arrivals, but its window spanned too few request lifetimes
    (:mod:`autotune.orchestrate.capacity_window`). Its capacity is unread, not shown short."""
    s = outcome.summary
    kept = s.get("kept_up")
    return (s.get("capacity_met_slo") == 0.0 and s.get("capacity_sustained") == 0.0
            and outcome.feasible and not (isinstance(kept, int | float) and kept < KEPT_UP))


class Standard(Enum):
    """What every reading of a config must meet for it to stand among the measured."""

    #: the SLO at the rate to serve (:func:`meets_target`): the recommendation's, the
    #: incumbent's and the searcher's leader's standard
    AT_TARGET = "at the rate to serve"
    #: the SLO at some rate the capacity reading tried (:func:`met_at_some_rate`): where no
    #: config serves the rate to serve, the one with the most capacity is what is left to find
    AT_SOME_RATE = "at some rate"


def meets(outcome: Outcome, standard: Standard, target: float) -> bool:
    """Whether one reading meets ``standard`` (``target``: the rate to serve, × the sample's)."""
    if standard is Standard.AT_TARGET:
        return meets_target(outcome, target)
    return met_at_some_rate(outcome)


def mean_value(readings: Sequence[Outcome]) -> float:
    """A config's value: the mean of its readings' values."""
    return sum(o.value for o in readings) / len(readings)


@dataclass(frozen=True)
class Standing(Generic[K]):
    """A measured config that meets a standard on every reading: its mean value."""

    key: K
    value: float  # the mean of its readings' values
    readings: int


def rank_measured(readings: Iterable[tuple[K, Sequence[Outcome | None]]], standard: Standard,
                  target: float) -> list[Standing[K]]:
    """The measured configs that stand (every reading succeeded and meets ``standard``), best
    first: the highest mean value; ties keep the order ``readings`` lists them in.

    ``readings`` pairs each config (or any key standing for it) with all its readings (None: a
    trial that failed). This is the one definition of "the best measured config".
    """
    standing: list[Standing[K]] = []
    for key, outs in readings:
        done = [o for o in outs if o is not None]
        if done and len(done) == len(outs) and all(meets(o, standard, target) for o in done):
            standing.append(Standing(key, mean_value(done), len(done)))
    return sorted(standing, key=lambda s: -s.value)


def rank_best(readings: Sequence[tuple[K, Sequence[Outcome | None]]],
              target: float | None) -> list[Standing[K]]:
    """:func:`rank_measured` by the first standard some config meets: the SLO at the rate to
    serve (``target``; None: no rate to serve), else at some rate, where the config with the
    most capacity is what the recommendation gives. The one order of standards of the
    recommendation (:func:`~autotune.recommend.choose.select_best`) and the searcher's leader."""
    standards = ([] if target is None else [Standard.AT_TARGET]) + [Standard.AT_SOME_RATE]
    for standard in standards:
        ranked = rank_measured(readings, standard, target or 1.0)
        if ranked:
            return ranked
    return []


def pooled_log_sd(groups: Iterable[Sequence[float]]) -> tuple[float | None, int]:
    """One reading's spread: the sd of log values pooled over the groups (each one config's
    readings) with more than one value, and how many degrees of freedom it rests on; (None, 0)
    when no group has two."""
    ss, dof = 0.0, 0
    for values in groups:
        if len(values) > 1:
            logs = [math.log(v) for v in values]
            mean = sum(logs) / len(logs)
            ss += sum((x - mean) ** 2 for x in logs)
            dof += len(logs) - 1
    return (math.sqrt(ss / dof), dof) if dof else (None, 0)


def slo_margin(outcome: Outcome, slo: Slo, target: float) -> float:
    """How far a reading is from failing, in log units (negative: it fails):
    :func:`autotune.slo.margin_from_summary` of its summary."""
    return margin_from_summary(outcome.summary, slo, target)


def close_call(outcome: Outcome, slo: Slo, target: float) -> bool:
    """Meets the SLO, but within :data:`CLOSE_CALL` of failing (one reading is not enough)."""
    return 0.0 <= slo_margin(outcome, slo, target) < CLOSE_CALL and meets_target(outcome,
                                                                                 target)


#: The caps two configs may differ in and still read alike, each with the reading keys that
#: bound from above the smallest such cap that would have run the reading's schedule.
_CAP_KEYS = (("max_num_seqs", (SEQS_REACHED, PEAK_IN_FLIGHT)),
             ("max_num_batched_tokens", (TOKENS_REACHED,)))


def _reached(outcome: Outcome | None, keys: Sequence[str]) -> float:
    """The tightest of ``keys`` a reading recorded (inf: none, or a failed reading)."""
    if outcome is None:
        return math.inf
    bounds = [float(v) for v in (outcome.summary.get(k) for k in keys)
              if isinstance(v, int | float) and math.isfinite(v)]
    return min(bounds, default=math.inf)


def read_alike(a: TrialConfig, a_readings: Sequence[Outcome | None], b: TrialConfig,
               b_readings: Sequence[Outcome | None]) -> bool:
    """Two configs that differ only in ``max_num_seqs`` and ``max_num_batched_tokens``, where
    every reading of either ran a schedule the smaller of each differing cap would have run
    too (:data:`~autotune.types.SEQS_REACHED`, :data:`~autotune.types.TOKENS_REACHED`; for
    ``max_num_seqs`` also :data:`~autotune.types.PEAK_IN_FLIGHT`): no cap bound, so the
    replica ran the same schedule under both and their readings differ by replay noise alone.
    A failed or uncounted reading is not evidence either way (False)."""
    readings = (*a_readings, *b_readings)
    if a == b or not readings or replace(
            a, max_num_seqs=b.max_num_seqs,
            max_num_batched_tokens=b.max_num_batched_tokens) != b:
        return False
    return all(_reached(o, keys) <= min(getattr(a, cap), getattr(b, cap))
               for cap, keys in _CAP_KEYS if getattr(a, cap) != getattr(b, cap)
               for o in readings)
