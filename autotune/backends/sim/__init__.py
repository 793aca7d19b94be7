"""The embedded simulator backend (``sim``): a calibrated discrete-event vLLM + DSpark replica.

``create_sim_backend(serve, options, seed)`` builds a :class:`SimBackend` for a hardware+model
profile (``options["profile"]``, default ``kimi-k2.6@8xH200-tp8``) and a drafter
(``options["drafter"]``: ``dspark`` | ``eagle3-mla`` | ``none``). Each trial config starts a
:class:`SimReplica` whose ``replay`` simulates continuous batching, chunked prefill, KV capacity
with recompute preemption, and speculative decoding with acceptance drawn from each request's
hidden true profile. ``generate_requests`` builds synthetic samples whose ``acceptance``
predictions are miscalibrated versions of that truth, ``seed_benchmark_requests`` the seed
benchmark's prompt sets. See docs/simulator.md.

The profiles' acceptance priors are fitted to the seed's published speedups by tooling outside
the runtime (bench/calibration/): it reads the profile model, the analytic step cost and the
hidden truth's noise through the names exported here (``AcceptancePrior``, ``AnalyticCost``,
``AnalyticStepCost``, ``DrafterProfile``, ``POSITION_SD``, ``hashed_normals``, ``logit``,
``request_keys``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.backends.sim._benchmarks import (
    BENCHMARKS,
    PER_BENCHMARK,
    SEED_MAX_MODEL_LEN,
    TEMPLATE_TOKENS,
    seed_benchmark_requests,
)
from autotune.backends.sim._catalog import ProfileSummary, profile_catalog
from autotune.backends.sim._cost import AnalyticStepCost, cost_law
from autotune.backends.sim._engine import EngineConfig, simulate_replay
from autotune.backends.sim._generate import LENGTHS, LengthModel, generate_requests
from autotune.backends.sim._profile import (
    AcceptancePrior,
    AnalyticCost,
    DrafterProfile,
    Profile,
    known_drafters,
    known_profiles,
    load_profile,
)
from autotune.backends.sim._truth import (
    POSITION_SD,
    HeadMap,
    hashed_normals,
    logit,
    request_keys,
)
from autotune.errors import BackendError, ConfigError, TrialFailed
from autotune.types import Measurement, Progress, ReplaySchedule, ServeSpec, TrialConfig

__all__ = [
    "BENCHMARKS",
    "DEFAULT_DRAFTER",
    "DEFAULT_PROFILE",
    "LENGTHS",
    "PER_BENCHMARK",
    "POSITION_SD",
    "SEED_MAX_MODEL_LEN",
    "SIM_VERSION",
    "TEMPLATE_TOKENS",
    "AcceptancePrior",
    "AnalyticCost",
    "AnalyticStepCost",
    "DrafterProfile",
    "LengthModel",
    "Profile",
    "ProfileSummary",
    "SimBackend",
    "SimReplica",
    "create_sim_backend",
    "generate_requests",
    "hashed_normals",
    "known_drafters",
    "known_profiles",
    "load_profile",
    "logit",
    "profile_catalog",
    "request_keys",
    "seed_benchmark_requests",
]

SIM_VERSION = "0.1.0"
DEFAULT_PROFILE = "kimi-k2.6@8xH200-tp8"
DEFAULT_DRAFTER = "dspark"
#: The policy's ``sim`` section; ``reserve_gpus`` is where the Ray pool places a replica
#: (autotune/orchestrate/placement.py), which the simulator itself does not read.
_OPTIONS = ("profile", "drafter", "reserve_gpus")


class SimReplica:
    """One simulated vLLM server with a fixed trial config; replays are independent.

    ``start_s``/``start_source``: what starting the real server would cost, from the profile
    (0 with a note when the profile states no start time)."""

    def __init__(self, config: TrialConfig, engine: EngineConfig, start_s: float = 0.0,
                 start_source: str = "") -> None:
        self.config = config
        self.start_s = start_s
        self.start_source = start_source
        self._engine = engine
        self._stopped = False

    def replay(self, schedule: ReplaySchedule, progress: Progress | None = None) -> Measurement:
        if self._stopped:
            raise BackendError("sim replica was stopped; start a new one with Backend.start")
        if schedule.mode not in ("trace", "closed"):
            raise ConfigError(f"unknown replay mode {schedule.mode!r}; use 'trace' or 'closed'")
        if not schedule.time_scale > 0:
            raise ConfigError(f"replay time_scale must be > 0, got {schedule.time_scale}")
        return simulate_replay(self._engine, schedule, progress)

    def stop(self) -> None:
        self._stopped = True


class SimBackend:
    """Starts simulated replicas of one profile and drafter (``kind = "sim"``)."""

    kind = "sim"

    def __init__(self, serve: ServeSpec, profile: Profile, drafter: str, seed: int) -> None:
        self.serve = serve
        self.profile = profile
        self.drafter_name = drafter
        self.drafter = profile.drafter(drafter)
        self.seed = seed
        self._cost = cost_law(profile, self.drafter)
        self._head = (HeadMap.build(self.drafter.head, max(serve.draft_block_size, 1))
                      if self.drafter is not None else None)

    def _check(self, config: TrialConfig) -> None:
        n = config.num_speculative_tokens
        why = None
        if n < 0:
            why = f"num_speculative_tokens must be >= 0, got {n}"
        elif n > 0 and self.drafter is None:
            why = (f"num_speculative_tokens={n} needs a drafter, but the sim drafter is 'none'; "
                   "use num_speculative_tokens=0 or sim.drafter dspark/eagle3-mla")
        elif n > self.serve.draft_block_size:
            why = (f"num_speculative_tokens={n} exceeds the drafter's block size "
                   f"(serve.draft_block_size={self.serve.draft_block_size})")
        elif config.enable_adaptive_verification and self.drafter_name != "dspark" and n > 0:
            why = (f"enable_adaptive_verification is a DSpark-only field; drafter "
                   f"{self.drafter_name!r} does not accept it")
        elif config.max_num_seqs < 1 or config.max_num_batched_tokens < 1:
            why = (f"max_num_seqs ({config.max_num_seqs}) and max_num_batched_tokens "
                   f"({config.max_num_batched_tokens}) must be >= 1")
        elif config.max_num_batched_tokens < config.max_num_seqs:
            why = (f"max_num_batched_tokens ({config.max_num_batched_tokens}) must be >= "
                   f"max_num_seqs ({config.max_num_seqs}), as vLLM requires")
        elif self.serve.max_model_len + n + 1 > self.profile.kv_cache_tokens:
            why = (f"max_model_len={self.serve.max_model_len} does not fit the KV cache of "
                   f"profile {self.profile.name} ({self.profile.kv_cache_tokens} tokens); "
                   "lower serve.max_model_len")
        if why is not None:
            raise TrialFailed(f"sim replica cannot start: {why}")

    def start(self, config: TrialConfig) -> SimReplica:
        self._check(config)
        n = config.num_speculative_tokens
        engine = EngineConfig(
            cost=self._cost,
            drafter=self.drafter if n > 0 else None,
            head_map=self._head,
            window=n,
            adaptive=bool(config.enable_adaptive_verification) and n > 0,
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=config.max_num_batched_tokens,
            kv_blocks=self.profile.kv_cache_tokens // self.profile.kv_block_size,
            kv_block_size=self.profile.kv_block_size,
            max_model_len=self.serve.max_model_len,
            block=max(self.serve.draft_block_size, n, 1),
            seed=self.seed,
        )
        start = self.profile.start
        if start is None:
            return SimReplica(config, engine, 0.0, f"sim profile {self.profile.name} states no "
                              "server start time: starts are not charged")
        return SimReplica(config, engine, start.seconds,
                          f"sim profile {self.profile.name}: {start.source}")

    def describe(self) -> dict[str, Any]:
        return {
            "backend": "sim",
            "profile": self.profile.name,
            "drafter": self.drafter_name,
            "draft_model": self.drafter.model if self.drafter is not None else None,
            "hardware": self.profile.hardware,
            "model": self.profile.model,
            "cost_law": self.profile.cost.law,
            "drafter_kind": self.drafter.kind if self.drafter is not None else None,
            "simulator_version": SIM_VERSION,
            "seed": self.seed,
        }


def create_sim_backend(serve: ServeSpec, options: Mapping[str, Any], seed: int) -> SimBackend:
    """Build the sim backend (the registry's factory for kind ``sim``).

    ``options["profile"]`` is a shipped profile name or a path to a profile YAML file.
    """
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise ConfigError(f"unknown sim option(s) {unknown}; known options: "
                          f"{', '.join(_OPTIONS)} (policy section sim)")
    profile = load_profile(str(options.get("profile") or DEFAULT_PROFILE))
    drafter_name = str(options.get("drafter") or DEFAULT_DRAFTER)
    drafter = profile.drafter(drafter_name)
    if drafter is not None and drafter.block_size < serve.draft_block_size:
        raise ConfigError(
            f"{profile.source}: drafters.{drafter_name}.block_size: {drafter.block_size} is "
            f"smaller than the policy's widest window (serve.draft_block_size="
            f"{serve.draft_block_size}, which bounds space.num_speculative_tokens); raise "
            "block_size in the profile or lower serve.draft_block_size")
    return SimBackend(serve, profile, drafter_name, seed)
