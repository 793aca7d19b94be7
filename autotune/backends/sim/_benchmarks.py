"""The seed benchmark's prompt sets as requests: what the seed's batch-1 speedup table was
measured on, and what the regret benchmark's math workloads are built from.

Prompts and lengths of GSM8K, MATH-500, AIME-24 and HumanEval come from the shared data's
``prompts/``; output lengths are the reference solutions scaled by :data:`OUTPUT_SCALE` (a chat
model writes a longer worked solution than the terse reference). LiveCodeBench and SPEED-Bench
Coding have no local data: their lengths come from the generator's length models
(docs/simulator.md justifies them). The seed's published speedups are
``autotune/report/seed.py``'s; the simulator's calibration to them is bench/calibration/.
"""

from __future__ import annotations

import json
from pathlib import Path

from autotune.backends.sim._generate import generate_requests
from autotune.errors import ConfigError
from autotune.types import Request

__all__ = [
    "BENCHMARKS",
    "OUTPUT_SCALE",
    "PER_BENCHMARK",
    "SEED_MAX_MODEL_LEN",
    "TEMPLATE_TOKENS",
    "seed_benchmark_requests",
]

BENCHMARKS = ("gsm8k", "math500", "aime", "humaneval", "livecodebench", "speed-bench-coding")
#: Requests per benchmark (AIME-24 has 30, HumanEval 164: all of them).
PER_BENCHMARK = 500

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
#: The seed's max_model_len: a request's prompt and output fit in it.
SEED_MAX_MODEL_LEN = 20000


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
                output = min(output, SEED_MAX_MODEL_LEN - prompt - 16)
                reqs.append(Request(id=f"{name}-{i}", prompt_tokens=prompt,
                                    output_tokens=output, workload=name))
        out[name] = reqs
    for name in ("livecodebench", "speed-bench-coding"):
        gen = generate_requests(per_benchmark, workload=name, seed=seed, acceptance=False,
                                id_prefix=f"{name}-")
        out[name] = [Request(id=r.id, prompt_tokens=r.prompt_tokens + TEMPLATE_TOKENS,
                             output_tokens=r.output_tokens, workload=name) for r in gen]
    return out
