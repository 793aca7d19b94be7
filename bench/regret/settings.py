"""What one regret run is asked: the space, the sizes, the seeds, how the oracle reads and
settles, and where readings are cached (:class:`Settings`, built once from the command line and
passed to every part, worker processes included); and the budgets every method is held to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autotune.knee_search import MAX_READINGS

#: The knobs' values a search may choose, by knob (a policy's ``space``).
Space = Mapping[str, Sequence[int]]

SMALL_SPACE: Space = {
    "num_speculative_tokens": [1, 3, 5, 7], "enable_adaptive_verification": [False],
    "max_num_seqs": [8, 32, 128], "max_num_batched_tokens": [2048, 8192]}
FULL_SPACE: Space = {
    "num_speculative_tokens": [1, 2, 3, 4, 5, 6, 7], "enable_adaptive_verification": [False, True],
    "max_num_seqs": [8, 32, 64, 128, 256], "max_num_batched_tokens": [2048, 4096, 8192, 16384]}
#: The search methods (the seed default is always scored besides them).
METHODS = ("guided", "tpe", "random", "grid")
BUDGET = 12          # the default policy's budget.trials (baseline included)
EQUAL_BUDGET = 6     # regret_at_6
LONG_RUN = 60        # tpe/random run on (through the space) to find when they reach 2%
FRESH_BASE = 100000  # fresh replay seeds start here; the oracle's are 1000 + repeat
SAID_LOSS = 0.01     # a guided run losing more than this should say its race was close


@dataclass(frozen=True)
class Settings:
    """One run's parameters (``python -m bench.regret --help`` says what each flag does)."""

    space: Space
    seeds: int = 5
    requests: int = 300
    repeats: int = 2
    refine: int = 4
    refine_repeats: int = 2
    settle_max: int = 8
    settle_within: float = 0.03
    settle_se: float = 0.005
    capacity_replays: int = MAX_READINGS
    engine_seeds: int = 3
    #: re-score the real-engine readings this machine took, measuring nothing
    engine_machine: str | None = None
    methods: tuple[str, ...] = METHODS
    #: JSON-lines file of readings (read, appended)
    cache: str | None = None
    #: hash of the simulator's code: cached simulated readings never outlive a change
    fingerprint: str = ""
    #: score by whether a config serves a rate to serve within an SLO, both set by the rule of
    #: bench/regret/binding.py
    binding_slo: bool = False
