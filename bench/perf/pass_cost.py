"""What the default pass costs on real replicas (issue 37's closing note): replica-hours,
GPU-hours and trials of ``autotune start --once`` with the default policy, on
``examples/sample.jsonl`` and on a long-prompt sample, for any checkout of autotune.

The pass runs as the CLI of the checkout given (``--repo``: this one by default, or an export
of an older commit, to compare before and after), on the simulator, in one process
(``--replicas 1``), into a fresh SQLite database; its trials are read back with
``autotune trials --format json``. The cost is read two ways:

- ``recorded``: the ``cost_*`` metrics the pass stored (absent on a checkout that predates
  them): each trial's charged server start plus the replica time of its readings (``busy_s``);
- ``replayed``: the same rule rebuilt from what every checkout stores, so before and after
  compare on one footing: a server start per trial (the profile's start time; a checkout that
  shares starts is credited only where its trials say they reused a server) plus the measured
  window of each reading (``replay{i}_duration_s``, which leaves out warm-up and drain).

The long-prompt sample is Mooncake-like (kvcache-ai/Mooncake FAST'25 conversation trace,
Kimi production): the prompt and output lengths of its requests with 5,000-16,000 prompt
tokens (p50 about 9k), 200 requests for each of three workloads (chat, code, math) arriving
at 1 request/s each (Poisson), with the simulator's confidence-head predictions
(:func:`autotune.backends.sim.generate_requests`).

    .venv/bin/python -m bench.perf.pass_cost --sample examples/sample.jsonl --label after
    .venv/bin/python -m bench.perf.pass_cost --long-prompt --repo /tmp/main --label before
    .venv/bin/python -m bench.perf.pass_cost --summarise DB_URL --label before   # a pass's DB
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.paths import REPO, RESULTS, shared_data

#: Where the results go: one JSON object per measured pass, appended.
OUT = RESULTS / "pass-cost" / "pass-cost.jsonl"
#: The Mooncake trace the long-prompt sample draws its lengths from.
MOONCAKE = Path("mooncake_fast25") / "conversation_trace.jsonl"
PROMPT_RANGE = (5000, 16000)
WORKLOADS = ("chat", "code", "math")
#: The reused-server source a trial records (autotune.orchestrate.servers.REUSED starts so).
REUSED_PREFIX = "reused"


def long_prompt_sample(out: Path, per_workload: int = 200, rate: float = 1.0,
                       seed: int = 0) -> Path:
    """Write the long-prompt sample (see the module doc) to ``out``."""
    from autotune.backends.sim import generate_requests

    rows = []
    with (shared_data() / MOONCAKE).open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if PROMPT_RANGE[0] <= row["input_length"] <= PROMPT_RANGE[1]:
                rows.append(row)
            if len(rows) == per_workload * len(WORKLOADS):
                break
    lines: list[tuple[float, dict[str, Any]]] = []
    for k, name in enumerate(WORKLOADS):
        mine = rows[k::len(WORKLOADS)]
        for r in generate_requests(
                len(mine), workload=name, seed=seed + k, rate=rate,
                prompt_tokens=[x["input_length"] for x in mine],
                output_tokens=[max(1, x["output_length"]) for x in mine]):
            lines.append((r.arrival_s or 0.0, {
                "id": r.id, "arrival_s": r.arrival_s, "workload": name,
                "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
                "acceptance": list(r.acceptance or ())}))
    lines.sort(key=lambda pair: pair[0])
    out.write_text("".join(json.dumps(d) + "\n" for _, d in lines), encoding="utf-8")
    return out


def _cli(repo: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(repo)}
    done = subprocess.run([sys.executable, "-m", "autotune.cli", *args], env=env, cwd=repo,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"autotune {' '.join(args)} failed ({done.returncode}): "
                           f"{done.stderr[-2000:]}")
    return done.stdout


def run_pass(repo: Path, traffic: Path, db_url: str, export_dir: Path) -> float:
    """``autotune start --once`` of ``repo`` on ``traffic``; its wall seconds."""
    t0 = time.perf_counter()
    _cli(repo, "start", "--traffic", str(traffic), "--once", "--db", db_url, "--replicas", "1",
         "--export-dir", str(export_dir))
    return time.perf_counter() - t0


def _replay_windows(metrics: Mapping[str, Any]) -> float:
    out, i = 0.0, 0
    while f"replay{i}_duration_s" in metrics:
        out += float(metrics[f"replay{i}_duration_s"] or 0.0)
        i += 1
    if i == 0:  # a single reading (no capacity search)
        out = float(metrics.get("duration_s") or 0.0)
    return out


def summarise(trials: Sequence[Mapping[str, Any]], runs: Sequence[Mapping[str, Any]],
              start_s: float, gpus: int) -> dict[str, Any]:
    """The pass's trials and cost, ``recorded`` and ``replayed`` (module doc)."""
    recorded = {"start_s": 0.0, "replay_s": 0.0, "gpu_h": 0.0, "starts": 0, "trials": 0}
    replayed = {"start_s": 0.0, "replay_s": 0.0, "starts": 0}
    per_workload: dict[str, int] = {}
    for t in trials:
        m = t.get("metrics") or {}
        per_workload[t["workload"]] = per_workload.get(t["workload"], 0) + 1
        if "cost_start_s" in m:
            recorded["trials"] += 1
            recorded["start_s"] += float(m["cost_start_s"])
            recorded["replay_s"] += float(m["cost_replay_s"])
            recorded["gpu_h"] += float(m["cost_gpu_h"])
            recorded["starts"] += float(m["cost_start_s"]) > 0
        reused = str(m.get("cost_start_source", "")).startswith(REUSED_PREFIX)
        replayed["start_s"] += 0.0 if reused else start_s
        replayed["starts"] += 0 if reused else 1
        replayed["replay_s"] += _replay_windows(m)
    out: dict[str, Any] = {"trials": len(trials), "trials_per_workload": per_workload}
    rh = (replayed["start_s"] + replayed["replay_s"]) / 3600
    out["replayed"] = {**{k: round(v, 1) for k, v in replayed.items()},
                       "traffic_h": round(replayed["replay_s"] / 3600, 3),
                       "replica_h": round(rh, 3), "gpu_h": round(rh * gpus, 2)}
    if recorded["trials"]:
        rh = (recorded["start_s"] + recorded["replay_s"]) / 3600
        out["recorded"] = {**{k: round(v, 2) for k, v in recorded.items()},
                           "replica_h": round(rh, 3)}
    run = runs[0] if runs else {}
    out["budget_stop"] = run.get("budget_stop")
    out["run_cost"] = run.get("cost")
    return out


def measure(db_url: str, repo: Path, start_s: float, gpus: int) -> dict[str, Any]:
    trials = json.loads(_cli(repo, "trials", "--db", db_url, "--format", "json"))
    runs = json.loads(_cli(repo, "runs", "--db", db_url, "--format", "json"))
    return summarise(trials, runs, start_s, gpus)


def _commit(repo: Path) -> str | None:
    done = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=False)
    return done.stdout.strip() or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.pass_cost",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=REPO,
                        help="the autotune checkout whose CLI runs the pass (default: this one)")
    parser.add_argument("--sample", type=Path, default=REPO / "examples" / "sample.jsonl")
    parser.add_argument("--long-prompt", action="store_true",
                        help="run on the long-prompt sample (built into the work folder)")
    parser.add_argument("--summarise", metavar="DB_URL",
                        help="read the pass already stored in this database; run nothing")
    parser.add_argument("--label", default="", help="before / after (kept in the result)")
    parser.add_argument("--note", default=None,
                        help="kept in the result (e.g. that the pass was stopped part-way)")
    parser.add_argument("--commit", default=None, help="the checkout's commit, when --repo "
                                                        "is an export without git")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--work", type=Path, default=None,
                        help="keep the sample and the pass's database here (default: a "
                             "temporary folder)")
    args = parser.parse_args(argv)

    from autotune.backends.sim import load_profile
    from autotune.policy import load_policy

    policy = load_policy()
    profile = load_profile(policy.sim.profile)
    start_s = profile.start.seconds if profile.start is not None else 0.0
    gpus = policy.gpus_per_replica
    with tempfile.TemporaryDirectory(prefix="autotune-pass-cost-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        sample = long_prompt_sample(work / "long-prompt.jsonl") \
            if args.long_prompt and not args.summarise else args.sample.resolve()
        wall = None
        db_url = args.summarise or f"sqlite:///{work / 'pass.db'}"
        if not args.summarise:
            wall = run_pass(args.repo.resolve(), sample, db_url, work / "exports")
        result = measure(db_url, args.repo.resolve(), start_s, gpus)
    result = {"label": args.label, "sample": "long-prompt" if args.long_prompt
              else str(args.sample), "note": args.note, **result,
              "start_s_per_server": start_s, "gpus_per_replica": gpus, "pass_wall_s": wall,
              "manifest": {"commit": args.commit or _commit(args.repo), "machine":
                           platform.node(), "python": platform.python_version(),
                           "command": "python -m bench.perf.pass_cost "
                                      + " ".join(argv if argv is not None else sys.argv[1:]),
                           "at": datetime.now(UTC).isoformat(timespec="seconds")}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a", encoding="utf-8") as f:
        f.write(json.dumps(result) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
