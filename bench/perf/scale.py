"""Scale: a million-request sample, a store of 10,000 trials, a daemon of 200 passes.

Three parts, each stage in a child process of its own so that its peak RSS (``ru_maxrss`` from
``wait4``) is its own:

- **sample**: a generated 1,000,000-request sample, unlabelled (two kinds of traffic mixed, with
  acceptance predictions and Poisson arrivals), through ``autotune traffic inspect`` (which
  groups it), ``traffic inspect --no-group`` (streamed), the library's ``load_sample`` +
  grouping (request objects), ``read_workloads`` (columns; what a pass needs), and a simulator
  pass ``autotune start --once`` (2 trials a workload, one in-process replica).
  Target: peak RSS < 500 MB each.
- **store**: a database holding 1,000 runs and 10,000 trials (each with its per-request
  measurements at the default policy's 2,000 requests, like a real trial) and a recommendation
  a workload a run, written through the Store; then ``autotune recommendations``, ``trials``
  and ``export`` (and ``runs``) timed through the CLI, as a user runs them (a new process:
  median of 3) and in-process with click's CliRunner (median of 5, start-up excluded), next to
  the same commands on a database of one run. Target: < 1 s each.
- **daemon**: ``run_daemon`` for 200 passes on a small sample whose traffic alternates between
  two shapes (so every pass re-tunes), RSS read after each pass. Target: growth after the
  first 10 passes < 10 %.

    .venv/bin/python -m bench.perf.scale [--json] [--parts sample,store,daemon] [--requests N]
        [--runs N] [--trials-per-run N] [--passes N] [--db URL]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.paths import child_env

CLI = "from autotune.cli import main; main()"
TARGET_RSS_MB = 500
TARGET_LATENCY_S = 1.0
TARGET_GROWTH = 0.10


# ----------------------------------------------------------------------------- helpers
def run_stage(argv: Sequence[str], *, cwd: Path | None = None) -> dict[str, Any]:
    """Run ``argv`` as a child; its wall time, peak RSS (MB) and stdout."""
    env = child_env()
    env.pop("RAY_ADDRESS", None)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(argv), stdout=out, stderr=err, cwd=cwd, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            tail = err.read().decode(errors="replace")[-3000:]
            raise SystemExit(f"{' '.join(argv[:6])}... exited {proc.returncode}:\n{tail}")
        return {"wall_s": round(wall, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024.0, 1),
                "stdout": out.read().decode(errors="replace")}


def autotune(*args: str) -> list[str]:
    return [sys.executable, "-c", CLI, *args]


def child(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench.perf.scale", "--child", *args]


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


# ------------------------------------------------------------------------------ sample
def generate_sample(path: Path, count: int, seed: int) -> None:
    """``count`` unlabelled requests: 60 % short math-like, 40 % long code-like, interleaved."""
    from autotune.backends.sim import generate_requests

    rate = 50.0
    a = generate_requests(count, workload="gsm8k", seed=seed, rate=0.6 * rate)
    b = generate_requests(count, workload="humaneval", seed=seed + 1, rate=0.4 * rate)
    ra, rb = next(a), next(b)
    with path.open("w", encoding="utf-8") as f:
        for i in range(count):
            if (ra.arrival_s or 0.0) <= (rb.arrival_s or 0.0):
                r, ra = ra, next(a)
            else:
                r, rb = rb, next(b)
            f.write(json.dumps({"id": f"r{i}", "arrival_s": round(r.arrival_s or 0.0, 6),
                                "prompt_tokens": r.prompt_tokens,
                                "output_tokens": r.output_tokens,
                                "acceptance": [round(c, 4) for c in r.acceptance or ()]})
                    + "\n")


def grouping_child(path: Path) -> dict[str, Any]:
    from autotune.traffic.load import load_sample, split_workloads

    t0 = time.perf_counter()
    loaded = load_sample(path, max_acceptance=8, max_model_len=20000)
    t1 = time.perf_counter()
    groups = split_workloads(loaded.requests, seed=0)
    t2 = time.perf_counter()
    return {"load_s": round(t1 - t0, 2), "group_s": round(t2 - t1, 2),
            "groups": {k: len(v) for k, v in groups.items()}}


def lean_child(path: Path) -> dict[str, Any]:
    """What a pass holds of the sample with read_workloads: columns, not request objects."""
    from autotune.traffic.load import read_workloads

    t0 = time.perf_counter()
    loaded = read_workloads(path, max_requests=2000, max_acceptance=8, max_model_len=20000)
    return {"read_workloads_s": round(time.perf_counter() - t0, 2),
            "replayed": {k: len(w.replay) for k, w in loaded.workloads.items()}}


def part_sample(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    path = tmp / "million.jsonl"
    t0 = time.perf_counter()
    generate_sample(path, args.requests, args.seed)
    out: dict[str, Any] = {"requests": args.requests,
                           "sample_mb": round(path.stat().st_size / 2**20, 1),
                           "generate_s": round(time.perf_counter() - t0, 1)}
    inspect = run_stage(autotune("traffic", "inspect", str(path), "--format", "json"))
    rows = json.loads(inspect.pop("stdout"))
    out["inspect"] = {**inspect, "workloads": {r["workload"]: r["requests"] for r in rows}}
    streamed = run_stage(autotune("traffic", "inspect", str(path), "--format", "json",
                                  "--no-group"))
    streamed.pop("stdout")
    out["inspect_no_group"] = streamed
    grouping = run_stage(child("grouping", str(path)))
    figures = json.loads(grouping.pop("stdout"))
    out["load_sample_objects_and_group"] = {**grouping, **figures}
    lean = run_stage(child("lean", str(path)))
    figures = json.loads(lean.pop("stdout"))
    out["read_workloads"] = {**lean, **figures}
    db = f"sqlite:///{tmp / 'pass.db'}"
    sim_pass = run_stage(autotune("start", "--once", "--traffic", str(path), "--db", db,
                                  "--export-dir", str(tmp / "exports"), "--budget-trials", "2",
                                  "--replicas", "1", "--state-file", str(tmp / "state.json")),
                         cwd=tmp)
    sim_pass.pop("stdout")
    out["sim_pass"] = sim_pass
    stages = ("inspect", "inspect_no_group", "read_workloads", "sim_pass")
    out["target_rss_mb"] = TARGET_RSS_MB
    out["over_target"] = [s for s in stages if out[s]["peak_rss_mb"] >= TARGET_RSS_MB]
    # load_sample keeps an object per request: the library call, no longer what start uses
    out["for_reference"] = ["load_sample_objects_and_group"]
    return out


# ------------------------------------------------------------------------------- store
WORKLOADS = ("chat", "code", "math")


def fill_store(url: str, runs: int, trials_per_run: int, requests: int,
               seed: int) -> dict[str, Any]:
    """``runs`` finished runs of ``trials_per_run`` trials over the workloads, through the Store."""
    import numpy as np

    from autotune.policy import load_policy
    from autotune.store import Store

    rng = np.random.default_rng(seed)
    policy = load_policy(None)
    serve = policy.serve
    spec = serve.spec()
    configs = policy.space.configs()
    store = Store.open(url)
    t0 = time.perf_counter()
    sample_ids = [store.record_sample(
        path=f"/data/traffic/day-{i:03d}.jsonl", sha256=f"{i:064x}", size_bytes=10**8,
        requests=100_000, skipped_lines=0,
        workloads={w: {"requests": 30_000, "drift_reference": {"prompt_tokens": [1.0] * 200}}
                   for w in WORKLOADS}) for i in range(max(1, runs // 10))]
    per_request = {
        "ttft_s": [round(float(x), 6) for x in rng.gamma(2.0, 0.05, requests)],
        "tpot_s": [round(float(x), 6) for x in rng.gamma(4.0, 0.004, requests)],
        "e2e_s": [round(float(x), 6) for x in rng.gamma(2.0, 0.8, requests)],
        "output_tokens": [int(x) for x in rng.integers(1, 800, requests)],
        "ok": [True] * requests}
    metrics = {"requests": requests, "goodput": 1.6, "duration_s": 18.4, "ttft_p99_ms": 95.5,
               "itl_p99_ms": 59.5, "per_position_acceptance": [0.7, 0.5, 0.4, 0.33, 0.3],
               "acceptance": {"drafts": 1039, "accepted_per_pos": [723, 512, 422, 348, 308]},
               "constraints": {"ttft_p99_ms": -2904.4, "itl_p99_ms": -0.49}}
    for r in range(runs):
        run_id = store.create_run(backend="sim", policy_name=policy.name,
                                  policy_sha256=policy.sha256(),
                                  policy=policy.model_dump(mode="json"),
                                  sample_id=sample_ids[r % len(sample_ids)], seed=r,
                                  run_id=f"20261201-{r:06d}-bench")
        best: dict[str, tuple[int, float]] = {}
        for t in range(trials_per_run):
            workload = WORKLOADS[t % len(WORKLOADS)]
            config = configs[int(rng.integers(len(configs)))]
            value = float(rng.uniform(1.0, 5.0))
            tid = store.record_trial(
                run_id=run_id, workload=workload, number=t // len(WORKLOADS), state="complete",
                params=config.as_dict(), is_baseline=t < len(WORKLOADS), value=value,
                feasible=True, metrics={**metrics, "goodput": value}, acceptance_rate=0.39,
                per_request=per_request, replica="sim-0", node="bench")
            if value > best.get(workload, (0, 0.0))[1]:
                best[workload] = (tid, value)
        for workload, (tid, value) in best.items():
            config = configs[0]
            store.add_recommendation(
                workload=workload, config=config,
                speculative_config=spec.speculative_config(config),
                serve=serve.model_dump(mode="json"), objective="goodput", value=value,
                baseline_value=1.5, run_id=run_id, trial_id=tid, backend="sim",
                provenance={"model": serve.model, "run": run_id,
                            "window_schedule": [[1, 8, 7], [9, 64, 5]]},
                promote=True, reason="bench")
        store.set_run_status(run_id, "finished")
    return {"fill_s": round(time.perf_counter() - t0, 1), "runs": runs,
            "trials": runs * trials_per_run, "requests_per_trial": requests}


def _latency(url: str, commands: dict[str, list[str]], repeat_cold: int,
             repeat_warm: int) -> dict[str, dict[str, float]]:
    from click.testing import CliRunner

    from autotune.cli import cli

    out = {}
    for name, args in commands.items():
        argv = [*args, "--db", url]
        cold = [run_stage(autotune(*argv))["wall_s"] for _ in range(repeat_cold)]
        warm = []
        for _ in range(repeat_warm):
            t0 = time.perf_counter()
            res = CliRunner().invoke(cli, argv)
            warm.append(time.perf_counter() - t0)
            if res.exit_code != 0:
                raise SystemExit(f"{name}: {res.output[-2000:]}")
        out[name] = {"process_s": round(statistics.median(cold), 3),
                     "in_process_s": round(statistics.median(warm), 3)}
    return out


def part_store(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    url = args.db or f"sqlite:///{tmp / 'store.db'}"
    small = f"sqlite:///{tmp / 'one-run.db'}"
    filled = run_stage(child("fill", url, str(args.runs), str(args.trials_per_run),
                             str(args.requests_per_trial)))
    out: dict[str, Any] = {**json.loads(filled.pop("stdout")), "fill_peak_rss_mb":
                           filled["peak_rss_mb"]}
    run_stage(child("fill", small, "1", str(args.trials_per_run), str(args.requests_per_trial)))
    last = f"20261201-{args.runs - 1:06d}-bench"
    commands = {
        "recommendations": ["recommendations"],
        "recommendations --format json": ["recommendations", "--format", "json"],
        "recommendations --history --workload code": ["recommendations", "--history",
                                                      "--workload", "code"],
        "trials --run RUN": ["trials", "--run", last],
        "trials --run RUN --format json": ["trials", "--run", last, "--format", "json"],
        "trials --format json (all)": ["trials", "--format", "json"],
        "export --workload code": ["export", "--workload", "code"],
        "runs --limit 20": ["runs", "--limit", "20"],
    }
    out["latency"] = _latency(url, commands, args.repeat_cold, args.repeat_warm)
    one = {k: v for k, v in commands.items() if "all" not in k}
    one["trials --run RUN"] = ["trials", "--run", "20261201-000000-bench"]
    one["trials --run RUN --format json"] = ["trials", "--run", "20261201-000000-bench",
                                             "--format", "json"]
    out["latency_one_run"] = _latency(small, one, args.repeat_cold, args.repeat_warm)
    out["db_mb"] = round((tmp / "store.db").stat().st_size / 2**20, 1) if not args.db else None
    out["target_s"] = TARGET_LATENCY_S
    out["over_target"] = [k for k, v in out["latency"].items()
                          if v["process_s"] >= TARGET_LATENCY_S]
    return out


# ------------------------------------------------------------------------------ daemon
def _small_sample(path: Path, long: bool) -> None:
    from autotune.backends.sim import generate_requests

    prompts = [1800 + 7 * i for i in range(120)] if long else [120 + 3 * i for i in range(120)]
    reqs = generate_requests(120, workload="chat", seed=1 if long else 0, rate=4.0,
                             prompt_tokens=prompts)
    path.write_text("".join(json.dumps({"id": r.id, "arrival_s": r.arrival_s, "workload": "w",
                                        "prompt_tokens": r.prompt_tokens,
                                        "output_tokens": r.output_tokens,
                                        "acceptance": list(r.acceptance or ())}) + "\n"
                            for r in reqs))


def daemon_child(tmp: Path, passes: int) -> dict[str, Any]:
    from autotune.daemon import DaemonOptions, run_daemon
    from autotune.orchestrate import TuneOptions
    from autotune.policy import load_policy
    from autotune.store import Store

    traffic = tmp / "traffic.jsonl"
    _small_sample(traffic, long=False)
    options = TuneOptions(traffic=traffic, policy=load_policy(None, {"budget.trials": 2}),
                          export_dir=tmp / "exports", replicas=1)
    store = Store.open(f"sqlite:///{tmp / 'daemon.db'}")
    series: list[float] = []
    tuned: list[int] = []
    t0 = time.perf_counter()

    def on_pass(result: Any, _why: str) -> None:
        series.append(round(rss_mb(), 1))
        tuned.append(len(result.workloads))
        _small_sample(traffic, long=len(series) % 2 == 1)  # the next pass sees drift

    run_daemon(DaemonOptions(tune=options, every_s=3600.0, state_path=tmp / "daemon.json",
                             poll_s=0.01, max_passes=passes), store, on_pass=on_pass)
    base = series[min(9, len(series) - 1)]
    return {"passes": len(series), "passes_that_tuned": sum(1 for n in tuned if n),
            "wall_s": round(time.perf_counter() - t0, 1),
            "rss_mb_after_pass": {str(i + 1): series[i] for i in
                                  sorted({0, 9, 49, 99, 149, len(series) - 1})
                                  if i < len(series)},
            "growth_after_pass_10": round(series[-1] / base - 1.0, 4)}


def part_daemon(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    stage = run_stage(child("daemon", str(tmp), str(args.passes)))
    out = json.loads(stage.pop("stdout"))
    out["peak_rss_mb"] = stage["peak_rss_mb"]
    out["target_growth"] = TARGET_GROWTH
    out["over_target"] = out["growth_after_pass_10"] >= TARGET_GROWTH
    return out


# -------------------------------------------------------------------------------- main
def _run_child(argv: list[str]) -> int:
    kind, *rest = argv
    if kind == "grouping":
        result = grouping_child(Path(rest[0]))
    elif kind == "lean":
        result = lean_child(Path(rest[0]))
    elif kind == "fill":
        result = fill_store(rest[0], int(rest[1]), int(rest[2]), int(rest[3]), seed=0)
    elif kind == "daemon":
        result = daemon_child(Path(rest[0]), int(rest[1]))
    else:
        raise SystemExit(f"unknown child {kind}")
    print(json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.scale",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--parts", default="sample,store,daemon")
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--trials-per-run", type=int, default=10)
    parser.add_argument("--requests-per-trial", type=int, default=2000)
    parser.add_argument("--passes", type=int, default=200)
    parser.add_argument("--repeat-cold", type=int, default=3)
    parser.add_argument("--repeat-warm", type=int, default=5)
    parser.add_argument("--db", default=None, help="store part: this (empty) database "
                                                   "instead of a temporary SQLite file")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _run_child(args.child)

    parts = {"sample": part_sample, "store": part_store, "daemon": part_daemon}
    result: dict[str, Any] = {"cpus": os.cpu_count()}
    for name in args.parts.split(","):
        with tempfile.TemporaryDirectory(prefix=f"autotune-scale-{name}-") as tmp:
            t0 = time.perf_counter()
            result[name] = parts[name](args, Path(tmp))
            result[name]["part_s"] = round(time.perf_counter() - t0, 1)
        if not args.json:
            print(f"== {name}\n{json.dumps(result[name], indent=2)}", flush=True)
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
