"""The Optuna sampler strategies: ``tpe``, ``random`` and ``gp`` (Gaussian process).

The sampler picks from the study's history (every finished trial, the baseline included when
it lies in the space). A config already measured or running is never handed out twice: a
draw of a running config is pruned (constant liar covers running trials), a draw of a measured
one is told its known outcome; when the sampler keeps drawing known configs, the first
unmeasured config in order is taken.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from typing import TYPE_CHECKING

from autotune.errors import DependencyError
from autotune.objective import Outcome
from autotune.search.strategy import Proposal, Strategy, StrategySetup
from autotune.types import TrialConfig

if TYPE_CHECKING:
    import optuna

__all__ = ["SamplerStrategy", "create_gp", "create_random", "create_tpe"]

#: How many times a duplicate draw is answered before taking the first unmeasured config.
MAX_DUPLICATE_DRAWS = 8


class SamplerStrategy(Strategy):
    """Asks an Optuna sampler for the next config (see the module doc)."""

    def __init__(self, kind: str, setup: StrategySetup,
                 sampler: optuna.samplers.BaseSampler) -> None:
        self.kind = kind
        self.configs = sorted(setup.configs)
        self.study = setup.study
        self.study.use_sampler(sampler)

    def propose(self, measured: Mapping[TrialConfig, Outcome | None],
                running: Set[TrialConfig]) -> Proposal:
        for _ in range(MAX_DUPLICATE_DRAWS):
            number, config = self.study.ask()
            if config in running:
                self.study.prune(number)
                continue
            if config in measured:
                self.study.tell(number, measured[config])
                continue
            return Proposal(config, f"{self.kind} sampler", study_trial=number)
        for config in self.configs:
            if config not in measured and config not in running:
                return Proposal(config, f"{self.kind} sampler repeats itself; next unmeasured "
                                        "config in order")
        return Proposal(None, "every config of the space is measured")


def _create(kind: str, make: Callable[[int, int], optuna.samplers.BaseSampler]
            ) -> Callable[[StrategySetup], SamplerStrategy]:
    def create(setup: StrategySetup) -> SamplerStrategy:
        return SamplerStrategy(kind, setup, make(setup.seed, len(setup.configs)))
    return create


def _tpe(seed: int, space_size: int) -> optuna.samplers.BaseSampler:
    import optuna

    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(8, max(2, space_size)),
                                      multivariate=True, constant_liar=True)


def _random(seed: int, space_size: int) -> optuna.samplers.BaseSampler:
    import optuna

    return optuna.samplers.RandomSampler(seed=seed)


def _gp(seed: int, space_size: int) -> optuna.samplers.BaseSampler:
    import optuna

    try:
        import torch  # noqa: F401  (GPSampler's dependency)
    except ImportError as e:
        raise DependencyError.missing("torch", "gp", "search.strategy gp (Optuna's "
                                      "GPSampler)") from e
    return optuna.samplers.GPSampler(seed=seed, n_startup_trials=min(8, max(2, space_size)))


create_tpe = _create("tpe", _tpe)
create_random = _create("random", _random)
create_gp = _create("gp", _gp)
