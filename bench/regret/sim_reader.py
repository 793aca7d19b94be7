"""The simulated worlds' reader: capacity readings on the simulator, in the world's own time.

Every reading is what a trial of autotune reads on the simulator (autotune.orchestrate.capacity:
the highest arrival scale whose p99 TTFT and ITL meet the SLO; goodput there) with
``--capacity-replays`` replays. Every seed is scored against one exhaustive oracle
(:func:`bench.regret.oracle.build_table`). A world many times slower than the GPU worlds the
workloads' SLOs were written for is held to them in its own time (:func:`dilation`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.regret.binding import Tail, TailName
from bench.regret.oracle import Table, build_table
from bench.regret.reading import COST_KEYED, Reading, ReadingCache, reading_cost
from bench.regret.records import Json
from bench.regret.settings import BUDGET, LONG_RUN, SMALL_SPACE, Settings, Space
from bench.regret.workloads import Workload
from bench.regret.worlds import ServeKeys, World, WorldKeys, sim_worlds

if TYPE_CHECKING:
    from autotune.backends import Backend
    from autotune.policy import Policy
    from autotune.types import Measurement, ReplaySchedule, TrialConfig

#: A simulator profile of a local spec pair names its model ``local/spec-pair-<pair>``.
LOCAL_PAIR = "local/spec-pair-"
#: The world the workloads' SLOs were written for (bench/regret/workloads.py).
SLO_REFERENCE = "kimi-k2.6@8xH200-tp8/dspark"
#: A world's capacity window holds at least this many of its unloaded request times
#: (:func:`reading_window`).
WINDOW_LIFETIMES = 8.0


def _merge(base: dict[str, Any], over: Mapping[str, object]) -> dict[str, Any]:
    """``over``'s keys set over the policy document ``base``, section by section."""
    out = dict(base)
    for k, v in over.items():
        under = base.get(k)
        out[k] = _merge(under, v) if isinstance(v, Mapping) and isinstance(under, dict) else v
    return out


def _local_pair(serve: ServeKeys) -> ServeKeys:
    """``serve`` with a local spec pair's name replaced by the built pair's folders
    (bench/engine/pairs.py), so the guided strategy reads the model's config.json."""
    if not serve["model"].startswith(LOCAL_PAIR):
        return serve
    from bench.engine.pairs import build

    pair = build(serve["model"].removeprefix(LOCAL_PAIR))
    return {**serve, "model": str(pair.target), "draft_model": str(pair.draft)}


def bench_policy(world: World, wl: Workload, strategy: str, budget: int,
                 space: Space, window_s: float | None = None) -> Policy:
    """The default policy in ``world`` (its serve, hardware and sim keys) for ``wl``, with a
    capacity window of ``window_s`` (None: the default's, ``replay.window_s``)."""
    from autotune.policy import load_policy, policy_from_mapping

    if world.policy is None:
        raise ValueError(f"{world.name}: not a simulated world (it has no policy keys)")
    world_keys: WorldKeys = {**world.policy, "serve": _local_pair(world.policy["serve"])}
    # the policy document pydantic validates: the default policy with the world's keys
    data = _merge(load_policy().model_dump(mode="json"), world_keys)
    allowed = world.policy.get("space", {})
    data["space"] = {k: [v for v in vs if v in allowed.get(k, vs)] for k, vs in space.items()}
    data["objective"]["slo"] = {"ttft_p99_ms": wl.slo[0], "itl_p99_ms": wl.slo[1]}
    data["budget"]["trials"] = budget
    if window_s is not None:
        data["replay"]["window_s"] = window_s
    data["search"] = {**data.get("search", {}), "strategy": strategy}
    return policy_from_mapping(data, f"bench:{world.name}:{wl.name}")


def unloaded_latencies(world: World, wl: Workload) -> tuple[float, float, float]:
    """p99 TTFT, p99 ITL (ms) and mean end-to-end latency (s) of the world's baseline config
    serving ``wl``'s requests one at a time (closed loop, one in flight): no queueing."""
    from autotune.backends import create_backend
    from autotune.slo import Slo

    policy = bench_policy(world, wl, "grid", BUDGET, SMALL_SPACE)
    backend = create_backend("sim", policy.serve.spec(), policy.sim.model_dump(), 0)
    m = one_at_a_time(backend, policy.baseline.config(), wl)
    check = m.slo_check(Slo())
    return check.ttft_p99_ms, check.itl_p99_ms, float(m.e2e_s[m.ok].mean())


def reading_window(world: World, wl: Workload) -> float | None:
    """The capacity window ``world`` is read with for ``wl``: the default policy's
    (``replay.window_s``, None) unless that holds fewer than :data:`WINDOW_LIFETIMES` of the
    world's unloaded request times (:func:`unloaded_latencies`), else that many. A reading is
    sustained over 4 lifetimes (autotune.slo.SETTLE_LIFETIMES), and a loaded request lives
    longer than an unloaded one: in a world whose requests live half a minute (one CPU core)
    no reading of the default window is sustained, and every config reads alike (the drain of
    a burst of 2 or 3 requests). The shipped GPU worlds keep the default (8 of their unloaded
    request times are 2-50 s); of the held-out ones, Llama-8B on one A10G gets 63 s for math
    (7.9 s unloaded)."""
    from autotune.policy import load_policy

    default = load_policy().replay.window_s
    needed = WINDOW_LIFETIMES * unloaded_latencies(world, wl)[2]
    return needed if needed > default else None


def one_at_a_time(backend: Backend, config: TrialConfig, wl: Workload) -> Measurement:
    """``config`` serving ``wl``'s requests one at a time (closed loop, one in flight)."""
    from autotune.types import ReplaySchedule

    return _replay(backend, config, ReplaySchedule(wl.requests, mode="closed", concurrency=1,
                                                   seed=0))


def _number(value: Json) -> float:
    """A JSON number as a float (NaN for anything else, as a missing interval end)."""
    return float(value) if isinstance(value, int | float) else math.nan


def first_reading(backend: Backend, config: TrialConfig, policy: Policy,
                  wl: Workload, replay_seed: int = 0) -> Measurement:
    """``config`` read once at ``wl``'s rate to serve as a capacity search reads its first
    rate (the policy's bounded window of the sample, :func:`autotune.orchestrate.capacity.
    replay_at_capacity` with one replay) under ``wl``'s p99 TTFT bound alone:
    ``capacity_met_slo`` says whether it kept up there."""
    from autotune.orchestrate.capacity import replay_at_capacity
    from autotune.slo import Slo

    slo = Slo(ttft_p99_ms=wl.slo[0])
    replica = backend.start(config)
    try:
        return replay_at_capacity(replica, policy.replay.schedule(wl.requests, seed=replay_seed,
                                                                  slo=slo),
                                  slo, max_replays=1)
    finally:
        replica.stop()


def _replay(backend: Backend, config: TrialConfig, schedule: ReplaySchedule) -> Measurement:
    replica = backend.start(config)
    try:
        return replica.replay(schedule)
    finally:
        replica.stop()


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


def sim_fingerprint() -> str:
    """Hash of the simulator's code and profiles and of the capacity search: cached readings
    never outlive a change."""
    import autotune.backends.sim as sim
    import autotune.orchestrate.capacity as capacity

    root = Path(sim.__file__).parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".yaml", ".csv", ".json") and path.is_file():
            h.update(path.read_bytes())
    h.update(Path(capacity.__file__).read_bytes())
    return h.hexdigest()[:12]


class SimReader:
    """Capacity readings of one simulated (world, workload), measured once per replay seed and
    cached (:class:`bench.regret.reader.Reader`)."""

    long_run = LONG_RUN       # tpe/random run on this far to find when they reach 2%
    grid_runs: int | None = None  # grid reads every config

    def __init__(self, world: World, wl: Workload, settings: Settings) -> None:
        from autotune.backends import create_backend

        self.world, self.settings = world, settings
        self.wl, self.dilation = in_world_time(world, wl)
        self.window_s = reading_window(world, self.wl)
        self.policy = self.search_policy("grid", BUDGET)
        self.backend = create_backend("sim", self.policy.serve.spec(),
                                      self.policy.sim.model_dump(), 0)
        # keyed by the workload as written (its SLO before any dilation)
        self.key = (f"{world.name}|{wl.name}|{settings.requests}|{settings.capacity_replays}|"
                    f"{wl.slo}|{settings.fingerprint}|{COST_KEYED}"
                    + (f"|{world.digest}" if world.digest else "")
                    + (f"|window {self.window_s:.6g}" if self.window_s is not None else ""))
        self.cache = ReadingCache(settings.cache, self.key)
        #: under a binding SLO (:meth:`serve_at`, :meth:`hold_to`): the rate to serve and the
        #: tail bound with its bound (None: the workload's own bounds)
        self.rate: float | None = None
        self.held_to: tuple[TailName, float] | None = None

    def _rekey(self, part: str) -> None:
        """The policy and the cache of the workload as it now is, keyed by ``part`` too."""
        self.policy = self.search_policy("grid", BUDGET)
        self.key += f"|{part}"
        measured = self.cache.measured
        self.cache = ReadingCache(self.settings.cache, self.key)
        self.cache.measured = measured

    def serve_at(self, rate: float) -> None:
        """Make ``rate`` × the sample's rate the workload's rate to serve: its arrivals sped up
        by ``rate``, so autotune reads it as 1 × the (new) sample's."""
        requests = [replace(r, arrival_s=(r.arrival_s or 0.0) / rate) for r in self.wl.requests]
        self.wl, self.rate = replace(self.wl, requests=requests), rate
        self._rekey(f"rate {rate:.6g}")

    def hold_to(self, tail: TailName, bound: float) -> None:
        """Hold the workload to a p99 bound of ``bound`` ms on ``tail`` (the other tail's bound
        kept; the slo is (TTFT, ITL)). An ITL bound keys its readings ``binding <bound>`` as
        before TTFT could be bound, so the oracle readings cached under one stay valid; a TTFT
        bound keys them ``binding ttft <bound>``."""
        ttft, itl = self.wl.slo
        slo = (ttft, bound) if tail == "itl" else (bound, itl)
        self.wl, self.held_to = replace(self.wl, slo=slo), (tail, bound)
        self._rekey(f"binding {bound:.6g}" if tail == "itl" else f"binding ttft {bound:.6g}")

    @property
    def measured(self) -> int:
        return self.cache.measured

    def configs(self) -> list[TrialConfig]:
        """The baseline and every config of the space."""
        return [self.policy.baseline.config(), *self.policy.space.configs()]

    #: under a binding SLO, whether some config's capacity reading serves the rate (False:
    #: none does, and the unit is scored by capacity at any rate)
    reachable = True

    @property
    def bound(self) -> bool:
        """Scored under a binding SLO: a rate to serve was set (:meth:`serve_at`) and some
        config's capacity reading serves it."""
        return self.rate is not None and self.reachable

    def at_rate(self, config: TrialConfig, replay_seed: int = 0) -> Tail | None:
        """``config``'s p99 ITL and p99 TTFT (ms) at the rate to serve, with the ITL's
        order-statistic interval, read as a capacity search reads its first rate
        (:func:`first_reading`, on ``replay_seed``) under the workload's TTFT bound alone; None
        when it does not keep up there (TTFT missed, arrivals fallen behind, or not
        sustained). Measured once and cached, keyed ``at-rate-tails`` (the readings cached
        before, ``at-rate-interval``, lack the TTFT and are never read for it)."""
        from autotune.slo import Slo

        def measure() -> Reading:
            m = first_reading(self.backend, config, self.policy, self.wl, replay_seed)
            met = m.extra.get("capacity_met_slo") == 1.0
            check = m.slo_check(Slo())
            tails: dict[str, Json] = {k: m.extra.get(k, math.nan)
                                      for k in ("itl_p99_low_ms", "itl_p99_high_ms")}
            tails["ttft_p99_ms"] = check.ttft_p99_ms
            return Reading(check.itl_p99_ms, met, {}, tails)

        again = f"|{replay_seed}" if replay_seed else ""
        r = self.cache.read(f"{self.key}|{config.short()}|at-rate-tails{again}", measure)[0]
        low, high, ttft = (r.summary.get(k)
                           for k in ("itl_p99_low_ms", "itl_p99_high_ms", "ttft_p99_ms"))
        return (Tail(r.value, _number(low), _number(high), _number(ttft)) if r.feasible
                else None)

    def search_policy(self, strategy: str, budget: int) -> Policy:
        """The policy a method searches with (``strategy``, ``budget`` trials)."""
        return bench_policy(self.world, self.wl, strategy, budget, self.settings.space,
                            self.window_s)

    def tables(self, seeds: int) -> list[Table[TrialConfig]]:
        """The oracle each seed is scored against: here one for all, every config and the
        baseline read ``--repeats`` times on the oracle's own replay seeds."""
        return [build_table(self.configs(), self.read, self.settings, binding=self.bound)] * seeds

    def read(self, config: TrialConfig, replay_seed: int) -> Reading:
        key = f"{self.key}|{config.short()}|{replay_seed}"
        return self.cache.read(key, lambda: self._measure(config, replay_seed))[0]

    def _measure(self, config: TrialConfig, replay_seed: int) -> Reading:
        from autotune.objective import score_measurement
        from autotune.orchestrate.capacity import replay_at_capacity
        from autotune.orchestrate.servers import MeteredReplica
        from autotune.predict import decode_stats

        slo = self.policy.objective.slo.slo()
        schedule = self.policy.replay.schedule(self.wl.requests, seed=replay_seed, slo=slo)
        replica = MeteredReplica(self.backend.start(config))
        try:
            m = replay_at_capacity(replica, schedule, slo,
                                   max_replays=self.settings.capacity_replays)
        finally:
            replica.stop()
        out = score_measurement(m, self.policy.objective.maximize, slo)
        summary: dict[str, Json] = {k: v for k, v in out.summary.items()
                                    if k != "per_position_acceptance"}
        summary.update(decode_stats(m))
        summary.update(reading_cost(replica, self.policy.gpus_per_replica))
        return Reading(out.value, out.feasible, dict(out.constraints), summary)
