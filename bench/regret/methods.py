"""The methods scored, each a sequence of trials read through a :class:`Reader`: guided, tpe and
random through autotune's own Searcher (:func:`run_searcher`), grid as every config once in a
seeded order (:func:`run_grid`); and what a run recommends (:func:`recommended`, autotune's own
recommendation step) and whether it says the race was close (:func:`race`).

A method's trial reads a FRESH replay: replay seed ``FRESH_BASE + 100 * method seed + k`` for the
k-th reading of that config in that run, never one of the oracle's seeds. Methods with the same
seed read the same fresh replay of a config (common random numbers: a difference between
methods is their choices, not their luck).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench.regret.oracle import Table
from bench.regret.reader import Reader
from bench.regret.reading import Reading
from bench.regret.records import Race
from bench.regret.settings import FRESH_BASE

if TYPE_CHECKING:
    from autotune.recommend.choose import Scored
    from autotune.types import TrialConfig

Trials = Sequence[tuple["TrialConfig", Reading]]


@dataclass(frozen=True)
class Run:
    """One method's run: its trials in order, and why it stopped."""

    trials: list[tuple[TrialConfig, Reading]]
    stop_reason: str = ""


def _fresh(seed: int, config: TrialConfig, trials: Trials) -> int:
    """The replay seed of the next reading of ``config`` in a run with ``seed``."""
    return FRESH_BASE + 100 * seed + sum(1 for c, _ in trials if c == config)


def _scored(trials: Trials) -> list[Scored]:
    from autotune.objective import Outcome
    from autotune.recommend.choose import Scored

    return [Scored(i, c, Outcome(r.value, r.constraints, r.summary))
            for i, (c, r) in enumerate(trials)]


def recommended(trials: Trials) -> TrialConfig | None:
    """The config autotune's recommendation step picks from ``trials`` (None: no trial)."""
    from autotune.recommend.choose import select_best

    best = select_best(_scored(trials))
    return best.config if best is not None else None


def race(trials: Trials) -> Race:
    """Whether the recommendation of ``trials`` says it is a close race with its runner-up
    (autotune/recommend/runner_up.py). The readings here keep no requests, so the noise is
    the repeats' alone: a run that read nothing twice never says it."""
    from autotune.recommend.choose import select_best
    from autotune.recommend.runner_up import runner_up_race

    scored = _scored(trials)
    best = select_best(scored)
    found = (runner_up_race(scored, best, None, 1.0, lambda a, b: None)
             if best is not None else None)
    return {"close_race": bool(found and found.close),
            "lead": round(found.lead, 4) if found else None}


def run_searcher(reader: Reader, method: str, seed: int, budget: int) -> Run:
    """``method`` (a strategy name) through autotune's Searcher, ``budget`` trials at most."""
    from autotune.objective import Outcome
    from autotune.search import open_search

    policy = reader.search_policy(method, budget)
    s = open_search(policy, f"bench-{method}-{seed}", reader.wl.name, "sqlite:///:memory:",
                    seed=seed, requests=reader.wl.requests)
    trials: list[tuple[TrialConfig, Reading]] = []
    while (sug := s.ask()) is not None:
        r = reader.read(sug.config, _fresh(seed, sug.config, trials))
        trials.append((sug.config, r))
        s.tell(sug, Outcome(r.value, r.constraints, r.summary))
    return Run(trials, s.stop_reason)


def run_grid(reader: Reader, seed: int) -> Run:
    """The baseline, then every config of the space once (``reader.grid_runs`` in all, when
    given) in an order seeded by ``seed``: what vLLM's auto_tune does."""
    configs = sorted(reader.policy.space.configs())
    configs.sort(key=lambda c: zlib.crc32(f"{seed}:{c.short()}".encode()))
    baseline = reader.policy.baseline.config()
    order = [baseline, *(c for c in configs if c != baseline)][:reader.grid_runs]
    trials: list[tuple[TrialConfig, Reading]] = []
    for c in order:
        trials.append((c, reader.read(c, _fresh(seed, c, trials))))
    return Run(trials, "every config of the space measured")


def runs_to(table: Table[TrialConfig], trials: Trials, target: float) -> float:
    """How many of ``trials`` a run needs before its recommendation comes within ``target``
    of the oracle (inf: never)."""
    for k in range(1, len(trials) + 1):
        if table.regret(recommended(trials[:k])) <= target:
            return float(k)
    return math.inf
