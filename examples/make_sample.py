"""Build the example traffic samples in ``examples/`` from the real data in ``../shared/data``.

Deterministic under ``--seed``: the same inputs and arguments give byte-identical output. Not
needed at run time: the generated files are committed. See ``examples/PROVENANCE.md`` for what
is real and what is synthetic; in short:

* real: arrival times and output lengths (a contiguous window of the Azure LLM inference
  conversation trace, 2023), prompt texts (Spec-Bench, HumanEval, GSM8K);
* derived: which prompt a request gets (nearest estimated length to the trace's ContextTokens
  quantile, within the request's workload), ``prompt_tokens`` (= chars / 4 of the text, rounded);
* synthetic: the workload label of each trace request (seeded draw) and the ``acceptance``
  predictions (per-workload profiles around the novita/kimi-k2.6-dspark offline rates).

Usage (from the repository root)::

    python examples/make_sample.py --requests 1000 --out examples/sample.jsonl
    python examples/make_sample.py --requests 96 --start-s 1800 --out examples/small.jsonl
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("AUTOTUNE_SHARED_DATA", REPO / ".." / "shared" / "data"))

#: Draft block size of the novita DSpark checkpoints: length of every acceptance list.
BLOCK = 8

#: novita/kimi-k2.6-dspark offline per-position acceptance (docs/architecture.md, "Facts").
#: These are survival-like rates s_k (a token counts only if every earlier one was accepted),
#: 7 positions.
NOVITA_SURVIVAL = (0.816, 0.720, 0.652, 0.598, 0.553, 0.512, 0.474)

#: Share of requests per workload (seeded draw per trace request).
WORKLOAD_SHARES = {"chat": 0.5, "code": 0.25, "math": 0.25}

#: Synthetic acceptance profile per workload: a shift of the novita conditional rates on the
#: logit scale, the spread of a per-request difficulty and the per-position noise. Code and math
#: are more predictable than open chat (the seed benchmarks are code/math; docs/architecture.md).
PROFILES = {
    "chat": {"shift": -0.55, "request_sd": 0.45, "position_sd": 0.12},
    "code": {"shift": 0.20, "request_sd": 0.40, "position_sd": 0.10},
    "math": {"shift": 0.40, "request_sd": 0.35, "position_sd": 0.10},
}

#: Spec-Bench categories used as chat prompts (math and coding belong to the other workloads).
CHAT_CATEGORIES = frozenset({
    "writing", "roleplay", "reasoning", "extraction", "stem", "humanities", "translation",
    "summarization", "qa", "rag",
})


@dataclass(frozen=True)
class TraceRow:
    row: int  # 1-based data row of the CSV (header excluded)
    t: float  # seconds since the first row of the trace
    context_tokens: int
    generated_tokens: int


def estimate_tokens(text: str) -> int:
    """The token estimate used for ``prompt_tokens``: characters / 4, rounded.

    The same rule as ``autotune.traffic.estimate_tokens`` (copied so the script stays a
    standalone record of how the files were made).
    """
    return max(1, round(len(text) / 4))


def novita_conditional() -> np.ndarray:
    """Conditional c_k = s_k / s_{k-1} of the novita rates, extended to the block of 8."""
    surv = np.array(NOVITA_SURVIVAL)
    cond = surv / np.concatenate(([1.0], surv[:-1]))
    return np.concatenate((cond, cond[-1:].repeat(BLOCK - cond.size)))


def read_trace(path: Path) -> list[TraceRow]:
    rows: list[TraceRow] = []
    start: datetime | None = None
    with path.open(newline="", encoding="utf-8") as fh:
        for i, rec in enumerate(csv.DictReader(fh), start=1):
            # 7 fractional digits: Python parses at most 6, the 7th (100 ns) is dropped.
            stamp = datetime.strptime(rec["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f")
            start = start or stamp
            rows.append(TraceRow(i, (stamp - start).total_seconds(),
                                 int(rec["ContextTokens"]), int(rec["GeneratedTokens"])))
    return rows


def read_prompts(data: Path) -> dict[str, list[tuple[str, str]]]:
    """Per workload: (source id, prompt text) pairs."""
    pools: dict[str, list[tuple[str, str]]] = {"chat": [], "code": [], "math": []}
    with (data / "prompts" / "spec_bench_question.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if rec["category"] in CHAT_CATEGORIES:
                pools["chat"].append((f"spec_bench:{rec['question_id']}", rec["turns"][0]))
    with (data / "prompts" / "humaneval.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            pools["code"].append((f"humaneval:{rec['task_id']}", rec["prompt"]))
    with (data / "prompts" / "gsm8k_test.jsonl").open(encoding="utf-8") as fh:
        for i, line in enumerate(fh, start=1):
            pools["math"].append((f"gsm8k:{i}", json.loads(line)["question"]))
    return pools


def pick_prompt(pool: Sequence[tuple[str, str]], lengths: np.ndarray, quantile: float,
                rng: np.random.Generator) -> tuple[str, str]:
    """The prompt at the same length quantile as the trace request (one of the 3 nearest)."""
    target = float(np.quantile(lengths, quantile))
    nearest = np.argsort(np.abs(lengths - target), kind="stable")[:3]
    return pool[int(nearest[rng.integers(nearest.size)])]


def acceptance(workload: str, base_logit: np.ndarray, rng: np.random.Generator) -> list[float]:
    prof = PROFILES[workload]
    logit = (base_logit + prof["shift"] + rng.normal(0.0, prof["request_sd"])
             + rng.normal(0.0, prof["position_sd"], size=BLOCK))
    cond = 1.0 / (1.0 + np.exp(-logit))
    return [round(float(c), 3) for c in np.clip(cond, 0.0, 1.0)]


def build(data: Path, requests: int, start_s: float, seed: int) -> list[dict[str, object]]:
    trace = read_trace(data / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv")
    all_ctx = np.sort(np.array([r.context_tokens for r in trace], dtype=float))
    window = [r for r in trace if r.t >= start_s][:requests]
    if len(window) < requests:
        raise SystemExit(f"only {len(window)} trace rows after {start_s} s; lower --start-s")
    pools = read_prompts(data)
    lengths = {w: np.array([estimate_tokens(p) for _, p in pool], dtype=float)
               for w, pool in pools.items()}
    cond = novita_conditional()
    base_logit = np.log(cond / (1.0 - cond))
    rng = np.random.default_rng(seed)
    names = list(WORKLOAD_SHARES)
    shares = np.array([WORKLOAD_SHARES[n] for n in names])
    t0 = window[0].t
    out: list[dict[str, object]] = []
    for rec in window:
        workload = names[int(rng.choice(len(names), p=shares))]
        quantile = float(np.searchsorted(all_ctx, rec.context_tokens, side="right")) / all_ctx.size
        _, prompt = pick_prompt(pools[workload], lengths[workload], min(quantile, 1.0), rng)
        out.append({
            "id": f"azconv-{rec.row}",
            "arrival_s": round(rec.t - t0, 4),
            "workload": workload,
            "prompt_tokens": estimate_tokens(prompt),
            "output_tokens": rec.generated_tokens,
            "temperature": 0.0,
            "acceptance": acceptance(workload, base_logit, rng),
            "prompt": prompt,
        })
    return out


def write(rows: Sequence[dict[str, object]], path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, separators=(", ", ": ")) + "\n")
    os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    ap.add_argument("--requests", type=int, default=1000, help="requests in the sample")
    ap.add_argument("--start-s", type=float, default=1200.0,
                    help="window start, seconds after the trace's first request")
    ap.add_argument("--seed", type=int, default=20231116)
    ap.add_argument("--out", type=Path, default=REPO / "examples" / "sample.jsonl")
    args = ap.parse_args(argv)
    rows = build(args.data, args.requests, args.start_s, args.seed)
    write(rows, args.out)
    counts = {w: sum(1 for r in rows if r["workload"] == w) for w in WORKLOAD_SHARES}
    print(f"wrote {len(rows)} requests to {args.out} "
          f"({args.out.stat().st_size:,} bytes, span {rows[-1]['arrival_s']} s): {counts}")


if __name__ == "__main__":
    main()
