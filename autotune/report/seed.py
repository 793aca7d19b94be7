"""The seed benchmark (docs/architecture.md, "Facts"), as data the report can plot next to a
run's own numbers.

Speedup of speculative decoding over plain decoding at batch size 1 (vLLM nightly, greedy,
TP=8, max_model_len 20000, CUDA graphs on), at draft windows n=3 and n=7. ``average`` is the
mean over GSM8K, MATH500, AIME, HumanEval, LiveCodeBench and SPEED-Bench Coding.
Source: deepseek-ai/DeepSpec, arXiv 2607.05147 (its batch-1 speedup table).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SEED_SOURCE", "SEED_TABLE", "SeedRow"]

SEED_SOURCE = ("DeepSpec (arXiv 2607.05147), batch size 1, vLLM nightly, greedy, TP=8, "
               "max_model_len 20000, CUDA graphs on")


@dataclass(frozen=True)
class SeedRow:
    """One published speedup pair: ``speedup[n]`` for the windows the benchmark measured."""

    target: str
    drafter: str
    benchmark: str
    speedup: dict[int, float]


SEED_TABLE: tuple[SeedRow, ...] = (
    SeedRow("Kimi-K2.6", "DSpark", "average", {3: 2.17, 7: 2.55}),
    SeedRow("Kimi-K2.6", "Eagle3-MLA", "average", {3: 2.01, 7: 2.01}),
    SeedRow("Kimi-K2.7-Code", "DSpark", "average", {3: 2.12, 7: 2.36}),
    SeedRow("Kimi-K2.7-Code", "Eagle3-MLA", "average", {3: 2.04, 7: 2.05}),
    SeedRow("Kimi-K2.6", "DSpark", "LiveCodeBench", {3: 1.86, 7: 1.87}),
    SeedRow("Kimi-K2.6", "Eagle3-MLA", "LiveCodeBench", {3: 1.67, 7: 1.48}),
    SeedRow("Kimi-K2.7-Code", "DSpark", "LiveCodeBench", {3: 1.75, 7: 1.78}),
    SeedRow("Kimi-K2.7-Code", "Eagle3-MLA", "LiveCodeBench", {3: 1.69, 7: 1.52}),
    SeedRow("Kimi-K2.6", "DSpark", "SPEED-Bench Coding", {3: 2.19, 7: 2.41}),
    SeedRow("Kimi-K2.7-Code", "DSpark", "SPEED-Bench Coding", {3: 2.15, 7: 2.31}),
)
