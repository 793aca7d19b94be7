"""A store filled with one finished run that looks like a real tuning pass.

Trial metrics follow a small analytic model of a speculative-decoding replica (tokens per step
from a geometric acceptance curve, step time growing with window and batch), so throughput,
p99 ITL, goodput and the SLO constraints relate to each other the way a real run's do. The SLO
bounds and the trial set are inputs the tests check the report against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune.store import Store
from autotune.types import TrialConfig

ITL_SLO_MS = 40.0
TTFT_SLO_MS = 3000.0
BASELINE = {"num_speculative_tokens": 7, "enable_adaptive_verification": False,
            "max_num_seqs": 1024, "max_num_batched_tokens": 8192}
#: workload -> conditional acceptance c (same at every position) of the toy model
WORKLOADS = {"chat": 0.72, "code": 0.84, "math": 0.9}
PARAMS = [  # (n, adaptive, max_num_seqs, max_num_batched_tokens), trial numbers 1..
    (3, False, 8, 4096), (5, True, 32, 8192), (2, False, 64, 2048), (7, True, 8, 16384),
    (4, False, 128, 8192), (5, False, 1, 4096), (6, True, 64, 8192), (3, True, 256, 16384),
    (4, True, 32, 4096),
]
FAILED_NUMBER = 10


def toy_metrics(c: float, n: int, adaptive: bool, seqs: int, tokens: int) -> dict[str, Any]:
    survival = [c ** k for k in range(1, n + 1)]
    per_step = 1.0 + sum(survival)
    batch = min(seqs, 48)
    step_s = 0.020 + 0.0013 + 0.00004 * n + 0.0005 * batch * (1 + n) ** 0.5 \
        - (0.002 if adaptive else 0.0) + 2e-8 * tokens
    tok_s = batch * per_step / step_s
    itl_p99 = 1000.0 * step_s / per_step * (1.6 + 0.04 * n)
    ttft_p99 = 400.0 + 12.0 * batch + tokens / 40.0
    goodput = tok_s / 180.0 * (1.0 if itl_p99 <= ITL_SLO_MS else 0.35)
    return {
        "requests": 240, "failed_requests": 0, "output_tokens_per_s": tok_s,
        "requests_per_s": tok_s / 180.0, "goodput": goodput, "itl_p50_ms": itl_p99 / 1.6,
        "itl_p90_ms": itl_p99 / 1.2, "itl_p99_ms": itl_p99, "ttft_p50_ms": ttft_p99 / 3,
        "ttft_p90_ms": ttft_p99 / 1.5, "ttft_p99_ms": ttft_p99, "e2e_p99_ms": 9000.0,
        "acceptance_rate": sum(survival) / n, "mean_accepted_length": per_step,
        "per_position_acceptance": survival,
        "constraints": {"itl_p99_ms": itl_p99 - ITL_SLO_MS, "ttft_p99_ms": ttft_p99 - TTFT_SLO_MS},
    }


@dataclass
class FilledRun:
    store: Store
    run_id: str
    #: workload -> list of (number, params, metrics or None for failed, is_baseline)
    trials: dict[str, list[tuple[int, dict[str, Any], dict[str, Any] | None, bool]]] = \
        field(default_factory=dict)
    trial_ids: dict[tuple[str, int], int] = field(default_factory=dict)
    recommended: dict[str, int] = field(default_factory=dict)  # workload -> trial number


def fill_run(store: Store, *, sample_path: str = "examples/sample.jsonl",
             workloads: dict[str, float] | None = None, status: str = "finished",
             sha: str = "a" * 64) -> FilledRun:
    workloads = workloads or WORKLOADS
    sid = store.record_sample(path=sample_path, sha256=sha, size_bytes=1234,
                              requests=1000, skipped_lines=0,
                              workloads={w: {"requests": 300} for w in workloads})
    rid = store.create_run(backend="sim", policy_name="kimi-k2.6-default",
                           policy_sha256="b" * 64, policy={}, sample_id=sid, seed=0)
    filled = FilledRun(store, rid)
    for w, c in workloads.items():
        rows: list[tuple[int, dict[str, Any], dict[str, Any] | None, bool]] = []
        configs = [(0, BASELINE, True)] + [
            (i + 1, {"num_speculative_tokens": n, "enable_adaptive_verification": a,
                     "max_num_seqs": s, "max_num_batched_tokens": t}, False)
            for i, (n, a, s, t) in enumerate(PARAMS)]
        for number, params, is_base in configs:
            m = toy_metrics(c, params["num_speculative_tokens"],
                            params["enable_adaptive_verification"], params["max_num_seqs"],
                            params["max_num_batched_tokens"])
            feasible = all(v <= 0 for v in m["constraints"].values())
            tid = store.record_trial(run_id=rid, workload=w, number=number, state="complete",
                                     params=params, is_baseline=is_base, value=m["goodput"],
                                     feasible=feasible, metrics=m,
                                     acceptance_rate=m["acceptance_rate"])
            rows.append((number, params, m, is_base))
            filled.trial_ids[(w, number)] = tid
        failed = {"num_speculative_tokens": 7, "enable_adaptive_verification": True,
                  "max_num_seqs": 256, "max_num_batched_tokens": 16384}
        filled.trial_ids[(w, FAILED_NUMBER)] = store.record_trial(
            run_id=rid, workload=w, number=FAILED_NUMBER, state="failed", params=failed,
            error="replica ran out of KV cache blocks")
        rows.append((FAILED_NUMBER, failed, None, False))
        filled.trials[w] = rows
        feasible_rows = [r for r in rows if r[2] is not None
                         and all(v <= 0 for v in r[2]["constraints"].values())]
        number, params, m, _ = max(feasible_rows, key=lambda r: r[2]["goodput"])  # type: ignore[index]
        assert m is not None
        base_m = rows[0][2]
        assert base_m is not None
        n = params["num_speculative_tokens"]
        predicted = [min(1.0, (c + 0.05) ** k) for k in range(1, n + 1)]  # overconfident head
        store.add_recommendation(
            workload=w, config=TrialConfig.from_dict(params),
            speculative_config={"method": "dspark", "model": "novita/kimi-k2.6-dspark",
                                "num_speculative_tokens": params["num_speculative_tokens"]},
            serve={"model": "moonshotai/Kimi-K2.6"}, objective="goodput", value=m["goodput"],
            baseline_value=base_m["goodput"], run_id=rid, trial_id=filled.trial_ids[(w, number)],
            backend="sim", promote=True, reason="first recommendation for this workload",
            provenance={
                "backend": "sim", "model": "moonshotai/Kimi-K2.6",
                "draft_model": "novita/kimi-k2.6-dspark", "method": "dspark",
                "hardware": "kimi-k2.6@8xH200-tp8", "vllm_version": None,
                "traffic": {"path": sample_path, "sha256": sha, "requests": 1000},
                "policy": {"name": "kimi-k2.6-default", "sha256": "b" * 64}, "run": rid,
                "seed": 0, "trials": len(rows), "feasible": True,
                "acceptance": {"predicted_per_position": predicted,
                               "measured_per_position": m["per_position_acceptance"],
                               "predicted_tokens_per_step": 1 + sum(predicted),
                               "measured_tokens_per_step": m["mean_accepted_length"]}})
        filled.recommended[w] = number
    if status != "running":
        store.set_run_status(rid, status)
    return filled
