"""The regret benchmark's workloads: five samples built from the shared data, each with its SLO.

- ``chat-low``: Azure LLM conversation trace (arrivals, prompt and output lengths), the
  default SLO (p99 TTFT 3 s, p99 ITL 60 ms): prefill stalls cap the load (low load);
- ``chat-high``: the same traffic under a batch-serving SLO (ITL 150 ms): high load;
- ``code``: Azure code-completion trace (long prompts, short outputs), TTFT 2 s / ITL 200 ms;
- ``math``: GSM8K and MATH-500 prompts and reference-solution lengths on the conversation
  trace's arrivals, the default SLO: decode-bound;
- ``mixed``: chat, code and math requests interleaved in one workload, TTFT 3 s / ITL 100 ms.

Acceptance predictions come from the simulator's confidence-head generator (the simulator then
derives each request's hidden truth from them); lengths and arrivals are the traces'.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.types import Request


@dataclass(frozen=True)
class Workload:
    """A sample and the SLO it is held to."""

    name: str
    requests: list[Request]
    slo: tuple[float, float]          # (p99 TTFT ms, p99 ITL ms)
    note: str


def _azure(data: Path, kind: str, start: int, count: int) -> list[tuple[float, int, int]]:
    rows: list[tuple[float, int, int]] = []
    with (data / "azure_llm_2023" / f"AzureLLMInferenceTrace_{kind}.csv").open() as f:
        reader = csv.reader(f)
        next(reader)
        for i, row in enumerate(reader):
            if i < start:
                continue
            if len(rows) >= count:
                break
            t = datetime.strptime(row[0][:26], "%Y-%m-%d %H:%M:%S.%f").timestamp()
            prompt, output = int(row[1]), int(row[2])
            rows.append((t, prompt, max(1, min(output, 20000 - prompt - 16))))
    t0 = rows[0][0]
    return [(t - t0, p, o) for t, p, o in rows]


def _math(data: Path, count: int, seed: int) -> list[tuple[float, int, int]]:
    from autotune.backends.sim import seed_benchmark_requests

    sets = seed_benchmark_requests(data, per_benchmark=count, seed=seed)
    reqs = sets["gsm8k"] + sets["math500"]
    random.Random(seed).shuffle(reqs)
    arrivals = _azure(data, "conv", 4000, count)
    return [(a[0], r.prompt_tokens, r.output_tokens) for a, r in zip(arrivals, reqs, strict=False)]


def _requests(name: str, label: str, rows: Sequence[tuple[float, int, int]]) -> list[Request]:
    from autotune.backends.sim import generate_requests

    return list(generate_requests(len(rows), workload=label, seed=0,
                                  prompt_tokens=[r[1] for r in rows],
                                  output_tokens=[r[2] for r in rows],
                                  arrivals=[r[0] for r in rows], id_prefix=f"{name}-"))


def _arrival(r: Request) -> float:
    """A trace request's arrival time (every request built here has one)."""
    assert r.arrival_s is not None
    return r.arrival_s


def build_workloads(data: Path, n: int) -> list[Workload]:
    """The five workloads of ``n`` requests each from the shared data folder ``data``."""
    chat = _requests("chat", "chat", _azure(data, "conv", 2000, n))
    code = _requests("code", "code", _azure(data, "code", 2000, n))
    math_ = _requests("math", "math", _math(data, n, 0))
    parts = [_requests("mx-chat", "chat", _azure(data, "conv", 6000, n * 2 // 5)),
             _requests("mx-code", "code", _azure(data, "code", 5000, n // 5)),
             _requests("mx-math", "math", _math(data, n * 2 // 5, 1))]
    span = _arrival(parts[0][-1])
    mixed = sorted((replace(r, arrival_s=_arrival(r) * span / _arrival(p[-1]), workload="mixed")
                    for p in parts for r in p), key=_arrival)
    return [
        Workload("chat-low", chat, (3000.0, 60.0), "Azure conv trace, default SLO: low load"),
        Workload("chat-high", chat, (3000.0, 150.0), "Azure conv trace, ITL 150 ms: high load"),
        Workload("code", code, (2000.0, 200.0), "Azure code trace (prefill-heavy)"),
        Workload("math", math_, (3000.0, 60.0), "GSM8K + MATH-500 on conv arrivals"),
        Workload("mixed", mixed, (3000.0, 100.0), "chat + code + math in one workload"),
    ]
