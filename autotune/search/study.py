"""One Optuna study per workload, driven by ask/tell so any dispatcher can run its trials.

The searcher's lifecycle is ``ask`` (the next config to run, or None when done), then ``tell``
(its outcome, or its failure). Several asks may be outstanding at once (parallel replicas): a
config already measured or in flight is never handed out twice — Optuna is told the cached
outcome instead and asked again. The policy's baseline is measured first, as its own trial even
when it lies outside the search space. The study lives in Optuna's RDB storage in autotune's own
database, named ``<run id>:<workload>``, so a restarted run resumes it.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.errors import SearchError
from autotune.objective import Outcome
from autotune.types import TrialConfig

if TYPE_CHECKING:
    import optuna

    from autotune.policy import Policy
    from autotune.search.guided import Guide
    from autotune.types import Measurement

__all__ = ["KNOBS", "PastTrial", "Searcher", "Suggestion", "make_sampler", "study_name"]

log = logging.getLogger(__name__)

KNOBS = ("num_speculative_tokens", "enable_adaptive_verification", "max_num_seqs",
         "max_num_batched_tokens")
#: How many times a duplicate suggestion is answered from cache before giving up on a round.
MAX_DUPLICATE_ASKS = 64


def study_name(run_id: str, workload: str) -> str:
    return f"{run_id}:{workload}"


@dataclass(frozen=True)
class Suggestion:
    """A config to run: our trial ``number`` within the workload, and Optuna's (None: baseline
    outside the space)."""

    number: int
    config: TrialConfig
    optuna_number: int | None
    is_baseline: bool = False
    is_incumbent: bool = False


@dataclass(frozen=True)
class PastTrial:
    """A finished trial loaded back from the store when a run resumes."""

    number: int
    config: TrialConfig
    is_baseline: bool
    outcome: Outcome | None  # None: failed


def make_sampler(strategy: str, seed: int, space_size: int) -> optuna.samplers.BaseSampler:
    """The Optuna sampler for a strategy name; unknown names list the known ones."""
    import optuna

    if strategy == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(8, max(2, space_size)),
                                          multivariate=True, constant_liar=True)
    if strategy == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if strategy == "guided":
        # Guided order comes from the predictor (enqueued trials); TPE fills in after it.
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
    raise SearchError(f"unknown search strategy {strategy!r}; known: tpe, random, grid, guided")


@dataclass
class Searcher:
    """Ask/tell search over a policy's space for one workload."""

    policy: Policy
    run_id: str
    workload: str
    storage_url: str
    seed: int = 0
    budget_trials: int | None = None
    past: Iterable[PastTrial] = ()
    #: The active recommendation's config: re-measured on this traffic, right after the
    #: baseline, so a new result is compared with it on the same requests.
    incumbent: TrialConfig | None = None
    #: With strategy ``guided``: the acceptance-guided planner that picks every config after
    #: the baseline and says when to stop (autotune.search.guided); None falls back to TPE.
    guide: Guide | None = None
    #: Why a guided search stopped early (empty while it runs or for other strategies).
    stop_reason: str = field(init=False, default="")
    _study: Any = field(init=False, repr=False)
    _choices: dict[str, list[Any]] = field(init=False, repr=False)
    _measured: dict[TrialConfig, Outcome | None] = field(init=False, default_factory=dict)
    _pending: dict[int, Suggestion] = field(init=False, default_factory=dict)
    _trials: dict[int, Any] = field(init=False, default_factory=dict)
    _next_number: int = field(init=False, default=0)
    _finished: int = field(init=False, default=0)
    _baseline_done: bool = field(init=False, default=False)
    _exhausted: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        space = self.policy.space
        self._choices = {k: space.choices(k) for k in KNOBS}
        self._configs = set(space.configs())
        if not self._configs:
            raise SearchError("the policy's space holds no config; check policy.space")
        strategy = self.policy.search.strategy
        self._grid: list[TrialConfig] = []
        if strategy == "grid":
            # Every config once, in a seeded order (what an exhaustive sweep does). Optuna's
            # GridSampler is not used: it calls study.stop() when the grid runs out, which
            # raises outside study.optimize (ask/tell).
            self._grid = sorted(self._configs)
            random.Random(self.seed).shuffle(self._grid)
            sampler: optuna.samplers.BaseSampler = optuna.samplers.RandomSampler(seed=self.seed)
        else:
            sampler = make_sampler(strategy, self.seed, len(self._configs))
        try:
            self._study = optuna.create_study(
                study_name=study_name(self.run_id, self.workload), storage=self._storage(),
                sampler=sampler, direction="maximize", load_if_exists=True)
        except Exception as e:  # optuna wraps driver errors in its own types
            raise SearchError(f"cannot open the Optuna study for {self.workload!r} in "
                              f"{self.storage_url}: {e}") from e
        self._resume()

    def _storage(self) -> Any:
        import optuna

        engine_kwargs: dict[str, Any] = {}
        if self.storage_url.startswith("sqlite"):
            engine_kwargs = {"connect_args": {"timeout": 30}}
        return optuna.storages.RDBStorage(self.storage_url, engine_kwargs=engine_kwargs)

    # -- resume --------------------------------------------------------------------------------
    def _resume(self) -> None:
        import optuna

        for t in self.past:
            self._measured[t.config] = t.outcome
            if self.guide is not None:
                self._observe(t.config, t.outcome, None)
            self._next_number = max(self._next_number, t.number + 1)
            self._finished += 1
            self._baseline_done |= t.is_baseline
        # Trials left RUNNING by a crashed process are failed: they will be asked again.
        for ft in self._study.get_trials(deepcopy=False,
                                         states=(optuna.trial.TrialState.RUNNING,)):
            self._study.tell(ft.number, state=optuna.trial.TrialState.FAIL)

    # -- public API ----------------------------------------------------------------------------
    @property
    def budget(self) -> int:
        return self.budget_trials or self.policy.budget.trials

    @property
    def finished(self) -> int:
        return self._finished

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def done(self) -> bool:
        return (self._finished >= self.budget
                or (self._exhausted and not self._pending))

    def ask(self) -> Suggestion | None:
        """The next config to run, or None when the budget is spent or the space exhausted."""
        if self._finished + len(self._pending) >= self.budget or self._exhausted:
            return None
        if not self._baseline_done and not any(s.is_baseline for s in self._pending.values()):
            return self._ask_baseline()
        running = {s.config for s in self._pending.values()}
        inc = self.incumbent
        if inc is not None and inc not in self._measured and inc not in running:
            return self._issue(inc, None, is_baseline=False, is_incumbent=True)
        if not self._configs - self._measured.keys() - running:
            self._exhausted = not running
            return None
        for config in self._grid:
            if config not in self._measured and config not in running:
                return self._ask_for(config)
        if self.guide is not None and self.policy.search.strategy == "guided":
            return self._ask_guided(running)
        for _ in range(MAX_DUPLICATE_ASKS):
            trial = self._study.ask()
            self._trials[trial.number] = trial
            config = self._suggest(trial)
            if config in running:
                # Constant liar covers in-flight trials; drop this duplicate draw.
                self._study.tell(self._trials.pop(trial.number), state=_pruned())
                continue
            if config in self._measured:
                self._tell_optuna(trial.number, self._measured[config])
                continue
            return self._issue(config, trial.number, is_baseline=False)
        # Sampler keeps proposing known configs: take the first unmeasured config in order.
        for config in sorted(self._configs):
            if config not in self._measured and config not in running:
                return self._ask_for(config)
        self._exhausted = True
        return None

    def tell(self, suggestion: Suggestion, outcome: Outcome | None,
             measurement: Measurement | None = None) -> None:
        """Record the outcome of a suggestion (None: the trial failed); a guided search also
        learns from the ``measurement`` behind it (acceptance counters, step times)."""
        if self._pending.pop(suggestion.number, None) is None:
            raise SearchError(f"trial {suggestion.number} of {self.workload!r} was not asked")
        self._finished += 1
        self._measured[suggestion.config] = outcome
        if self.guide is not None:
            self._observe(suggestion.config, outcome, measurement)
        if suggestion.is_baseline:
            self._baseline_done = True
        if suggestion.optuna_number is None and suggestion.config in self._configs:
            self._add_to_study(suggestion.config, outcome)  # measured outside the study
        if suggestion.optuna_number is not None:
            self._tell_optuna(suggestion.optuna_number, outcome)

    def enqueue(self, configs: Iterable[TrialConfig]) -> None:
        """Ask for these configs next, in order (used by acceptance-guided strategies)."""
        for config in configs:
            if config in self._configs and config not in self._measured:
                self._study.enqueue_trial(
                    {k: getattr(config, k) for k in KNOBS}, skip_if_exists=True)

    # -- internals -----------------------------------------------------------------------------
    def _ask_guided(self, running: set[TrialConfig]) -> Suggestion | None:
        """The guide's next config; None when it stops (for good once nothing is running:
        a running trial's result may still change its plan)."""
        assert self.guide is not None
        decision = self.guide.propose(exclude=set(self._measured) | running)
        if decision.config is None or decision.config not in self._configs:
            self.stop_reason = decision.reason
            self._exhausted = not running
            return None
        return self._ask_for(decision.config)

    def _observe(self, config: TrialConfig, outcome: Outcome | None,
                 measurement: Measurement | None) -> None:
        assert self.guide is not None
        self.guide.observe(config, outcome.value if outcome else None,
                           bool(outcome and outcome.feasible),
                           outcome.summary if outcome else None, measurement)

    def _ask_baseline(self) -> Suggestion:
        # Measured outside the study (it may lie outside the space); added to it after tell.
        return self._issue(self.policy.baseline.config(), None, is_baseline=True)

    def _ask_for(self, config: TrialConfig) -> Suggestion:
        """Ask Optuna for exactly ``config`` (enqueued, then asked)."""
        self._study.enqueue_trial({k: getattr(config, k) for k in KNOBS})
        trial = self._study.ask()
        self._trials[trial.number] = trial
        return self._issue(self._suggest(trial), trial.number, is_baseline=False)

    def _issue(self, config: TrialConfig, optuna_number: int | None, *,
               is_baseline: bool, is_incumbent: bool = False) -> Suggestion:
        s = Suggestion(self._next_number, config, optuna_number, is_baseline, is_incumbent)
        self._next_number += 1
        self._pending[s.number] = s
        return s

    def _suggest(self, trial: optuna.Trial) -> TrialConfig:
        params = {k: trial.suggest_categorical(k, self._choices[k]) for k in KNOBS}
        if params["num_speculative_tokens"] == 0:
            params["enable_adaptive_verification"] = False
        return TrialConfig.from_dict(params)

    def _tell_optuna(self, number: int, outcome: Outcome | None) -> None:
        import optuna

        trial = self._trials.pop(number)
        if outcome is None or not math.isfinite(outcome.value):
            self._study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return
        for name, value in outcome.constraints.items():
            trial.set_constraint(name, value)
        self._study.tell(trial, outcome.value)

    def _add_to_study(self, config: TrialConfig, outcome: Outcome | None) -> None:
        """Record an already measured config (the baseline) as a finished study trial."""
        import optuna

        dists: dict[str, optuna.distributions.BaseDistribution] = {
            k: optuna.distributions.CategoricalDistribution(self._choices[k]) for k in KNOBS}
        params = {k: getattr(config, k) for k in KNOBS}
        if outcome is None or not math.isfinite(outcome.value):
            self._study.add_trial(optuna.trial.create_trial(
                params=params, distributions=dists, state=optuna.trial.TrialState.FAIL))
            return
        self._study.add_trial(optuna.trial.create_trial(
            params=params, distributions=dists, value=outcome.value,
            system_attrs={f"constraints:{k}": v for k, v in outcome.constraints.items()}))


def _pruned() -> Any:
    import optuna

    return optuna.trial.TrialState.PRUNED
