"""Derive step-time tables for the simulator's table cost law from a roofline.

No H100, L40S or MI300X is at hand, so these tables are *derived*, not measured, and from a physics
deliberately unlike the simulator's analytic law and the guided search's predictor (both sum
independent parts): a roofline, where one forward takes the larger of its memory time and its
compute time, plus the tensor-parallel all-reduces and a per-step scheduler/sampler overhead.
The simulator's table law then adds CUDA-graph padding (the graph_buckets below) when it looks
a step up.

Four recipes, each a target with its EAGLE-3 drafter on one GPU kind:

``llama-3.1-70b@4xH100-tp4`` (per GPU of the TP4 group):
- H100 SXM: 3.35 TB/s HBM3, 989 TFLOP/s dense BF16 (NVIDIA H100 datasheet), NVLink 4 at
  450 GB/s per direction;
- Llama-3.1-70B (config.json): 80 layers, hidden 8192, 64 query / 8 KV heads of 128, MLP 28672,
  vocab 128256, 70.6 B parameters = 141 GB in bf16 -> 35.3 GB per GPU;
  KV cache 2 x 80 x 8 x 128 x 2 B = 320 KB per token -> 80 KB per GPU;
- EAGLE-3 drafter: one Llama-70B decoder layer (0.86 B), the 3 x 8192 -> 8192 fusion layer
  (0.2 B) and a 32k-token draft lm_head (0.26 B): ~1.32 B parameters, 2.6 GB in bf16.

``llama-3.1-8b@1xL40S`` (one GPU, no tensor parallelism, so no all-reduce):
- L40S: 864 GB/s GDDR6, 362 TFLOP/s dense BF16, 48 GB (NVIDIA L40S datasheet);
- Llama-3.1-8B (config.json): 32 layers, hidden 4096, 32 query / 8 KV heads of 128, MLP 14336,
  vocab 128256, 8.03 B parameters = 16.06 GB in bf16; KV cache 2 x 32 x 8 x 128 x 2 B = 128 KB
  per token;
- EAGLE-3 drafter (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B): one decoder layer whose attention
  reads the 2 x 4096 concatenation (q 8192 x 4096, k and v 8192 x 1024, o 4096 x 4096) with a
  14336 MLP (0.26 B), the 3 x 4096 -> 4096 fusion layer (0.05 B) and a 32k-token draft lm_head
  (0.13 B): ~0.44 B parameters, 0.88 GB in bf16.

``llama-3.1-8b@1xH100``: the same model and drafter on one H100 SXM (the facts above), no
tensor parallelism.

``llama-3.1-70b@1xMI300X``: the 70B model and drafter above on one AMD Instinct MI300X
(5.3 TB/s HBM3, 1307 TFLOP/s dense BF16, 192 GB; AMD's MI300X datasheet), whose 192 GB hold
the whole bf16 model, so no tensor parallelism; vLLM on ROCm with HIP graphs of the same
capture sizes assumed.

Assumptions (stated, uncertain, the same for all): 80% of peak memory bandwidth, 60% of peak
BF16 FLOP/s, an all-reduce of 6 us latency plus 1.5 x the bytes at 70% of NVLink bandwidth, two
all-reduces per layer, and 1.5 ms + 0.5 us per token of scheduler, sampler and launch overhead
per step (0.15 ms per drafter forward).

    python -m bench.calibration.roofline_table      # rewrites every recipe's table by the profiles
    python -m bench.calibration.roofline_table --recipe llama-3.1-8b@1xL40S
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.paths import REPO

#: Where the simulator's shipped step-time tables live (this checkout's).
TABLES = REPO / "autotune/backends/sim/profiles/tables"

MEMORY_EFFICIENCY = 0.80
FLOPS_EFFICIENCY = 0.60
NVLINK_EFFICIENCY = 0.70
ALLREDUCE_LATENCY_S = 6e-6

BATCH_TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
CONTEXT_TOKENS = [128, 512, 1024, 2048, 4096, 8192, 16384, 32768]
#: vLLM's CUDA-graph capture sizes: 1, 2, 4, then multiples of 8 (here up to 512).
GRAPH_BUCKETS = [1, 2, 4, *range(8, 513, 8)]


@dataclass(frozen=True)
class Network:
    """One decoder stack as a forward sees it (whole model, before tensor parallelism)."""

    weight_bytes: float
    flops_per_token: float
    layers: int
    kv_heads: int
    query_heads: int
    head_dim: int
    overhead_s: float
    overhead_per_token_s: float


@dataclass(frozen=True)
class Model:
    """A target and its drafter."""

    target_name: str
    drafter_name: str
    hidden: int
    target: Network
    drafter: Network


@dataclass(frozen=True)
class Gpu:
    """Peak figures of one GPU."""

    memory_bps: float        # memory bandwidth
    flops: float             # dense BF16 FLOP/s
    nvlink_bps: float = 0.0  # per direction (unused at tp 1)


@dataclass(frozen=True)
class Recipe:
    """A model on ``tp`` GPUs of one kind."""

    name: str
    hardware: str
    model: Model
    gpu: Gpu
    tp: int
    engine: str = "vLLM V1 with CUDA graphs"

    @property
    def out(self) -> Path:
        return TABLES / f"{self.name}-roofline.json"

    def _allreduce_s(self, tokens: int) -> float:
        if self.tp == 1:
            return 0.0
        return (ALLREDUCE_LATENCY_S
                + 1.5 * tokens * self.model.hidden * 2 / (self.gpu.nvlink_bps * NVLINK_EFFICIENCY))

    def forward_s(self, net: Network, tokens: int, context: int) -> float:
        """One forward of ``tokens`` tokens, each attending to ``context`` keys, on one GPU."""
        kv_bytes_per_key = 2 * net.layers * net.kv_heads * net.head_dim * 2 / self.tp
        attn_flops_per_key = 4 * net.head_dim * net.query_heads * net.layers / self.tp
        memory = ((net.weight_bytes / self.tp + tokens * context * kv_bytes_per_key)
                  / (self.gpu.memory_bps * MEMORY_EFFICIENCY))
        compute = (tokens * (net.flops_per_token / self.tp + context * attn_flops_per_key)
                   / (self.gpu.flops * FLOPS_EFFICIENCY))
        return (max(memory, compute) + 2 * net.layers * self._allreduce_s(tokens)
                + net.overhead_s + net.overhead_per_token_s * tokens)

    def table(self) -> dict[str, object]:
        def grid(net: Network) -> list[list[float]]:
            return [[round(1000.0 * self.forward_s(net, t, c), 4) for c in CONTEXT_TOKENS]
                    for t in BATCH_TOKENS]

        return {
            "engine": ("derived: roofline max(memory, compute)"
                       + (" + TP all-reduces" if self.tp > 1 else "")
                       + f" + step overhead (not measured; {self.engine} assumed)"),
            "hardware": self.hardware,
            "script": "bench/calibration/roofline_table.py",
            "model": {"target": self.model.target_name, "drafter": self.model.drafter_name,
                      "cell": "one forward of batch_tokens tokens each attending to "
                              "context_tokens keys"},
            "batch_tokens": BATCH_TOKENS,
            "context_tokens": CONTEXT_TOKENS,
            "target_step_ms": grid(self.model.target),
            "draft_step_ms": grid(self.model.drafter),
            "graph_buckets": GRAPH_BUCKETS,
        }


def _drafter(weight_bytes: float, params: float, query_heads: int) -> Network:
    """An EAGLE-3 head: one decoder layer of 8 KV heads of 128, one forward per position."""
    return Network(weight_bytes=weight_bytes, flops_per_token=2 * params, layers=1, kv_heads=8,
                   query_heads=query_heads, head_dim=128, overhead_s=0.15e-3,
                   overhead_per_token_s=0.0)


def _target(weight_bytes: float, params: float, layers: int, query_heads: int) -> Network:
    """A Llama decoder stack of 8 KV heads of 128, with the per-step overhead."""
    return Network(weight_bytes=weight_bytes, flops_per_token=2 * params, layers=layers,
                   kv_heads=8, query_heads=query_heads, head_dim=128, overhead_s=1.5e-3,
                   overhead_per_token_s=0.5e-6)


LLAMA_70B = Model("meta-llama/Llama-3.1-70B-Instruct (bf16)",
                  "EAGLE-3 head for Llama-3.3-70B-Instruct (bf16)", 8192,
                  _target(141e9, 70.6e9, 80, 64), _drafter(2.64e9, 1.32e9, 64))
LLAMA_8B = Model("meta-llama/Llama-3.1-8B-Instruct (bf16)",
                 "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B (bf16)", 4096,
                 _target(16.06e9, 8.03e9, 32, 32), _drafter(0.88e9, 0.44e9, 32))
H100 = Gpu(3.35e12, 989e12, 450e9)
L40S = Gpu(864e9, 362e12)
MI300X = Gpu(5.3e12, 1307e12)

RECIPES = {r.name: r for r in (
    Recipe("llama-3.1-70b@4xH100-tp4", "4x NVIDIA H100 SXM 80GB, tensor parallel 4",
           LLAMA_70B, H100, tp=4),
    Recipe("llama-3.1-8b@1xL40S", "1x NVIDIA L40S 48GB (GDDR6), no tensor parallelism",
           LLAMA_8B, L40S, tp=1),
    Recipe("llama-3.1-8b@1xH100", "1x NVIDIA H100 SXM 80GB, no tensor parallelism",
           LLAMA_8B, H100, tp=1),
    Recipe("llama-3.1-70b@1xMI300X", "1x AMD Instinct MI300X 192GB, no tensor parallelism",
           LLAMA_70B, MI300X, tp=1,
           engine="vLLM V1 on ROCm with HIP graphs of CUDA's capture sizes"),
)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.calibration.roofline_table",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", choices=sorted(RECIPES), action="append",
                        help="write only this recipe's table (repeatable; default: all)")
    args = parser.parse_args(argv)
    for name in args.recipe or sorted(RECIPES):
        recipe = RECIPES[name]
        recipe.out.parent.mkdir(parents=True, exist_ok=True)
        recipe.out.write_text(json.dumps(recipe.table(), indent=1) + "\n", encoding="utf-8")
        print(f"wrote {recipe.out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
