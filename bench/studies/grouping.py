"""Automatic grouping on samples with known sources: purity, groups, and what merging costs.

Each case is an unlabelled sample built from the shared data whose requests come from known
sources. Lengths are real (the Azure LLM inference traces, the Mooncake conversation trace);
acceptance predictions come from the simulator's per-benchmark priors (its confidence-head
generator, ``autotune.backends.sim.generate_requests``) for the prompt sets' benchmarks: chat
(Spec-Bench-like), HumanEval, GSM8K, LiveCodeBench.

- ``3src-same-len``: chat / humaneval / gsm8k acceptance, lengths from ONE distribution (the
  Azure code trace, which has no length structure);
- ``3src-same-len-lcb``: chat / livecodebench / gsm8k, likewise (LiveCodeBench's curve falls
  fast: its best window is short);
- ``2src-same-acc``: gsm8k acceptance for both, Azure code vs Azure conversation lengths;
- ``1src``: chat acceptance, Azure code lengths;
- ``real-mix``: Mooncake lengths + chat, Azure code lengths + humaneval, Azure conversation
  lengths + gsm8k.

Per case: purity (share of requests in their group's majority source), the number of groups,
and the loss of tuning the merged traffic instead of the true groups, judged by the simulator
(kimi-k2.6 + DSpark) at fixed batching (``--seqs`` sequences in flight, closed loop, 8192
batched tokens, windows 1..7, output tokens/s): per true group, 1 - thr(window best for the
merged traffic) / thr(its own best window); in total, the share of serving time lost. "found"
is the same for the grouping's windows: each found group is tuned on its own traffic and each
true group served at the window of the found group holding most of it.

    .venv/bin/python -m bench.studies.grouping            # table
    .venv/bin/python -m bench.studies.grouping --json     # JSON only
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.paths import shared_data

WINDOWS = range(1, 8)


def azure(data: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    with (data / "azure_llm_2023" / f"AzureLLMInferenceTrace_{name}.csv").open() as f:
        rows = list(csv.DictReader(f))
    return (np.array([int(r["ContextTokens"]) for r in rows]),
            np.array([max(1, int(r["GeneratedTokens"])) for r in rows]))


def mooncake(data: Path) -> tuple[np.ndarray, np.ndarray]:
    with (data / "mooncake_fast25" / "conversation_trace.jsonl").open() as f:
        rows = [json.loads(line) for line in f]
    return (np.array([r["input_length"] for r in rows]),
            np.array([max(1, r["output_length"]) for r in rows]))


def build(sources: list[tuple[str, str]], n: int, seed: int,
          lengths: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[list[Any], list[str]]:
    """Unlabelled requests of (name, prior, lengths key) sources, shuffled, and the truth."""
    from autotune.backends.sim import generate_requests

    rng = np.random.default_rng(seed)
    requests: list[Any] = []
    truth: list[str] = []
    for i, (prior, key) in enumerate(sources):
        prompt, output = lengths[key]
        rows = rng.choice(len(prompt), n, replace=False)
        p = np.minimum(prompt[rows], 16000)
        o = np.minimum(output[rows], 20000 - 16 - p)
        name = f"{prior}@{key}"
        for r in generate_requests(n, workload=prior, seed=seed + i, prompt_tokens=p,
                                   output_tokens=o, id_prefix=f"{name}-"):
            requests.append(replace(r, workload=None))
            truth.append(name)
    order = rng.permutation(len(requests))
    return [requests[i] for i in order], [truth[i] for i in order]


def throughputs(requests: list[Any], seqs: int) -> np.ndarray:
    from autotune.backends.sim import SimBackend, load_profile
    from autotune.types import ReplaySchedule, ServeSpec, Slo, TrialConfig

    serve = ServeSpec(model="m", draft_model=None, method="dspark", draft_block_size=8,
                      max_model_len=20000)
    backend = SimBackend(serve, load_profile("kimi-k2.6@8xH200-tp8"), "dspark", 0)
    out = []
    for n in WINDOWS:
        replica = backend.start(TrialConfig(n, False, seqs, 8192))
        m = replica.replay(ReplaySchedule(requests, mode="closed", concurrency=seqs, seed=0))
        out.append(m.summary(Slo())["output_tokens_per_s"])
    return np.array(out)


def purity(labels: list[str], truth: list[str]) -> float:
    best: dict[str, int] = {}
    for (group, _), count in Counter(zip(labels, truth, strict=True)).items():
        best[group] = max(best.get(group, 0), count)
    return sum(best.values()) / len(truth)


def run_case(name: str, requests: list[Any], truth: list[str], seqs: int) -> dict[str, Any]:
    from autotune.traffic.grouping import group_requests

    t0 = time.perf_counter()
    grouping = group_requests(requests, seed=0)
    group_s = time.perf_counter() - t0
    labels = [r.workload or "" for r in grouping.requests]
    by_truth: dict[str, list[Any]] = {}
    by_found: dict[str, list[Any]] = {}
    for r, t, lab in zip(requests, truth, labels, strict=True):
        by_truth.setdefault(t, []).append(r)
        by_found.setdefault(lab, []).append(r)
    merged = throughputs(requests, seqs)
    n_merged = int(merged.argmax())
    per_group: dict[str, dict[str, Any]] = {}
    per_group_thr: dict[str, np.ndarray] = {}
    t_true = t_merged = 0.0
    for t, reqs in sorted(by_truth.items()):
        thr = per_group_thr[t] = throughputs(reqs, seqs)
        tokens = sum(r.output_tokens for r in reqs)
        t_true += tokens / thr.max()
        t_merged += tokens / thr[n_merged]
        per_group[t] = {"requests": len(reqs), "best_window": int(thr.argmax()) + 1,
                        "loss_at_merged_window": round(1 - thr[n_merged] / thr.max(), 4)}
    # The grouping's windows: each found group tuned on its own traffic; each true group is
    # then served at the window of the found group holding most of it (same replays as above,
    # so batching effects of regrouping do not enter).
    found_window = {f: (int(throughputs(reqs, seqs).argmax()) if len(by_found) > 1
                        else n_merged) for f, reqs in by_found.items()}
    t_found = 0.0
    for t, reqs in sorted(by_truth.items()):
        home = Counter(lab for lab, tt in zip(labels, truth, strict=True) if tt == t)
        window = found_window[home.most_common(1)[0][0]]
        thr = per_group_thr[t]
        t_found += sum(r.output_tokens for r in reqs) / thr[window]
        per_group[t]["found_window"] = window + 1
    return {"case": name, "requests": len(requests), "sources": len(by_truth),
            "groups": grouping.k, "names": sorted(set(labels)),
            "purity": round(purity(labels, truth), 3),
            "purity_one_group": round(max(Counter(truth).values()) / len(truth), 3),
            "merged_window": n_merged + 1,
            "loss_merged": round(1 - t_true / t_merged, 4),
            "loss_found": round(1 - t_true / t_found, 4),
            "true_groups": per_group, "group_s": round(group_s, 2),
            "acceptance": list(grouping.acceptance)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.studies.grouping",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print JSON only")
    ap.add_argument("--data", type=Path, default=shared_data(), help="shared data folder")
    ap.add_argument("--per-source", type=int, default=800, help="requests per source")
    ap.add_argument("--seqs", type=int, default=64, help="sequences in flight (judge)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    lengths = {"azure-code": azure(args.data, "code"), "azure-conv": azure(args.data, "conv"),
               "mooncake": mooncake(args.data)}
    cases = {
        "3src-same-len": [("chat", "azure-code"), ("humaneval", "azure-code"),
                          ("gsm8k", "azure-code")],
        "3src-same-len-lcb": [("chat", "azure-code"), ("livecodebench", "azure-code"),
                              ("gsm8k", "azure-code")],
        "2src-same-acc": [("gsm8k", "azure-code"), ("gsm8k", "azure-conv")],
        "1src": [("chat", "azure-code")],
        "real-mix": [("chat", "mooncake"), ("humaneval", "azure-code"),
                     ("gsm8k", "azure-conv")],
    }
    results = []
    for name, sources in cases.items():
        n = args.per_source * (3 if len(sources) == 1 else 1)
        requests, truth = build(sources, n, args.seed, lengths)
        results.append(run_case(name, requests, truth, args.seqs))
        if not args.json:
            r = results[-1]
            print(f"{r['case']:18} n={r['requests']:5} sources={r['sources']} "
                  f"groups={r['groups']} purity={r['purity']:.3f} (one group "
                  f"{r['purity_one_group']:.3f}) merged n={r['merged_window']} "
                  f"loss merged={r['loss_merged']:+.2%} found={r['loss_found']:+.2%} "
                  f"best windows {[g['best_window'] for g in r['true_groups'].values()]} "
                  f"grouping {r['group_s']:.1f}s", flush=True)
    out = {"judge": {"profile": "kimi-k2.6@8xH200-tp8", "drafter": "dspark",
                     "max_num_seqs": args.seqs, "max_num_batched_tokens": 8192,
                     "windows": list(WINDOWS), "metric": "output tokens/s, closed loop"},
           "cases": results}
    print(json.dumps(out, indent=None if not args.json else 1))


if __name__ == "__main__":
    main()
