"""Tuning policies: the typed, validated form of ``policies/*.yaml`` (docs/policies.md).

A policy fixes the server (``serve``), says what the search may choose (``space``), what it
maximises under which SLOs (``objective``), what it compares against (``baseline``), how much it
may spend (``budget``), how traffic is replayed (``replay``), when the daemon re-tunes
(``schedule``) and which simulator profile the ``sim`` backend uses (``sim``). Unknown keys are
rejected; an invalid policy raises :class:`~autotune.errors.ConfigError` naming the key.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from autotune.errors import ConfigError
from autotune.types import (
    KNOB_NAMES,
    OutputCheck,
    ReplaySchedule,
    Request,
    ServeSpec,
    Slo,
    TrialConfig,
)

__all__ = [
    "DEFAULT_GPU_HOURS",
    "DEFAULT_PEAK_WINDOW_S",
    "DEFAULT_POLICY_PATH",
    "Policy",
    "load_policy",
    "parse_duration",
]

#: The embedded default policy (the seed's Kimi-K2.6 + DSpark setting).
DEFAULT_POLICY_PATH = Path(__file__).resolve().parent / "policies" / "default.yaml"



class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Serve(_Model):
    """Fixed for every trial; not searched."""

    model: str = Field(description="Target model id or path passed to `vllm serve`.")
    draft_model: str | None = Field(
        default=None, description="Drafter checkpoint (the speculative-config `model`).")
    method: str = Field(
        default="dspark",
        description="vLLM speculative method: dspark, eagle3, draft_model, ngram, ...")
    draft_block_size: int = Field(
        default=8, ge=1, le=64,
        description="The drafter's block: windows and acceptance lists stay within it.")
    tensor_parallel_size: int = Field(default=8, ge=1, description="--tensor-parallel-size.")
    gpus_per_replica: int = Field(default=8, ge=0, description="GPUs one replica occupies.")
    max_model_len: int = Field(default=20000, ge=16, description="--max-model-len.")
    extra_args: list[str] = Field(
        default_factory=list, description="Extra `vllm serve` arguments, passed verbatim.")
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment variables for the server process.")
    command: list[str] = Field(
        default_factory=list,
        description="Launch command overriding `python -m vllm.entrypoints.openai.api_server`.")

    def spec(self) -> ServeSpec:
        return ServeSpec(
            model=self.model,
            draft_model=self.draft_model,
            method=self.method,
            draft_block_size=self.draft_block_size,
            tensor_parallel_size=self.tensor_parallel_size,
            gpus_per_replica=self.gpus_per_replica,
            max_model_len=self.max_model_len,
            extra_args=tuple(self.extra_args),
            env=tuple(sorted(self.env.items())),
            command=tuple(self.command),
        )


class Range(_Model):
    """An integer range: every value from low to high by step, or log-spaced when log is set."""

    low: int = Field(description="Smallest value (inclusive).")
    high: int = Field(description="Largest value (inclusive).")
    step: int | None = Field(default=None, ge=1, description="Linear step (default 1).")
    log: bool = Field(default=False, description="Powers of two from low to high.")

    @model_validator(mode="after")
    def _check(self) -> Range:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        if self.log and self.step is not None:
            raise ValueError("use either step or log, not both")
        if self.log and self.low <= 0:
            raise ValueError(f"log ranges need low > 0, got {self.low}")
        return self

    def values(self) -> list[int]:
        if self.log:
            out, v = [], self.low
            while v <= self.high:
                out.append(v)
                v *= 2
            return out
        return list(range(self.low, self.high + 1, self.step or 1))


IntChoice = list[int] | Range


class Space(_Model):
    """What the search may choose; each knob is a list of values or a {low, high} range."""

    num_speculative_tokens: IntChoice = Field(
        default_factory=lambda: [1, 2, 3, 4, 5, 6, 7],
        description="Draft window K (0 = no speculation).")
    enable_adaptive_verification: list[bool] = Field(
        default_factory=lambda: [False],
        description="DSpark adaptive verification on/off.")
    max_num_seqs: IntChoice = Field(
        default_factory=lambda: [1, 8, 32, 64, 128, 256], description="--max-num-seqs.")
    max_num_batched_tokens: IntChoice = Field(
        default_factory=lambda: [2048, 4096, 8192, 16384],
        description="--max-num-batched-tokens.")

    def choices(self, knob: str) -> list[Any]:
        value = getattr(self, knob)
        out = value.values() if isinstance(value, Range) else list(value)
        return sorted(set(out), key=lambda v: (isinstance(v, bool), v))

    @model_validator(mode="after")
    def _check(self) -> Space:
        for knob in KNOB_NAMES:
            values = self.choices(knob)
            if not values:
                raise ValueError(f"{knob}: needs at least one value")
            if knob != "enable_adaptive_verification" and any(
                    isinstance(v, bool) or v < 0 for v in values):
                raise ValueError(f"{knob}: values must be non-negative integers, got {values}")
        for knob in ("max_num_seqs", "max_num_batched_tokens"):
            if 0 in self.choices(knob):
                raise ValueError(f"{knob}: values must be >= 1")
        return self

    def configs(self) -> list[TrialConfig]:
        """Every config of the space (the grid), in a stable order."""
        grid = itertools.product(*(self.choices(k) for k in KNOB_NAMES))
        out = []
        for n, av, seqs, tok in grid:
            if n == 0 and av:
                continue  # adaptive verification means nothing without a drafter
            out.append(TrialConfig(n, bool(av), seqs, tok))
        return out

    def size(self) -> int:
        return len(self.configs())


class SloSpec(_Model):
    """Latency SLOs: p99 bounds over the measured requests."""

    ttft_p99_ms: float | None = Field(
        default=None, gt=0, description="p99 time to first token bound (ms).")
    itl_p99_ms: float | None = Field(
        default=None, gt=0, description="p99 inter-token latency bound (ms).")

    def slo(self) -> Slo:
        return Slo(ttft_p99_ms=self.ttft_p99_ms, itl_p99_ms=self.itl_p99_ms)


class Objective(_Model):
    maximize: Literal["goodput", "output_tokens_per_s"] = Field(
        default="goodput",
        description="goodput (requests/s meeting the SLOs) or output tokens/s.")
    slo: SloSpec = Field(default_factory=SloSpec, description="Latency SLOs (constraints).")


class Baseline(_Model):
    """The config every result is compared against; measured as its own trial."""

    num_speculative_tokens: int = Field(default=7, ge=0, description="Baseline window.")
    enable_adaptive_verification: bool = Field(default=False,
                                               description="Baseline adaptive verification.")
    max_num_seqs: int = Field(default=1024, ge=1, description="Baseline --max-num-seqs.")
    max_num_batched_tokens: int = Field(default=8192, ge=1,
                                        description="Baseline --max-num-batched-tokens.")

    def config(self) -> TrialConfig:
        return TrialConfig.from_dict(self.model_dump())


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str | float | int) -> float:
    """Seconds from ``"5s"``, ``"30m"``, ``"2h"``, ``"1d"`` or a number of seconds."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        if text <= 0:
            raise ValueError(f"duration must be positive, got {text}")
        return float(text)
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"not a duration: {text!r}; use a number with ms, s, m, h or d, "
                         "e.g. 30m")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds <= 0:
        raise ValueError(f"duration must be positive, got {text!r}")
    return seconds


#: The default GPU-hour budget of a pass (docs/policies.md, "Budget"): one 8-GPU node for
#: the eight hours of a night.
DEFAULT_GPU_HOURS = 64.0


class Budget(_Model):
    """How much a pass may spend, in the units of real replicas on every backend."""

    trials: int = Field(default=12, ge=1, le=100_000,
                        description="Trials per workload, baseline included.")
    gpu_hours: float | None = Field(
        default=DEFAULT_GPU_HOURS, gt=0,
        description="GPU-hours a pass may spend (server starts plus replayed traffic, times "
                    "the GPUs of a replica; the simulator charges what real replicas would). "
                    "Default: one 8-GPU node for a night's 8 hours. null: no GPU-hour limit.")
    wall_clock: str = Field(
        default="8h",
        description="Replica-time budget per run (e.g. 8h): the busiest replica's time, "
                    "simulated seconds on the simulator, and at least the real time elapsed.")
    max_retries: int = Field(default=2, ge=0, description="Retries of a trial whose replica died.")

    @field_validator("wall_clock")
    @classmethod
    def _duration(cls, v: str) -> str:
        parse_duration(v)
        return v

    @property
    def wall_clock_s(self) -> float:
        return parse_duration(self.wall_clock)


class Replay(_Model):
    mode: Literal["trace", "closed"] = Field(
        default="trace",
        description="trace: honour arrival times; closed: keep `concurrency` in flight.")
    time_scale: float = Field(default=1.0, gt=0, description="Arrival-time speed-up factor.")
    concurrency: int = Field(default=1, ge=1, description="In-flight requests in closed mode.")
    max_requests: int = Field(default=2000, ge=1, description="Requests replayed per trial.")
    warmup_requests: int = Field(default=16, ge=0, description="Excluded from statistics.")
    find_capacity: bool = Field(
        default=True,
        description="trace mode: measure each trial at the highest arrival rate (time_scale) "
                    "whose p99 TTFT/ITL meet the SLO while the replica keeps up with the "
                    "arrivals, as DistServe's goodput; false: replay once at time_scale.")
    window_s: float = Field(
        default=60.0, gt=0,
        description="Replica seconds of arrivals one capacity reading replays (the busiest "
                    "slice of the workload that fits at the rate read): 60 s keeps a trial's "
                    "readings (7 at most) near 8 replica-minutes, under one start of a "
                    "large model's server, while spanning the 4 request lifetimes of up to "
                    "15 s a sustained reading needs (docs/search.md); a pass whose requests "
                    "live longer says so and which window to set.")

    def schedule(self, requests: list[Request], seed: int, label: str = "",
                 slo: Slo | None = None) -> ReplaySchedule:
        return ReplaySchedule(
            requests=requests,
            mode=self.mode,
            time_scale=self.time_scale,
            concurrency=self.concurrency,
            warmup_requests=min(self.warmup_requests, max(0, len(requests) - 1)),
            seed=seed,
            label=label,
            capacity_slo=slo if self.find_capacity and self.mode == "trace" else None,
            capacity_window_s=self.window_s,
        )


class Outputs(_Model):
    """The output check (docs/outputs.md): every trial on a real engine decodes the same
    prompts greedily, and its tokens are compared with the baseline's and, when a config
    without speculation was measured, with that one's."""

    prompts: int = Field(
        default=8, ge=0,
        description="Prompts of each workload (its first ones, in sample order) decoded "
                    "greedily per trial; 0: no check; unset: 8, or all of a smaller workload; "
                    "set larger than the sample: an error. 8 × 32 tokens catch a path that "
                    "changes 1 token in 100 with probability 0.92 for one batched decode.")
    max_tokens: int = Field(default=32, ge=1, le=4096,
                            description="Tokens decoded per prompt (end-of-sequence ignored).")
    tie_margin: float = Field(
        default=0.05, ge=0,
        description="A divergence is the engine's numerics when the two tokens' "
                    "log-probabilities differ by at most this where it happens (a near-tie); "
                    "any other divergence flags the config.")

    def check(self, requests: list[Request]) -> OutputCheck | None:
        """The prompts every trial of a workload with ``requests`` decodes (None: no check)."""
        if self.prompts == 0 or not requests:
            return None
        return OutputCheck(tuple(requests[: self.prompts]), self.max_tokens)


class Schedule(_Model):
    cron: str | None = Field(default="0 2 * * *", description="When the daemon re-tunes.")


class Sim(_Model):
    profile: str = Field(default="kimi-k2.6@8xH200-tp8",
                         description="Hardware+model profile of the simulator.")
    drafter: str = Field(default="dspark",
                         description="Simulated drafter: dspark, eagle3-mla or none.")
    reserve_gpus: bool = Field(
        default=False,
        description="On Ray, each simulator replica reserves serve.gpus_per_replica GPUs on one "
                    "node, as a vllm replica does (a dry run of a real pass's placement; "
                    "docs/ray.md); false: one CPU each.")


class Hardware(_Model):
    """What one replica runs on (the guided search's step-cost priors come from it)."""

    gpu: str | None = Field(
        default=None,
        description="GPU kind of a replica (H200, H100, A100, L40S, B200, MI300X); absent: the "
                    "kind Ray reports for the replicas' nodes; unknown: the step cost is "
                    "learned from the runs.")
    count: int | None = Field(default=None, ge=1,
                              description="GPUs per replica (default serve.gpus_per_replica).")


class Search(_Model):
    strategy: Literal["guided", "tpe", "random", "gp", "grid"] = Field(
        default="guided",
        description="guided (acceptance-guided, docs/search.md), or one of Optuna's samplers "
                    "(tpe, random, gp: Gaussian process, needs torch), or grid (every config).")
    epsilon: float = Field(
        default=0.005, ge=0,
        description="guided: stop when the best expected improvement left (relative, per trial "
                    "of typical cost) is below this. Every strategy: a leader read once is read "
                    "again for a narrow lead only when that reading is expected to gain this "
                    "much (docs/search.md).")


#: The peak window of a plan when the policy sets none (see ``plan.peak_window``).
DEFAULT_PEAK_WINDOW_S = 300.0


class PlanPolicy(_Model):
    """How the capacity plan sizes a deployment from the measured capacities (docs/plan.md)."""

    peak_window: str | None = Field(
        default=None,
        description="The plan serves the sample's busiest window of this length (e.g. 5m). "
                    "Default: 5m, about the time a Kimi-class replica takes to start, so a "
                    "busier stretch than that must be served by replicas already running; a "
                    "sample shorter than 5m is then planned at its mean rate, and the plan "
                    "says so. Set explicitly, it must not exceed the sample's span.")
    headroom: float = Field(
        default=0.1, gt=0,
        description="Planned rate per replica at most capacity / (1 + headroom): 0.1 covers "
                    "the capacity reading's resolution (3%) and the replay-to-replay noise "
                    "(a few %); bursts are covered by the peak window, not by headroom.")
    growth: list[float] = Field(
        default_factory=lambda: [1.0, 2.0, 4.0],
        description="Traffic growth factors the plan sizes for (rate x k).")
    measure_shared: bool = Field(
        default=True,
        description="At the end of a pass, read the mixed sample (every workload's requests "
                    "together) at capacity on each workload's recommended config, for the "
                    "split-or-shared comparison.")

    @field_validator("peak_window")
    @classmethod
    def _window(cls, v: str | None) -> str | None:
        if v is not None:
            parse_duration(v)
        return v

    @field_validator("growth")
    @classmethod
    def _growth(cls, v: list[float]) -> list[float]:
        if not v or any(not k > 0 for k in v):
            raise ValueError(f"growth factors must be positive numbers, got {v}")
        return v

    @property
    def peak_window_s(self) -> float | None:
        """The window set (seconds), or None for the default (:data:`DEFAULT_PEAK_WINDOW_S`)."""
        return parse_duration(self.peak_window) if self.peak_window is not None else None


class Policy(_Model):
    """A whole tuning policy (every key: docs/policies.md)."""

    name: str = Field(description="Policy name (shown in provenance).")
    serve: Serve = Field(description="The server every trial starts (fixed, not searched).")
    space: Space = Field(default_factory=Space, description="What the search may choose.")
    objective: Objective = Field(default_factory=Objective,
                                 description="What is maximised, under which SLOs.")
    baseline: Baseline = Field(default_factory=Baseline,
                               description="Measured first, as its own trial; speedups are "
                                           "relative to it.")
    budget: Budget = Field(default_factory=Budget, description="How much a run may spend.")
    replay: Replay = Field(default_factory=Replay, description="How traffic is replayed.")
    schedule: Schedule = Field(default_factory=Schedule,
                               description="When the daemon re-tunes.")
    sim: Sim = Field(default_factory=Sim, description="The embedded simulator's setting.")
    hardware: Hardware = Field(default_factory=Hardware,
                               description="The accelerators of one replica.")
    search: Search = Field(default_factory=Search, description="How configs are searched.")
    outputs: Outputs = Field(default_factory=Outputs,
                             description="Outputs checked against the baseline (real engines).")
    plan: PlanPolicy = Field(default_factory=PlanPolicy,
                       description="How the capacity plan sizes a deployment.")

    @model_validator(mode="after")
    def _windows_within_block(self) -> Policy:
        block = self.serve.draft_block_size
        too_wide = [n for n in self.space.choices("num_speculative_tokens") if n > block]
        if too_wide:
            raise ValueError(
                f"space.num_speculative_tokens: {too_wide} exceed serve.draft_block_size "
                f"({block})")
        return self

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one replica occupies: ``hardware.count``, else ``serve.gpus_per_replica``."""
        return self.hardware.count or self.serve.gpus_per_replica

    def sha256(self) -> str:
        """Hash of the canonical policy (what provenance records)."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()


def _format_validation_error(source: str, err: ValidationError) -> str:
    lines = [f"{source}: invalid policy:"]
    for e in err.errors():
        key = ""
        for part in e["loc"]:
            key += f"[{part}]" if isinstance(part, int) else (f".{part}" if key else str(part))
        key = key or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key (check its spelling against docs/policies.md)"
        elif e["type"] == "missing":
            msg = "required key is missing"
        lines.append(f"  {key}: {msg}")
    return "\n".join(lines)


def policy_from_mapping(data: Mapping[str, Any], source: str = "<policy>") -> Policy:
    try:
        return Policy.model_validate(dict(data))
    except ValidationError as e:
        raise ConfigError(_format_validation_error(source, e)) from e


def load_policy(path: str | Path | None = None,
                overrides: Mapping[str, Any] | None = None) -> Policy:
    """Load and validate a policy file (default: the embedded default policy).

    ``overrides`` maps dotted keys (``budget.trials``) to values set from CLI flags.
    """
    import yaml

    p = Path(path) if path is not None else DEFAULT_POLICY_PATH
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise ConfigError(f"{p}: policy file not found; pass --policy with an existing "
                          "file, e.g. policies/default.yaml") from e
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: cannot read policy: {e}") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark is not None else str(p)
        raise ConfigError(f"{where}: invalid YAML: {getattr(e, 'problem', e)}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: a policy is a YAML mapping with keys name, serve, space, ...; "
                          f"got {type(data).__name__}")
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            child = node.get(key)
            if not isinstance(child, dict):
                child = {}
                node[key] = child
            node = child
        node[leaf] = value
    return policy_from_mapping(data, str(p))


def reference_markdown() -> str:
    """A Markdown table of every policy key with its default and description (docs/policies.md)."""
    rows = ["| key | default | meaning |", "|---|---|---|"]

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, info in model.model_fields.items():
            key = f"{prefix}{name}"
            ann = info.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                rows.append(f"| `{key}` | | {info.description or ''} |")
                walk(ann, key + ".")
                continue
            if info.is_required():
                default = "required"
            elif info.default_factory is not None:
                made = info.default_factory()  # type: ignore[call-arg]
                default = f"`{made}`" if not isinstance(made, BaseModel) else ""
            else:
                default = f"`{info.default}`"
            rows.append(f"| `{key}` | {default} | {info.description or ''} |")

    walk(Policy, "")
    return "\n".join(rows) + "\n"
