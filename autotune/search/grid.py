"""The ``grid`` strategy: every config of the space once, in a seeded order (an exhaustive
sweep). Optuna's GridSampler is not used: it calls ``study.stop()`` when the grid runs out,
which raises outside ``study.optimize`` (ask/tell)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Set

from autotune.objective import Outcome
from autotune.search.strategy import Proposal, Strategy, StrategySetup
from autotune.types import TrialConfig

__all__ = ["GridStrategy"]


class GridStrategy(Strategy):
    kind = "grid"

    def __init__(self, setup: StrategySetup) -> None:
        self.order = sorted(setup.configs)
        random.Random(setup.seed).shuffle(self.order)

    def propose(self, measured: Mapping[TrialConfig, Outcome | None],
                running: Set[TrialConfig]) -> Proposal:
        for config in self.order:
            if config not in measured and config not in running:
                return Proposal(config, "next config of the grid")
        return Proposal(None, "every config of the space is measured")
