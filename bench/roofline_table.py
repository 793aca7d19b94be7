"""Derive a step-time table for Llama-3.1-70B-Instruct + EAGLE-3 on 4x H100 SXM (TP4).

No H100 is at hand, so this table is *derived*, not measured, and from a physics deliberately
unlike the simulator's analytic law and the guided search's predictor (both sum independent
parts): a roofline, where one forward takes the larger of its memory time and its compute time,
plus the tensor-parallel all-reduces and a per-step scheduler/sampler overhead. The simulator's
table law then adds CUDA-graph padding (the graph_buckets below) when it looks a step up.

Facts (per GPU of the TP4 group):
- H100 SXM: 3.35 TB/s HBM3, 989 TFLOP/s dense BF16 (NVIDIA H100 datasheet), NVLink 4 at
  450 GB/s per direction;
- Llama-3.1-70B (config.json): 80 layers, hidden 8192, 64 query / 8 KV heads of 128, MLP 28672,
  vocab 128256, 70.6 B parameters = 141 GB in bf16 -> 35.3 GB per GPU;
  KV cache 2 x 80 x 8 x 128 x 2 B = 320 KB per token -> 80 KB per GPU;
- EAGLE-3 drafter: one Llama-70B decoder layer (0.86 B), the 3 x 8192 -> 8192 fusion layer
  (0.2 B) and a 32k-token draft lm_head (0.26 B): ~1.32 B parameters, 2.6 GB in bf16.
Assumptions (stated, uncertain): 80% of peak HBM bandwidth, 60% of peak BF16 FLOP/s, an
all-reduce of 6 us latency plus 1.5 x the bytes at 70% of NVLink bandwidth, two all-reduces per
layer, and 1.5 ms + 0.5 us per token of scheduler, sampler and launch overhead per step
(0.15 ms per drafter forward).

    python bench/roofline_table.py            # rewrites the table file next to the profiles
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "autotune/backends/sim/profiles/tables/llama-3.1-70b@4xH100-tp4-roofline.json"

TP = 4
HBM_BPS = 3.35e12 * 0.80
FLOPS = 989e12 * 0.60
NVLINK_BPS = 450e9 * 0.70
ALLREDUCE_LATENCY_S = 6e-6
HIDDEN = 8192
LAYERS = 80

BATCH_TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
CONTEXT_TOKENS = [128, 512, 1024, 2048, 4096, 8192, 16384, 32768]
#: vLLM's CUDA-graph capture sizes: 1, 2, 4, then multiples of 8 (here up to 512).
GRAPH_BUCKETS = [1, 2, 4, *range(8, 513, 8)]


def _allreduce_s(tokens: int) -> float:
    return ALLREDUCE_LATENCY_S + 1.5 * tokens * HIDDEN * 2 / NVLINK_BPS


def forward_s(tokens: int, context: int, *, weight_bytes: float, flops_per_token: float,
              kv_bytes_per_key: float, attn_flops_per_key: float, layers: int,
              overhead_s: float, overhead_per_token_s: float) -> float:
    """One forward of ``tokens`` tokens, each attending to ``context`` keys, on one GPU."""
    memory = (weight_bytes + tokens * context * kv_bytes_per_key) / HBM_BPS
    compute = tokens * (flops_per_token + context * attn_flops_per_key) / FLOPS
    return (max(memory, compute) + 2 * layers * _allreduce_s(tokens) + overhead_s
            + overhead_per_token_s * tokens)


def target_s(tokens: int, context: int) -> float:
    return forward_s(tokens, context, weight_bytes=141e9 / TP, flops_per_token=2 * 70.6e9 / TP,
                     kv_bytes_per_key=2 * LAYERS * 8 * 128 * 2 / TP,
                     attn_flops_per_key=4 * 128 * 64 * LAYERS / TP, layers=LAYERS,
                     overhead_s=1.5e-3, overhead_per_token_s=0.5e-6)


def draft_s(tokens: int, context: int) -> float:
    return forward_s(tokens, context, weight_bytes=2.64e9 / TP, flops_per_token=2 * 1.32e9 / TP,
                     kv_bytes_per_key=2 * 1 * 8 * 128 * 2 / TP,
                     attn_flops_per_key=4 * 128 * 64 * 1 / TP, layers=1,
                     overhead_s=0.15e-3, overhead_per_token_s=0.0)


def table() -> dict[str, object]:
    def grid(f: object) -> list[list[float]]:
        return [[round(1000.0 * f(t, c), 4) for c in CONTEXT_TOKENS]  # type: ignore[operator]
                for t in BATCH_TOKENS]

    return {
        "engine": "derived: roofline max(memory, compute) + TP all-reduces + step overhead "
                  "(not measured; vLLM V1 with CUDA graphs assumed)",
        "hardware": "4x NVIDIA H100 SXM 80GB, tensor parallel 4",
        "script": "bench/roofline_table.py",
        "model": {"target": "meta-llama/Llama-3.1-70B-Instruct (bf16)",
                  "drafter": "EAGLE-3 head for Llama-3.3-70B-Instruct (bf16)",
                  "cell": "one forward of batch_tokens tokens each attending to "
                          "context_tokens keys"},
        "batch_tokens": BATCH_TOKENS,
        "context_tokens": CONTEXT_TOKENS,
        "target_step_ms": grid(target_s),
        "draft_step_ms": grid(draft_s),
        "graph_buckets": GRAPH_BUCKETS,
    }


def main() -> int:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(table(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
