"""Synthetic traffic samples with miscalibrated acceptance predictions (public via the package).

The generator draws each request's *true* acceptance profile from the drafter's prior for its
workload and writes the confidence head's *prediction* of it (through the head's hidden
miscalibration and noise, so raw ECE is a few percent) into ``Request.acceptance`` — never the
truth. Lengths come from lognormal fits to the data in ``../shared/data`` (docs/simulator.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from autotune.backends.sim._profile import load_profile
from autotune.backends.sim._truth import HeadMap, build_truth, request_keys, sigmoid
from autotune.errors import ConfigError
from autotune.types import Request

__all__ = ["LENGTHS", "LengthModel", "generate_requests"]

DEFAULT_PROFILE = "kimi-k2.6@8xH200-tp8"


@dataclass(frozen=True, slots=True)
class LengthModel:
    """Lognormal prompt/output token counts: median and log-sd each, clipped to [lo, hi]."""

    prompt_median: float
    prompt_sd: float
    output_median: float
    output_sd: float
    prompt_max: int = 16000
    output_max: int = 8000


#: Per workload (chars/4 tokens; see docs/simulator.md for each source).
LENGTHS: dict[str, LengthModel] = {
    # GSM8K test questions: median 56, log-sd 0.39; outputs 3.5x the reference solution
    "gsm8k": LengthModel(56, 0.39, 240, 0.48),
    # MATH-500 problems: median 37, log-sd 0.73; outputs 5x the reference solution
    "math500": LengthModel(37, 0.73, 530, 0.75),
    # AIME-24 problems: median 85, log-sd 0.49; outputs 4x the reference solution
    "aime": LengthModel(85, 0.49, 3600, 0.71),
    # HumanEval prompts: median 99, log-sd 0.49; outputs 5x the canonical solution
    "humaneval": LengthModel(99, 0.49, 185, 0.81),
    # LiveCodeBench (no local data): problem statement + format instructions; code + prose
    "livecodebench": LengthModel(450, 0.35, 1400, 0.50),
    # SPEED-Bench Coding (no local data): mixed coding prompts
    "speed-bench-coding": LengthModel(600, 0.60, 900, 0.50),
    # Azure LLM inference trace 2023, conversation: context median 1020, generated median 129
    "chat": LengthModel(1020, 0.99, 129, 0.86, prompt_max=14050, output_max=1000),
    # Azure LLM inference trace 2023, code: context median 1469, generated median 13
    "code": LengthModel(1469, 1.36, 13, 0.85, prompt_max=7437, output_max=1899),
}


def _lengths(name: str) -> LengthModel:
    key = name.strip().lower()
    if key in LENGTHS:
        return LENGTHS[key]
    for word, target in (("math", "math500"), ("gsm", "gsm8k"), ("code", "code"),
                         ("lcb", "livecodebench"), ("chat", "chat")):
        if word in key:
            return LENGTHS[target]
    return LENGTHS["chat"]


def generate_requests(
    count: int,
    *,
    workload: str = "chat",
    seed: int = 0,
    profile: str = DEFAULT_PROFILE,
    drafter: str = "dspark",
    block: int = 8,
    rate: float | None = None,
    prompt_tokens: Sequence[int] | None = None,
    output_tokens: Sequence[int] | None = None,
    arrivals: Sequence[float] | None = None,
    acceptance: bool = True,
    id_prefix: str | None = None,
    chunk: int = 4096,
) -> Iterator[Request]:
    """Yield ``count`` synthetic requests of ``workload``, lazily, deterministic in ``seed``.

    ``rate`` (requests/s) gives Poisson arrivals; ``arrivals`` gives them explicitly; neither
    leaves ``arrival_s`` unset (closed-loop replay). ``prompt_tokens``/``output_tokens``
    override the built-in length model. ``acceptance`` writes the head's predictions
    (``block`` positions). Requests of the same seed, workload and index are identical.
    """
    if count < 0:
        raise ConfigError(f"generate_requests: count must be >= 0, got {count}")
    if rate is not None and not rate > 0:
        raise ConfigError(f"generate_requests: rate must be > 0 requests/s, got {rate}")
    for name, seq in (("prompt_tokens", prompt_tokens), ("output_tokens", output_tokens),
                      ("arrivals", arrivals)):
        if seq is not None and len(seq) < count:
            raise ConfigError(f"generate_requests: {name} has {len(seq)} values, need {count}")
    prof = load_profile(profile)
    dr = prof.drafter(drafter) if acceptance else None
    if acceptance and dr is None:
        raise ConfigError("generate_requests: drafter 'none' has no confidence head; pass "
                          "acceptance=False or a drafter such as 'dspark'")
    head_map = HeadMap.build(dr.head, block) if dr is not None else None
    lengths = _lengths(workload)
    rng = np.random.default_rng([abs(seed) & 0xFFFFFFFF, 7])
    prefix = id_prefix if id_prefix is not None else f"{workload}-{seed}-"
    t = 0.0
    for start in range(0, count, chunk):
        k = min(chunk, count - start)
        ids = [f"{prefix}{i}" for i in range(start, start + k)]
        pz = rng.standard_normal(k)
        oz = rng.standard_normal(k)
        gaps = rng.exponential(1.0 / rate, k) if rate is not None else None
        if prompt_tokens is not None:
            prompts = np.asarray(prompt_tokens[start:start + k], dtype=np.int64)
        else:
            prompts = np.clip(np.rint(lengths.prompt_median * np.exp(lengths.prompt_sd * pz)),
                              1, lengths.prompt_max).astype(np.int64)
        if output_tokens is not None:
            outs = np.asarray(output_tokens[start:start + k], dtype=np.int64)
        else:
            outs = np.clip(np.rint(lengths.output_median * np.exp(lengths.output_sd * oz)),
                           1, lengths.output_max).astype(np.int64)
        preds: list[tuple[float, ...] | None] = [None] * k
        if dr is not None and head_map is not None:
            truth = build_truth(dr, head_map, block, [workload] * k, [None] * k,
                                request_keys(ids, seed))
            head = np.round(sigmoid(truth.head), 3)
            preds = [tuple(row) for row in head.tolist()]
        for j in range(k):
            arrival: float | None = None
            if arrivals is not None:
                arrival = float(arrivals[start + j])
            elif gaps is not None:
                t += float(gaps[j])
                arrival = round(t, 6)
            yield Request(id=ids[j], prompt_tokens=int(prompts[j]), output_tokens=int(outs[j]),
                          arrival_s=arrival, workload=workload, acceptance=preds[j])

