"""Hardware + model profiles of the simulator: the cost law, the KV cache, the drafters.

A profile is a YAML file: one shipped in ``profiles/`` (named by its file name) or any file a
policy points at (``sim.profile: path/to/my-gpu.yaml``). It is validated into the frozen
pydantic models below (unknown keys, wrong types, missing fields, negative costs are errors
naming the file and the key); docs/simulator.md documents every field and how to derive it.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from autotune.backends.sim._table import StepTable
from autotune.errors import ConfigError

__all__ = [
    "AcceptancePrior",
    "AnalyticCost",
    "AnalyticDraftCost",
    "DrafterProfile",
    "HeadMiscalibration",
    "KvCache",
    "Profile",
    "RoutedExperts",
    "ServerStart",
    "TableCost",
    "TableDraftCost",
    "known_drafters",
    "known_profiles",
    "load_profile",
    "profile_source",
]

Seconds = Annotated[float, Field(ge=0)]
Sd = Annotated[float, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RoutedExperts(_Strict):
    """MoE expert reads: a step of T tokens touches E(T) = n·(1 − (1 − k/n)^T) experts/layer."""

    expert_s: Seconds = Field(description="Reading one routed expert of one layer (s).")
    moe_layers: int = Field(ge=1, description="MoE layers.")
    routed_experts: int = Field(ge=1, description="Routed experts per MoE layer (n).")
    experts_per_token: int = Field(ge=1, description="Experts each token is routed to (k).")

    @model_validator(mode="after")
    def _k_within_n(self) -> RoutedExperts:
        if self.experts_per_token > self.routed_experts:
            raise ValueError(f"experts_per_token ({self.experts_per_token}) exceeds "
                             f"routed_experts ({self.routed_experts})")
        return self


class AnalyticCost(_Strict):
    """Target step time = fixed + experts + token_s·T + kv_token_s·Σ context + attention pairs."""

    law: Literal["analytic"]
    fixed_s: Seconds = Field(description="Per-step floor (s).")
    token_s: Seconds = Field(description="Per batch token (s).")
    kv_token_s: Seconds = Field(description="Per context token read by a decoding request (s).")
    attn_pair_s: Seconds = Field(description="Per prefill (query, key) attention pair (s).")
    experts: RoutedExperts | None = Field(default=None,
                                          description="MoE expert reads; null for dense models.")


class TableCost(_Strict):
    """Target step time interpolated from a measured table (``_table.py``)."""

    law: Literal["table"]
    table: StepTable = Field(description="The table, or a JSON file relative to the profile.")
    table_file: str | None = Field(default=None,
                                   description="Where the table was read from (set on load).")

    @model_validator(mode="before")
    @classmethod
    def _read_table_file(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("table"), str):
            return data
        base = Path((info.context or {}).get("base", "."))
        path = (base / data["table"]).resolve()
        try:
            table = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as e:
            raise ValueError(f"table file {path} not found (paths are relative to the "
                             "profile file)") from e
        except (OSError, ValueError) as e:
            raise ValueError(f"table file {path}: cannot read it as JSON: {e}") from e
        try:
            checked = StepTable.model_validate(table)
        except ValidationError as e:
            problems = "; ".join(
                f"{'.'.join(map(str, err['loc'])) or '(top level)'}: "
                f"{err['msg'].removeprefix('Value error, ')}" for err in e.errors())
            raise ValueError(f"table file {path}: {problems}") from e
        return {**data, "table": checked, "table_file": str(path)}


class AnalyticDraftCost(_Strict):
    """Drafter time per step: passes·fixed + per position + per (sequence, position) + prefill."""

    law: Literal["analytic"]
    fixed_s: Seconds = Field(description="One drafter forward's floor (s).")
    per_position_s: Seconds = Field(description="Per drafted position (s).")
    per_seq_position_s: Seconds = Field(description="Per drafted position per sequence (s).")
    prefill_token_s: Seconds = Field(description="Per prompt token the drafter reads (s).")


class TableDraftCost(_Strict):
    """Drafter forwards timed from the profile table's ``draft_step_ms``."""

    law: Literal["table"]


class HeadMiscalibration(_Strict):
    """How the confidence head's predictions deviate from the truth (hidden from the tuner).

    Per position k the head reports sigmoid(logit(c_k)/temperature_k + bias_k + noise) with
    temperature_k = ``temperature`` · exp(``temperature_sd``·N(0,1)) and bias_k =
    ``bias`` + ``bias_sd``·N(0,1), drawn once from ``seed``; noise ~ N(0, ``noise_sd``) per
    request and position.
    """

    temperature: float = Field(gt=0)
    temperature_sd: Sd
    bias: float
    bias_sd: Sd
    noise_sd: Sd
    seed: int = Field(ge=0)


class AcceptancePrior(_Strict):
    """A workload's distribution of per-request conditional acceptance profiles.

    The mean request has logit(c_k) = logit(c1) + slope·(k-1); each request shifts it by a
    normal ``request_sd`` (logits) and each decode step by a normal ``step_sd`` shared by the
    positions of that step (easy and hard stretches of text).
    """

    c1: float = Field(gt=0, lt=1)
    slope: float
    request_sd: Sd
    step_sd: Sd


class DrafterProfile(_Strict):
    """One drafter on one target: its cost, its head's miscalibration, its acceptance truth."""

    model: str = Field(description="The drafter checkpoint.")
    kind: Literal["parallel", "sequential"] = Field(
        description="parallel: one forward drafts the block (DSpark); sequential: one forward "
                    "per drafted position (EAGLE, draft models).")
    block_size: int = Field(ge=1, description="Widest window the drafter proposes.")
    cost: Annotated[AnalyticDraftCost | TableDraftCost, Field(discriminator="law")]
    head: HeadMiscalibration
    acceptance: dict[str, AcceptancePrior] = Field(
        description="Priors by workload; '_defaults' fills keys every prior shares.")
    aliases: dict[str, str] = Field(default_factory=dict,
                                    description="Workload label or keyword -> prior.")

    @field_validator("acceptance", mode="before")
    @classmethod
    def _merge_defaults(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        defaults = value.get("_defaults", {})
        if not isinstance(defaults, dict):
            raise ValueError("_defaults must be a mapping, e.g. {request_sd: 0.45, step_sd: 0.7}")
        return {key: ({**defaults, **prior} if isinstance(prior, dict) else prior)
                for key, prior in value.items() if key != "_defaults"}

    @model_validator(mode="after")
    def _default_and_aliases(self) -> DrafterProfile:
        if "default" not in self.acceptance:
            raise ValueError("acceptance needs a 'default' prior (unlabelled traffic)")
        for alias, target in self.aliases.items():
            if target not in self.acceptance:
                raise ValueError(f"aliases.{alias}: unknown prior {target!r}; priors: "
                                 f"{', '.join(sorted(self.acceptance))}")
        return self

    @property
    def parallel(self) -> bool:
        return self.kind == "parallel"

    @property
    def priors(self) -> dict[str, AcceptancePrior]:
        return self.acceptance

    def prior_for(self, workload: str | None) -> tuple[str, AcceptancePrior]:
        """The prior of a workload label: exact benchmark, alias, keyword, else ``default``."""
        key = (workload or "").strip().lower()
        if key in self.acceptance:
            return key, self.acceptance[key]
        if key in self.aliases:
            name = self.aliases[key]
            return name, self.acceptance[name]
        for word, name in self.aliases.items():
            if word and word in key:
                return name, self.acceptance[name]
        return "default", self.acceptance["default"]


class KvCache(_Strict):
    tokens: int = Field(ge=1, description="KV cache capacity in tokens.")
    block_size: int = Field(ge=1, description="KV block size in tokens (vLLM: 16).")


class ServerStart(_Strict):
    """What starting one server costs: launch to serving (weights loaded, graphs captured)."""

    seconds: Seconds = Field(description="Seconds from launching the server to its first "
                                         "healthy answer, on a warm node.")
    source: str = Field(min_length=1, description="Where the figure comes from, in words.")


class Profile(_Strict):
    """A target model on a hardware configuration, with the drafters it can use."""

    name: str = Field(default="", description="Profile name (default: the file name).")
    model: str = Field(description="Target model (Hugging Face id).")
    hardware: str = Field(description="Hardware, parallelism and engine, in words.")
    model_facts: dict[str, int | float | str] = Field(
        default_factory=dict, description="Architecture facts the costs derive from.")
    cost: Annotated[AnalyticCost | TableCost, Field(discriminator="law")]
    kv_cache: KvCache
    drafters: dict[str, DrafterProfile]
    start: ServerStart | None = Field(
        default=None, description="Server start time and its source (absent: a start is "
                                  "not charged, and the cost says so).")
    source: str = Field(default="", description="File the profile was read from (set on load).")

    @model_validator(mode="after")
    def _drafter_costs_have_a_table(self) -> Profile:
        for name, drafter in self.drafters.items():
            if name == "none":
                raise ValueError("drafters.none: 'none' means no drafter; pick another name")
            if isinstance(drafter.cost, TableDraftCost) and (
                    not isinstance(self.cost, TableCost) or self.cost.table.draft_step_ms is None):
                raise ValueError(f"drafters.{name}.cost: law 'table' needs cost.law 'table' "
                                 "with a draft_step_ms grid")
        return self

    @property
    def kv_cache_tokens(self) -> int:
        return self.kv_cache.tokens

    @property
    def kv_block_size(self) -> int:
        return self.kv_cache.block_size

    def drafter(self, name: str) -> DrafterProfile | None:
        """The drafter named ``name`` (None for ``none``); ConfigError lists the known ones."""
        if name == "none":
            return None
        if name not in self.drafters:
            raise ConfigError(
                f"unknown sim drafter {name!r} for profile {self.name!r}; known drafters: "
                f"{', '.join([*sorted(self.drafters), 'none'])} (policy key sim.drafter)")
        return self.drafters[name]


def _shipped() -> dict[str, Any]:
    root = resources.files("autotune.backends.sim") / "profiles"
    return {p.name[: -len(".yaml")]: p for p in root.iterdir() if p.name.endswith(".yaml")}


def known_profiles() -> list[str]:
    """Names of the profiles shipped with the simulator."""
    return sorted(_shipped())


def known_drafters() -> list[str]:
    """Drafter names of the shipped profiles, and ``none``."""
    names = {d for p in known_profiles() for d in load_profile(p).drafters}
    return [*sorted(names), "none"]


def profile_source(name: str) -> Path:
    """The file behind a shipped name or a path; ConfigError lists the shipped names."""
    shipped = _shipped()
    if name in shipped:
        return Path(str(shipped[name]))
    if name.endswith((".yaml", ".yml")) or "/" in name or "\\" in name:
        path = Path(name).expanduser()
        if not path.is_file():
            raise ConfigError(f"{path}: sim profile file not found (policy key sim.profile); "
                              "give an existing YAML file or a shipped profile: "
                              f"{', '.join(sorted(shipped))}")
        return path
    raise ConfigError(f"unknown sim profile {name!r}; known profiles: "
                      f"{', '.join(sorted(shipped))}, or a path to a profile YAML file "
                      "(policy key sim.profile)")


_LAWS = ("analytic", "table")


def _format_error(source: Path, err: ValidationError) -> str:
    lines = [f"{source}: invalid sim profile:"]
    for e in err.errors():
        parts: list[str] = []
        loc = [str(part) for part in e["loc"]]
        for i, part in enumerate(loc):
            tag = i > 0 and loc[i - 1] == "cost" and part in _LAWS
            if part.startswith("function-") or tag:
                continue  # validator wrappers and the cost law's tag are not keys of the file
            parts.append(part)
        key = ".".join(parts)
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key (docs/simulator.md lists the fields)"
        elif e["type"] == "missing":
            msg = "required key is missing"
        elif "input" in e and not isinstance(e["input"], dict | list):
            msg = f"{msg} (got {e['input']!r})"
        lines.append(f"  {key or '(top level)'}: {msg.removeprefix('Value error, ')}")
    return "\n".join(lines)


@cache
def load_profile(name: str) -> Profile:
    """Load a shipped profile by name, or a profile YAML file by path."""
    import yaml

    path = profile_source(name)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: invalid YAML: {getattr(e, 'problem', e)}") from e
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read sim profile: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a sim profile is a YAML mapping with keys model, hardware, "
                          f"cost, kv_cache, drafters; got {type(data).__name__}")
    data = {"name": path.name.removesuffix(".yaml").removesuffix(".yml"), **data,
            "source": str(path)}
    try:
        return Profile.model_validate(data, context={"base": str(path.parent)})
    except ValidationError as e:
        raise ConfigError(_format_error(path, e)) from e
