"""The seed's benchmark table reproduced through the simulator: each benchmark's requests
(``autotune.backends.sim.seed_benchmark_requests``) replayed one at a time (batch size 1, closed
loop) at n = 0 (no drafter), 3 and 7; speedup = output tokens/s with the drafter / without,
the mean over simulator seeds (:func:`seed_table`), and its errors against the published
numbers (:func:`seed_table_errors`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from autotune.backends.sim import SEED_MAX_MODEL_LEN, Profile, SimBackend, load_profile
from autotune.types import ReplaySchedule, Request, ServeSpec, Slo, TrialConfig
from bench.calibration.seed import DRAFTERS, MODELS, seed_cells

__all__ = ["DEFAULT_SEEDS", "baselines", "seed_table", "seed_table_errors", "speedup",
           "throughput"]

#: Simulator seeds averaged per cell (each draws another set of hidden per-request profiles).
DEFAULT_SEEDS = (0, 1, 2)
SERVE = ServeSpec(model="seed", draft_model=None, method="dspark", draft_block_size=8,
                  max_model_len=SEED_MAX_MODEL_LEN)


def throughput(profile: Profile, drafter: str, n: int, requests: Sequence[Request],
               seed: int) -> float:
    """Output tokens/s of ``requests`` replayed one at a time (n = 0: no drafter)."""
    backend = SimBackend(SERVE, profile, drafter if n else "none", seed)
    replica = backend.start(TrialConfig(n, False, 1, 8192))
    m = replica.replay(ReplaySchedule(list(requests), mode="closed", concurrency=1, seed=seed))
    value: float = m.summary(Slo())["output_tokens_per_s"]
    return value


def seed_table(benchmarks: Mapping[str, Sequence[Request]], models: Iterable[str] = MODELS,
               drafters: Iterable[str] = DRAFTERS, windows: Iterable[int] = (3, 7),
               seeds: Sequence[int] = DEFAULT_SEEDS,
               profiles: Mapping[str, Profile] | None = None) -> dict[str, Any]:
    """Speedups in the seed's shape: model -> drafter -> avg|benchmark -> window -> x.

    Each cell is the mean over ``seeds`` (the simulator seed draws each request's hidden
    acceptance profile, like drawing another instance of the benchmark, and the acceptance
    draws). ``profiles`` maps a model to a profile object (default: the shipped profile).
    """
    table: dict[str, Any] = {}
    windows = tuple(windows)
    for model in models:
        profile = (profiles or {}).get(model) or load_profile(MODELS[model])
        base = {b: baselines(profile, reqs, seeds) for b, reqs in benchmarks.items()}
        table[model] = {}
        for drafter in drafters:
            cells = {b: {str(n): speedup(profile, drafter, n, reqs, seeds, base[b])
                         for n in windows}
                     for b, reqs in benchmarks.items()}
            avg = {str(n): sum(cells[b][str(n)] for b in cells) / len(cells) for n in windows}
            table[model][drafter] = {"avg": avg, **cells}
    return table


def baselines(profile: Profile, requests: Sequence[Request],
              seeds: Sequence[int] = DEFAULT_SEEDS) -> list[float]:
    """Tokens/s without speculation, per seed."""
    return [throughput(profile, "none", 0, requests, s) for s in seeds]


def speedup(profile: Profile, drafter: str, n: int, requests: Sequence[Request],
            seeds: Sequence[int], base: Sequence[float]) -> float:
    """Mean over ``seeds`` of tokens/s with ``drafter`` at window ``n`` / ``base`` (per seed)."""
    ratios = [throughput(profile, drafter, n, requests, s) / b
              for s, b in zip(seeds, base, strict=True)]
    return sum(ratios) / len(ratios)


def seed_table_errors(table: Mapping[str, Any]) -> list[tuple[str, float, float, float]]:
    """(cell, published, simulated, relative error) for every published number."""
    out = []
    for c in seed_cells():
        sim = float(table[c.model][c.drafter][c.cell][str(c.n)])
        out.append((f"{c.model}/{c.key}", c.published, sim, sim / c.published - 1.0))
    return out
