"""The seed's benchmark table, reproduced through the simulator (issue 3 item 3).

Each benchmark is a list of requests replayed one at a time (batch size 1, closed loop) at
n = 0 (no drafter), 3 and 7; speedup = output tokens/s with the drafter ÷ without. Prompts and
lengths of GSM8K, MATH-500, AIME-24 and HumanEval come from ``../shared/data/prompts``; output
lengths are the reference solutions scaled by :data:`OUTPUT_SCALE` (a chat model writes a longer
worked solution than the terse reference). LiveCodeBench and SPEED-Bench Coding have no local
data: their lengths come from the generator's length models (docs/simulator.md justifies them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.backends.sim._generate import generate_requests
from autotune.backends.sim._profile import Profile, load_profile
from autotune.errors import ConfigError
from autotune.types import ReplaySchedule, Request, ServeSpec, Slo, TrialConfig

__all__ = [
    "BENCHMARKS",
    "MODELS",
    "OUTPUT_SCALE",
    "PER_BENCHMARK",
    "SEED_TABLE",
    "baselines",
    "seed_benchmark_requests",
    "seed_table",
    "seed_table_errors",
    "speedup",
    "throughput",
]

BENCHMARKS = ("gsm8k", "math500", "aime", "humaneval", "livecodebench", "speed-bench-coding")
#: Seed model name -> simulator profile.
MODELS = {"kimi-k2.6": "kimi-k2.6@8xH200-tp8", "kimi-k2.7-code": "kimi-k2.7-code@8xH200-tp8"}
DRAFTERS = ("dspark", "eagle3-mla")
#: Requests per benchmark (AIME-24 has 30, HumanEval 164: all of them).
PER_BENCHMARK = 500
#: Simulator seeds averaged per cell (each draws another set of hidden per-request profiles).
DEFAULT_SEEDS = (0, 1, 2)

#: Every published number (docs/architecture.md):
#: model -> drafter -> benchmark|avg -> window -> speedup.
SEED_TABLE: dict[str, dict[str, dict[str, dict[str, float]]]] = {
    "kimi-k2.6": {
        "dspark": {"avg": {"3": 2.17, "7": 2.55}, "livecodebench": {"3": 1.86, "7": 1.87},
                   "speed-bench-coding": {"3": 2.19, "7": 2.41}},
        "eagle3-mla": {"avg": {"3": 2.01, "7": 2.01}, "livecodebench": {"3": 1.67, "7": 1.48}},
    },
    "kimi-k2.7-code": {
        "dspark": {"avg": {"3": 2.12, "7": 2.36}, "livecodebench": {"3": 1.75, "7": 1.78},
                   "speed-bench-coding": {"3": 2.15, "7": 2.31}},
        "eagle3-mla": {"avg": {"3": 2.04, "7": 2.05}, "livecodebench": {"3": 1.69, "7": 1.52}},
    },
}

#: Output tokens = scale x the reference solution's tokens (chars/4), at least 32.
OUTPUT_SCALE = {"gsm8k": 3.5, "math500": 5.0, "aime": 4.0, "humaneval": 5.0}
_FILES = {
    "gsm8k": ("gsm8k_test.jsonl", "question", "answer"),
    "math500": ("math500_test.jsonl", "problem", "solution"),
    "aime": ("aime24_test.jsonl", "problem", "solution"),
    "humaneval": ("humaneval.jsonl", "prompt", "canonical_solution"),
}
#: Chat-template tokens around every prompt (system + role markers).
TEMPLATE_TOKENS = 24
MAX_MODEL_LEN = 20000
SERVE = ServeSpec(model="seed", draft_model=None, method="dspark", draft_block_size=8,
                  max_model_len=MAX_MODEL_LEN)


def _tokens(text: str) -> int:
    return max(1, round(len(text) / 4))  # the traffic reader's estimate (chars/4)


def seed_benchmark_requests(data_dir: str | Path, per_benchmark: int = PER_BENCHMARK,
                            seed: int = 0) -> dict[str, list[Request]]:
    """Requests per benchmark: the first ``per_benchmark`` items of each local prompt set."""
    root = Path(data_dir) / "prompts"
    out: dict[str, list[Request]] = {}
    for name, (file, prompt_key, ref_key) in _FILES.items():
        path = root / file
        if not path.is_file():
            raise ConfigError(f"{path}: prompt set not found; pass the shared data folder "
                              "(../shared/data or $AUTOTUNE_SHARED_DATA)")
        reqs = []
        with path.open(encoding="utf-8") as f:
            for i, line in enumerate(f):
                if i >= per_benchmark:
                    break
                row = json.loads(line)
                prompt = TEMPLATE_TOKENS + _tokens(row[prompt_key])
                output = max(32, round(OUTPUT_SCALE[name] * _tokens(row[ref_key])))
                output = min(output, MAX_MODEL_LEN - prompt - 16)
                reqs.append(Request(id=f"{name}-{i}", prompt_tokens=prompt,
                                    output_tokens=output, workload=name))
        out[name] = reqs
    for name in ("livecodebench", "speed-bench-coding"):
        gen = generate_requests(per_benchmark, workload=name, seed=seed, acceptance=False,
                                id_prefix=f"{name}-")
        out[name] = [Request(id=r.id, prompt_tokens=r.prompt_tokens + TEMPLATE_TOKENS,
                             output_tokens=r.output_tokens, workload=name) for r in gen]
    return out


def throughput(profile: Profile, drafter: str, n: int, requests: Sequence[Request],
               seed: int) -> float:
    """Output tokens/s of ``requests`` replayed one at a time (n = 0: no drafter)."""
    from autotune.backends.sim import SimBackend

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
    for model, drafters in SEED_TABLE.items():
        for drafter, cells in drafters.items():
            for cell, windows in cells.items():
                for n, published in windows.items():
                    sim = float(table[model][drafter][cell][n])
                    out.append((f"{model}/{drafter}/{cell}/n={n}", published, sim,
                                sim / published - 1.0))
    return out
