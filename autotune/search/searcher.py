"""One workload's search, driven by ask/tell so any dispatcher can run its trials.

The :class:`Searcher` keeps what every strategy shares: the policy's baseline is measured
first, as its own trial even when it lies outside the space; the active recommendation's
config is re-measured right after it (so a new result is compared with it on the same
traffic); then the strategy (:mod:`autotune.search.strategy`) picks. It keeps the budget, and
a config measured or in flight is never handed out twice — several asks may be outstanding at
once when replicas run in parallel. Every trial is kept in the workload's Optuna study
(:mod:`autotune.search.study`), so a restarted run resumes without repeating one.

One config is run twice on purpose: the best one so far (the leader:
:func:`~autotune.objective.rank_best`, the rule the recommendation picks by: at the rate to
serve, else, where no config measured serves it, by capacity at some rate), when its only
reading passed the SLO by less than :data:`~autotune.objective.CLOSE_CALL` (a p99 within about
10% of its bound, or a capacity within 10% of the target rate), or leads the next config
meeting the SLO by a lead a second reading may still overturn at a gain worth a trial
(:mod:`autotune.search.second_reading`: the expected gain, from one reading's noise as this run
measured it, at least ``search.epsilon``, the floor the guided search stops reading new
configs at): a *narrow lead*; or read far above what the strategy predicted for it
(:meth:`~autotune.search.strategy.Strategy.surprise`: a lucky replay looks like a discovery).
A lead over a config read alike (:func:`~autotune.objective.read_alike`: the two differ in a
cap neither reading reached) is no ranking to decide: the next config is the rival. The leader
is read again before the search stops, or with the last trial of the budget. When the second
reading drops it below the runner-up, the new leader is held to the same rule. A lead no second
reading is worth separating is recommended on one reading; the recommendation still says when
its lead over the runner-up lies inside the replay noise (a close race, below).

A narrow lead is not a *close race*: that is the recommendation's verdict on its lead over the
runner-up against the replay noise the run measured (:mod:`autotune.recommend.runner_up`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotune.errors import SearchError
from autotune.objective import (
    Outcome,
    Standing,
    close_call,
    rank_best,
    read_alike,
)
from autotune.search.second_reading import reading_noise, second_reading_worth
from autotune.search.strategy import Strategy, StrategySetup, create_strategy
from autotune.search.study import TrialStudy, study_name
from autotune.types import KNOB_NAMES, CapacityHint, Measurement, Request, Slo, TrialConfig

if TYPE_CHECKING:
    from autotune.policy import Policy

__all__ = ["PastTrial", "Searcher", "Suggestion", "open_search"]


@dataclass(frozen=True)
class Suggestion:
    """A config to run: our trial ``number`` within the workload, and the study trial it is
    (None: measured outside the study, like a baseline outside the space)."""

    number: int
    config: TrialConfig
    study_trial: int | None
    is_baseline: bool = False
    is_incumbent: bool = False
    is_repeat: bool = False  # a second reading of a close call, a narrow lead or a surprise
    why: str = ""  # why a repeat is read again
    #: where the strategy expects the config's capacity (its proposal's hint; None: none)
    capacity_hint: CapacityHint | None = None


@dataclass(frozen=True)
class PastTrial:
    """A finished trial loaded back from the store when a run resumes."""

    number: int
    config: TrialConfig
    is_baseline: bool
    outcome: Outcome | None  # None: failed


class Searcher:
    """Ask/tell search over a space for one workload (see the module doc)."""

    def __init__(self, strategy: Strategy, study: TrialStudy, *,
                 space: Sequence[TrialConfig], baseline: TrialConfig, budget: int,
                 incumbent: TrialConfig | None = None, past: Iterable[PastTrial] = (),
                 slo: Slo | None = None, target: float = 1.0,
                 epsilon: float) -> None:
        if not space:
            raise SearchError("the policy's space holds no config; check policy.space")
        self.strategy = strategy
        self.study = study
        self.space = frozenset(space)
        self.baseline = baseline
        self.budget = budget
        self.incumbent = incumbent
        #: the SLO and the rate (× the sample's) a winner must meet them at (SLO None: no
        #: close calls, only narrow leads and surprises)
        self.slo = slo
        self.target = target
        #: the least a trial must be expected to gain (a share of the objective) for a narrow
        #: lead to be read again (``search.epsilon``)
        self.epsilon = epsilon
        #: why the search stopped (empty while it can still ask)
        self.stop_reason = ""
        self._measured: dict[TrialConfig, Outcome | None] = {}
        self._readings: dict[TrialConfig, list[Outcome | None]] = {}
        self._pending: dict[int, Suggestion] = {}
        self._next_number = 0
        self._finished = 0
        self._baseline_done = False
        for t in past:
            self._measured[t.config] = t.outcome
            self._readings.setdefault(t.config, []).append(t.outcome)
            self.strategy.observe(t.config, t.outcome, None)
            self._next_number = max(self._next_number, t.number + 1)
            self._finished += 1
            self._baseline_done |= t.is_baseline

    @property
    def finished(self) -> int:
        """Trials told (finished or failed), resumed ones included."""
        return self._finished

    def done(self) -> bool:
        return bool(self.stop_reason) and not self._pending

    def ask(self) -> Suggestion | None:
        """The next config to run, or None (for now, while trials run; for good once
        :attr:`stop_reason` is set)."""
        if self.stop_reason:
            return None
        if self._finished + len(self._pending) >= self.budget:
            if not self._pending:
                self.stop_reason = f"budget of {self.budget} trials spent"
            return None
        running = {s.config for s in self._pending.values()}
        if not self._baseline_done and self.baseline not in running:
            return self._issue(self.baseline, None, is_baseline=True)
        inc = self.incumbent
        if inc is not None and inc not in self._measured and inc not in running:
            return self._issue(inc, None, is_incumbent=True)
        confirm = self._unconfirmed_winner(running)
        if confirm is not None and self._finished + len(self._pending) == self.budget - 1:
            return self._repeat(confirm)  # the last trial of the budget confirms the winner
        if not self.space - self._measured.keys() - running:
            if confirm is not None and not running:
                return self._repeat(confirm)
            self._stop("every config of the space is measured", running)
            return None
        proposal = self.strategy.propose(self._measured, running)
        config = proposal.config
        if config is None:
            if confirm is not None and not running:
                return self._repeat(confirm)
            self._stop(proposal.reason, running)
            return None
        if config in self._measured or config in running or config not in self.space:
            raise SearchError(f"strategy {self.strategy.kind!r} proposed {config}, which is "
                              "measured, running or outside the space")
        trial = proposal.study_trial
        return self._issue(config, trial if trial is not None else self.study.ask_for(config),
                           capacity_hint=proposal.capacity_hint)

    def tell(self, suggestion: Suggestion, outcome: Outcome | None,
             measurement: Measurement | None = None) -> None:
        """Record the outcome of a suggestion (None: the trial failed); the strategy learns
        from it and from the ``measurement`` behind it."""
        if self._pending.pop(suggestion.number, None) is None:
            raise SearchError(f"trial {suggestion.number} was not asked")
        self._finished += 1
        self._measured[suggestion.config] = outcome
        self._readings.setdefault(suggestion.config, []).append(outcome)
        self._baseline_done |= suggestion.is_baseline
        self.strategy.observe(suggestion.config, outcome, measurement)
        if suggestion.study_trial is not None:
            self.study.tell(suggestion.study_trial, outcome)
        elif suggestion.config in self.space:
            self.study.record(suggestion.config, outcome)  # measured outside the study

    def readings(self, config: TrialConfig) -> list[Outcome | None]:
        """Every reading of ``config`` so far (two for a confirmed close call)."""
        return list(self._readings.get(config, ()))

    def leader(self) -> TrialConfig | None:
        """The best measured config so far (:func:`~autotune.objective.rank_best`, the
        recommendation's rule: every reading met the SLO at the rate to serve, else at some rate
        where none serves it; the highest mean value), or None."""
        ranked = self._ranked()
        return ranked[0].key if ranked else None

    def _ranked(self) -> list[Standing[TrialConfig]]:
        return rank_best(list(self._readings.items()), self.target)

    def _unconfirmed_winner(self, running: set[TrialConfig]) -> tuple[TrialConfig, str] | None:
        """The leader and why one reading of it is not enough (a close call, a surprise, a
        narrow lead), or None."""
        ranked = self._ranked()
        if not ranked:
            return None
        value, best = ranked[0].value, ranked[0].key
        readings = self._readings[best]
        first = readings[0]
        if best in running or len(readings) > 1 or first is None:
            return None
        if self.slo is not None and close_call(first, self.slo, self.target):
            return best, "a close call: it met the SLO by less than 10%"
        surprise = self.strategy.surprise(best, first)
        if surprise is not None:
            return best, surprise
        rival = next((s for s in ranked[1:]
                      if not read_alike(best, readings, s.key, self._readings[s.key])), None)
        if rival is None or not value > 0 or not rival.value > 0:
            return None
        noise = reading_noise(self._readings.values())
        worth = second_reading_worth(math.log(value / rival.value), noise)
        if worth < self.epsilon:
            return None
        return best, (f"a narrow lead: {value / rival.value - 1:.1%} ahead of "
                      f"{rival.key.short()}; a second reading is worth {worth:.2%} "
                      f"(one reading's noise {noise:.1%})")

    def _repeat(self, confirm: tuple[TrialConfig, str]) -> Suggestion:
        config, why = confirm
        trial = self.study.ask_for(config) if config in self.space else None
        return self._issue(config, trial, is_repeat=True, why=why)

    def _stop(self, reason: str, running: set[TrialConfig]) -> None:
        """Nothing to run now; for good when nothing runs (a result may change the plan)."""
        if not running:
            self.stop_reason = reason

    def _issue(self, config: TrialConfig, study_trial: int | None, *,
               is_baseline: bool = False, is_incumbent: bool = False,
               is_repeat: bool = False, why: str = "",
               capacity_hint: CapacityHint | None = None) -> Suggestion:
        s = Suggestion(self._next_number, config, study_trial, is_baseline, is_incumbent,
                       is_repeat, why, capacity_hint)
        self._next_number += 1
        self._pending[s.number] = s
        return s


def open_search(policy: Policy, run_id: str, workload: str, storage_url: str, *,
                seed: int = 0, requests: Sequence[Request] = (),
                past: Iterable[PastTrial] = (), incumbent: TrialConfig | None = None,
                strategy: Strategy | None = None) -> Searcher:
    """The search of ``workload`` in run ``run_id`` under ``policy``: its study opened (or
    resumed) in ``storage_url`` and the policy's strategy built (or ``strategy``)."""
    space = policy.space
    study = TrialStudy(storage_url, study_name(run_id, workload),
                       {k: space.choices(k) for k in KNOB_NAMES})
    configs = tuple(space.configs())
    if strategy is None:
        strategy = create_strategy(policy.search.strategy, StrategySetup(
            configs=configs, seed=seed, study=study, policy=policy, requests=requests))
    return Searcher(strategy, study, space=configs, baseline=policy.baseline.config(),
                    budget=policy.budget.trials, incumbent=incumbent, past=past,
                    slo=policy.objective.slo.slo(), target=policy.replay.time_scale,
                    epsilon=policy.search.epsilon)
