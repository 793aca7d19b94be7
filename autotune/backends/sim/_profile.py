"""Hardware + model profiles of the simulator: step-cost coefficients, KV capacity, drafters.

A profile is a YAML file in ``profiles/`` (shipped as package data). Every field is documented
in the file with its source or the fit that produced it; docs/simulator.md explains the fit.
Profiles are parsed into frozen dataclasses; nothing here is mutable after loading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from autotune.errors import ConfigError

__all__ = [
    "AcceptancePrior",
    "CostModel",
    "DrafterProfile",
    "HeadMiscalibration",
    "Profile",
    "known_drafters",
    "known_profiles",
    "load_profile",
]

DRAFTERS = ("dspark", "eagle3-mla", "none")


@dataclass(frozen=True, slots=True)
class CostModel:
    """Target forward time of one engine step (seconds), summed from independent parts."""

    fixed_s: float
    expert_s: float
    moe_layers: int
    routed_experts: int
    experts_per_token: int
    token_s: float
    kv_token_s: float
    attn_pair_s: float


@dataclass(frozen=True, slots=True)
class AcceptancePrior:
    """A benchmark's distribution of per-request conditional acceptance profiles.

    The mean request has logit(c_k) = logit(c1) + slope·(k-1); each request shifts it by a
    normal ``request_sd`` (logits) and each decode step by a normal ``step_sd`` shared by the
    positions of that step (easy and hard stretches of text).
    """

    c1: float
    slope: float
    request_sd: float
    step_sd: float


@dataclass(frozen=True, slots=True)
class HeadMiscalibration:
    """How the confidence head's predictions deviate from the truth (hidden from the tuner).

    Per position k the head reports sigmoid(logit(c_k)/temperature_k + bias_k + noise) with
    temperature_k = ``temperature`` · exp(``temperature_sd``·N(0,1)) and bias_k =
    ``bias`` + ``bias_sd``·N(0,1), drawn once from ``seed``; noise ~ N(0, ``noise_sd``) per
    request and position.
    """

    temperature: float
    temperature_sd: float
    bias: float
    bias_sd: float
    noise_sd: float
    seed: int


@dataclass(frozen=True, slots=True)
class DrafterProfile:
    """One drafter on one target: its cost, its head's miscalibration, its acceptance truth."""

    name: str
    model: str
    parallel: bool
    block_size: int
    fixed_s: float
    per_position_s: float
    per_seq_position_s: float
    prefill_token_s: float
    head: HeadMiscalibration
    priors: Mapping[str, AcceptancePrior]
    aliases: Mapping[str, str]

    def draft_time(self, window: int, seqs: int, prefill_tokens: int) -> float:
        """Seconds the drafter adds to a step proposing ``window`` tokens for ``seqs`` seqs.

        A parallel (block) drafter runs one forward over the block (``fixed_s`` once): its cost
        is nearly flat in the window. A sequential drafter runs ``window`` dependent forwards
        (``fixed_s`` per forward). Both add ``per_position_s`` per drafted position and
        ``per_seq_position_s`` per drafted position per sequence, plus the drafter's pass over
        prefill tokens.
        """
        t = self.prefill_token_s * prefill_tokens
        if window <= 0 or seqs <= 0:
            return t
        passes = 1 if self.parallel else window
        return (t + passes * self.fixed_s + self.per_position_s * window
                + self.per_seq_position_s * seqs * window)

    def prior_for(self, workload: str | None) -> tuple[str, AcceptancePrior]:
        """The prior of a workload label: exact benchmark, alias, keyword, else ``default``."""
        key = (workload or "").strip().lower()
        if key in self.priors:
            return key, self.priors[key]
        if key in self.aliases:
            name = self.aliases[key]
            return name, self.priors[name]
        for word, name in self.aliases.items():
            if word and word in key:
                return name, self.priors[name]
        return "default", self.priors["default"]


@dataclass(frozen=True, slots=True)
class Profile:
    """A target model on a hardware configuration, with the drafters it can use."""

    name: str
    model: str
    hardware: str
    cost: CostModel
    kv_cache_tokens: int
    kv_block_size: int
    drafters: Mapping[str, DrafterProfile]

    def drafter(self, name: str) -> DrafterProfile | None:
        """The drafter named ``name`` (None for ``none``); ConfigError lists the known ones."""
        if name == "none":
            return None
        if name not in self.drafters:
            raise ConfigError(
                f"unknown sim drafter {name!r} for profile {self.name!r}; known drafters: "
                f"{', '.join([*sorted(self.drafters), 'none'])} (policy key sim.drafter)")
        return self.drafters[name]


def _req(data: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in data:
        raise ConfigError(f"sim profile {where}: missing key {key!r}")
    return data[key]


def _prior(data: Mapping[str, Any], where: str) -> AcceptancePrior:
    return AcceptancePrior(
        c1=float(_req(data, "c1", where)),
        slope=float(_req(data, "slope", where)),
        request_sd=float(_req(data, "request_sd", where)),
        step_sd=float(_req(data, "step_sd", where)),
    )


def _drafter(name: str, data: Mapping[str, Any], where: str) -> DrafterProfile:
    cost = _req(data, "cost", where)
    head = _req(data, "head", where)
    priors_raw = _req(data, "acceptance", where)
    defaults = priors_raw.get("_defaults", {})
    priors = {
        key: _prior({**defaults, **value}, f"{where}.acceptance.{key}")
        for key, value in priors_raw.items() if not key.startswith("_")
    }
    if "default" not in priors:
        raise ConfigError(f"sim profile {where}.acceptance: needs a 'default' prior")
    aliases = {str(k): str(v) for k, v in data.get("aliases", {}).items()}
    for alias, target in aliases.items():
        if target not in priors:
            raise ConfigError(f"sim profile {where}.aliases.{alias}: unknown prior {target!r}")
    return DrafterProfile(
        name=name,
        model=str(_req(data, "model", where)),
        parallel=bool(_req(data, "parallel", where)),
        block_size=int(_req(data, "block_size", where)),
        fixed_s=float(_req(cost, "fixed_s", where)),
        per_position_s=float(_req(cost, "per_position_s", where)),
        per_seq_position_s=float(_req(cost, "per_seq_position_s", where)),
        prefill_token_s=float(_req(cost, "prefill_token_s", where)),
        head=HeadMiscalibration(
            temperature=float(_req(head, "temperature", where)),
            temperature_sd=float(_req(head, "temperature_sd", where)),
            bias=float(_req(head, "bias", where)),
            bias_sd=float(_req(head, "bias_sd", where)),
            noise_sd=float(_req(head, "noise_sd", where)),
            seed=int(_req(head, "seed", where)),
        ),
        priors=priors,
        aliases=aliases,
    )


def _profile_files() -> dict[str, Any]:
    root = resources.files("autotune.backends.sim") / "profiles"
    return {p.name[: -len(".yaml")]: p for p in root.iterdir() if p.name.endswith(".yaml")}


def known_profiles() -> list[str]:
    """Names of the profiles shipped with the simulator."""
    return sorted(_profile_files())


def known_drafters() -> list[str]:
    return list(DRAFTERS)


@cache
def load_profile(name: str) -> Profile:
    """Load the shipped profile ``name``; ConfigError lists the known ones."""
    import yaml

    files = _profile_files()
    if name not in files:
        raise ConfigError(f"unknown sim profile {name!r}; known profiles: "
                          f"{', '.join(sorted(files))} (policy key sim.profile)")
    data = yaml.safe_load(files[name].read_text(encoding="utf-8"))
    where = f"{name}.yaml"
    cost = _req(data, "cost", where)
    facts = _req(data, "model_facts", where)
    kv = _req(data, "kv_cache", where)
    drafters = {
        key: _drafter(key, value, f"{where}: drafters.{key}")
        for key, value in _req(data, "drafters", where).items()
    }
    return Profile(
        name=name,
        model=str(_req(data, "model", where)),
        hardware=str(_req(data, "hardware", where)),
        cost=CostModel(
            fixed_s=float(_req(cost, "fixed_s", where)),
            expert_s=float(_req(cost, "expert_s", where)),
            moe_layers=int(_req(facts, "moe_layers", where)),
            routed_experts=int(_req(facts, "routed_experts", where)),
            experts_per_token=int(_req(facts, "experts_per_token", where)),
            token_s=float(_req(cost, "token_s", where)),
            kv_token_s=float(_req(cost, "kv_token_s", where)),
            attn_pair_s=float(_req(cost, "attn_pair_s", where)),
        ),
        kv_cache_tokens=int(_req(kv, "tokens", where)),
        kv_block_size=int(_req(kv, "block_size", where)),
        drafters=drafters,
    )
