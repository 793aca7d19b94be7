"""How a search picks its next config: the :class:`Strategy` every kind implements, and the
registry that builds one from the policy's ``search.strategy``.

A strategy sees what the :class:`~autotune.search.searcher.Searcher` tells it — every finished
trial with its outcome (and the measurement behind it) — and, when asked, proposes one config
of the space that is neither measured nor running, or none with the reason it stops. The
searcher keeps what every strategy shares: the baseline first, the active config re-measured,
the budget, and never the same config twice.

Kinds (``search.strategy``): ``guided`` (acceptance-guided, :mod:`autotune.search.guided`),
``tpe``, ``random`` and ``gp`` (Optuna's samplers, :mod:`autotune.search.sampler`) and
``grid`` (every config once, :mod:`autotune.search.grid`). Adding one is one entry in
``_REGISTRY`` pointing at a factory ``(StrategySetup) -> Strategy``.
"""

from __future__ import annotations

import importlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotune.errors import SearchError
from autotune.objective import Outcome
from autotune.types import CapacityHint, Measurement, Request, TrialConfig

if TYPE_CHECKING:
    from autotune.acceptance import HeadCalibration
    from autotune.policy import Policy
    from autotune.search.study import TrialStudy

__all__ = ["Proposal", "Strategy", "StrategySetup", "available_strategies", "create_strategy"]

log = logging.getLogger(__name__)

#: kind -> "module:factory" (imported lazily).
_REGISTRY: dict[str, str] = {
    "guided": "autotune.search.guided:create_guided",
    "tpe": "autotune.search.sampler:create_tpe",
    "random": "autotune.search.sampler:create_random",
    "gp": "autotune.search.sampler:create_gp",
    "grid": "autotune.search.grid:GridStrategy",
}


@dataclass(frozen=True)
class Proposal:
    """A strategy's answer: the config to run next, or None (``reason`` says why).

    ``study_trial`` is the number of the study trial the config was asked as, when the
    strategy asked the study's sampler itself; otherwise the searcher asks the study for it.
    """

    config: TrialConfig | None
    reason: str = ""
    study_trial: int | None = None
    #: where the strategy expects the config's capacity (None: no expectation); the trial's
    #: capacity reading may start there
    capacity_hint: CapacityHint | None = None


@dataclass(frozen=True)
class StrategySetup:
    """What a strategy is built from: the space, the seed, the workload and the study."""

    configs: tuple[TrialConfig, ...]
    seed: int
    study: TrialStudy
    policy: Policy
    requests: Sequence[Request] = ()


class Strategy(ABC):
    """Picks configs for one workload's search.

    ``propose`` is called with the configs measured so far (with their outcomes; None: the
    trial failed) and those running now; it must not return one of either. Returning no
    config while trials run means "nothing until they finish"; with nothing running it ends
    the search. Not thread-safe: one instance per workload and search.
    """

    kind: str = ""

    @abstractmethod
    def propose(self, measured: Mapping[TrialConfig, Outcome | None],
                running: Set[TrialConfig]) -> Proposal:
        """The next config to run (see the class doc)."""

    def observe(self, config: TrialConfig, outcome: Outcome | None,
                measurement: Measurement | None) -> None:
        """A trial finished (``outcome`` None: it failed). Default: nothing to learn."""
        return None

    def calibration(self) -> HeadCalibration | None:
        """The confidence-head calibration this strategy fitted, if any. Default: none."""
        return None

    def surprise(self, config: TrialConfig, outcome: Outcome) -> str | None:
        """Why ``config``'s one reading ``outcome`` is not what this strategy expected of it
        before it ran (a reading far above its prediction), or None. The searcher reads such
        a leader again before recommending it. Default: no expectations."""
        return None

    def use_hardware(self, gpu: str) -> str | None:
        """The pool reports the kind of GPU the replicas run on (before any new trial): a
        strategy that models the hardware takes it where the policy names none, and returns
        a note saying what it now assumes. Default: nothing to model."""
        return None


def available_strategies() -> list[str]:
    return sorted(_REGISTRY)


def create_strategy(kind: str, setup: StrategySetup) -> Strategy:
    """Build the strategy registered as ``kind``; unknown kinds list the registered ones."""
    target = _REGISTRY.get(kind)
    if target is None:
        raise SearchError(f"unknown search strategy {kind!r}; known: "
                          f"{', '.join(available_strategies())} (policy key search.strategy)")
    module_name, _, attr = target.partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    strategy: Strategy = factory(setup)
    return strategy
