"""What the predictor knows before it measures anything: the target model, its drafter and the
hardware of a replica, and the step-cost coefficients that follow from them.

- The **target model** comes from its ``config.json``
  (:func:`~autotune.predict.model_config.find_model_config`: a local path, the local Hugging
  Face cache, or the published configs autotune ships): layers, hidden size, attention layout
  (grouped-query or MLA latent), dense or mixture-of-experts (experts, experts per token),
  weight precision.
- The **drafter** from the policy's speculative method: a *parallel* drafter (DSpark) drafts a
  whole window in one forward of its few layers; a *sequential* one (EAGLE, EAGLE-3, MTP, a
  separate draft model) runs one forward per drafted position. A draft model's own
  ``config.json`` gives its size.
- The **hardware** from the policy (``hardware: {gpu, count}``, :mod:`autotune.predict.hardware`).

The coefficients use stated fractions of peak bandwidth and FLOPs and an assumed per-layer
overhead (kernel launches, norms, all-reduces); the predictor fits a multiplier per cost part to
the runs it pays for, around these priors, wider where a fact is unknown. Nothing here comes
from the simulator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.predict.hardware import HardwareFacts, hardware_facts

__all__ = ["PARALLEL_DRAFTERS", "SEQUENTIAL_DRAFTERS", "DrafterFacts", "Facts", "ModelFacts",
           "UndescribedReplica", "describe_replica", "kimi_h200_facts"]

#: Speculative methods that draft a whole window in one forward.
PARALLEL_DRAFTERS = frozenset({"dspark"})
#: Methods that run one draft forward per drafted position.
SEQUENTIAL_DRAFTERS = frozenset({"eagle", "eagle3", "mtp", "draft_model", "medusa",
                                 "mlp_speculator"})
#: Methods with no draft network (prompt lookup).
MODEL_FREE_DRAFTERS = frozenset({"ngram", "suffix"})
#: DSpark checkpoints (novita) have 3 draft layers; EAGLE-style heads one.
_DEFAULT_DRAFT_LAYERS = {"dspark": 3}


def _int(cfg: Mapping[str, Any], *keys: str, default: int = 0) -> int:
    for key in keys:
        v = cfg.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return default


def _weight_bytes(cfg: Mapping[str, Any]) -> tuple[float, float]:
    """Bytes per weight: (everything but routed experts, routed experts)."""
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    base = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}.get(dtype, 2.0)
    quant = cfg.get("quantization_config")
    if not isinstance(quant, Mapping):
        return base, base
    bits = quant.get("bits") or quant.get("w_bit") or quant.get("weight_bits")
    if quant.get("quant_method") == "fp8" or str(quant.get("fmt", "")).startswith("e4m3"):
        bits = 8
    if not isinstance(bits, int | float):
        return base, base
    group = quant.get("group_size")
    per = bits / 8.0 + (2.0 / float(group) if isinstance(group, int) and group > 0 else 0.0)
    if quant.get("targets") == "routed_experts":
        return base, per
    return per, per


@dataclass(frozen=True)
class ModelFacts:
    """A transformer's shape, as its ``config.json`` states it."""

    name: str
    source: str
    layers: int
    hidden: int
    vocab: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    dense_ffn: int
    mla_latent: int = 0          # kv_lora_rank + qk_rope_head_dim (0: not MLA)
    mla_q_rank: int = 0
    mla_qk_head: int = 0         # qk_nope_head_dim + qk_rope_head_dim
    mla_v_head: int = 0
    mla_kv_rank: int = 0
    moe_layers: int = 0
    routed_experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    expert_ffn: int = 0
    weight_bytes: float = 2.0
    expert_weight_bytes: float = 2.0

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], name: str, source: str) -> ModelFacts:
        """Read a Hugging Face ``config.json`` (Llama-, Qwen-, Mixtral- and DeepSeek-style)."""
        layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers")
        hidden = _int(cfg, "hidden_size", "n_embd", "d_model")
        heads = _int(cfg, "num_attention_heads", "n_head")
        if not (layers and hidden and heads):
            raise ValueError(f"{source}: config.json lacks num_hidden_layers, hidden_size or "
                             "num_attention_heads")
        kv_heads = _int(cfg, "num_key_value_heads", default=heads)
        head_dim = _int(cfg, "head_dim", default=hidden // heads)
        experts = _int(cfg, "n_routed_experts", "num_local_experts", "num_experts")
        per_token = _int(cfg, "num_experts_per_tok", "num_experts_per_token", "top_k")
        dense_first = _int(cfg, "first_k_dense_replace")
        kv_rank = _int(cfg, "kv_lora_rank")
        rope = _int(cfg, "qk_rope_head_dim")
        base_bytes, expert_bytes = _weight_bytes(cfg)
        return cls(
            name=name, source=source, layers=layers, hidden=hidden,
            vocab=_int(cfg, "vocab_size", default=32000), attention_heads=heads,
            kv_heads=kv_heads, head_dim=head_dim,
            dense_ffn=_int(cfg, "intermediate_size", "n_inner", default=4 * hidden),
            mla_latent=kv_rank + rope if kv_rank else 0,
            mla_q_rank=_int(cfg, "q_lora_rank"), mla_qk_head=_int(cfg, "qk_nope_head_dim") + rope,
            mla_v_head=_int(cfg, "v_head_dim"), mla_kv_rank=kv_rank,
            moe_layers=layers - dense_first if experts else 0, routed_experts=experts,
            experts_per_token=per_token if experts else 0,
            shared_experts=_int(cfg, "n_shared_experts", "num_shared_experts"),
            expert_ffn=_int(cfg, "moe_intermediate_size", "intermediate_size") if experts else 0,
            weight_bytes=base_bytes, expert_weight_bytes=expert_bytes)

    @property
    def mla(self) -> bool:
        return self.mla_latent > 0

    @property
    def attention_params(self) -> float:
        """Attention weights of one layer."""
        h = self.hidden
        if self.mla:
            heads = self.attention_heads
            q = (h * self.mla_q_rank + self.mla_q_rank * heads * self.mla_qk_head
                 if self.mla_q_rank else h * heads * self.mla_qk_head)
            rope = self.mla_latent - self.mla_kv_rank
            nope = self.mla_qk_head - rope
            kv = h * self.mla_latent + self.mla_kv_rank * heads * (nope + self.mla_v_head)
            return float(q + kv + heads * self.mla_v_head * h)
        return float(h * self.head_dim * (self.attention_heads + 2 * self.kv_heads)
                     + self.attention_heads * self.head_dim * h)

    @property
    def expert_params(self) -> float:
        """One routed expert of one layer (gate, up and down projections)."""
        return 3.0 * self.hidden * self.expert_ffn

    @property
    def non_expert_params(self) -> float:
        dense_layers = self.layers - self.moe_layers
        return (self.layers * self.attention_params
                + dense_layers * 3.0 * self.hidden * self.dense_ffn
                + self.moe_layers * self.shared_experts * self.expert_params
                + 2.0 * self.vocab * self.hidden)

    @property
    def routed_params(self) -> float:
        return self.moe_layers * self.routed_experts * self.expert_params

    @property
    def active_params(self) -> float:
        """Weights one token passes through (the embedding lookup aside)."""
        return (self.non_expert_params - self.vocab * self.hidden
                + self.moe_layers * self.experts_per_token * self.expert_params)

    @property
    def kv_values_per_token(self) -> int:
        """KV-cache values one context token holds, over all layers (per replica)."""
        per_layer = self.mla_latent if self.mla else 2 * self.kv_heads * self.head_dim
        return self.layers * per_layer


@dataclass(frozen=True)
class DrafterFacts:
    """The drafter of a speculative method: how it drafts and how big it is."""

    method: str
    parallel: bool
    layers: int
    params: float        # weights one drafted token passes through
    source: str

    @classmethod
    def of(cls, method: str, target: ModelFacts, draft: ModelFacts | None = None,
           layers: int | None = None) -> DrafterFacts:
        method = method.lower()
        if method in MODEL_FREE_DRAFTERS:
            return cls(method, False, 0, 0.0, f"{method}: no draft network")
        if draft is not None:
            return cls(method, method in PARALLEL_DRAFTERS, draft.layers,
                       draft.active_params + draft.vocab * draft.hidden, draft.source)
        n = layers or _DEFAULT_DRAFT_LAYERS.get(method, 1)
        per_layer = target.attention_params + 3.0 * target.hidden * target.dense_ffn
        return cls(method, method in PARALLEL_DRAFTERS, n,
                   n * per_layer + target.vocab * target.hidden,
                   f"{method}: {n} layer(s) of the target's width (assumed)")


@dataclass(frozen=True)
class Facts:
    """Model, drafter and hardware of a replica, and the step-cost coefficients they give.

    ``overhead_per_layer_s`` (kernel launches, norms, attention kernels, and the two
    all-reduces of a tensor-parallel layer) and the achievable fractions of peak bandwidth and
    FLOPs are assumptions, fitted per part from the runs.
    """

    model: ModelFacts
    drafter: DrafterFacts
    hardware: HardwareFacts
    tensor_parallel: int = 1
    memory_efficiency: float = 0.7
    compute_efficiency: float = 0.5
    overhead_per_layer_s: float = 200e-6   # tensor parallel > 1
    overhead_per_layer_tp1_s: float = 60e-6
    gpu_memory_utilization: float = 0.9
    reserve_bytes: float = 6e9
    kv_bytes: float = 2.0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def moe_layers(self) -> int:
        return self.model.moe_layers

    @property
    def routed_experts(self) -> int:
        return self.model.routed_experts

    @property
    def experts_per_token(self) -> int:
        return self.model.experts_per_token

    def _overhead(self) -> float:
        return (self.overhead_per_layer_s if self.tensor_parallel > 1 else
                self.overhead_per_layer_tp1_s)

    def _kv_shards(self) -> int:
        """TP ranks the KV cache is split over (an MLA latent is replicated on every rank)."""
        if self.model.mla:
            return 1
        return max(1, min(self.tensor_parallel, self.model.kv_heads))

    def kv_cache_tokens(self) -> float:
        """Context tokens the replica's KV cache holds."""
        m, tp = self.model, max(self.tensor_parallel, 1)
        weights = (m.non_expert_params * m.weight_bytes
                   + m.routed_params * m.expert_weight_bytes) / tp
        free = (self.hardware.memory_bytes * self.gpu_memory_utilization - weights
                - self.reserve_bytes)
        per_token = m.kv_values_per_token * self.kv_bytes / self._kv_shards()
        return max(free, 0.0) / per_token

    def coefficients(self) -> dict[str, float]:
        """Seconds per unit of each part of a step (see :mod:`autotune.predict.step_cost`)."""
        m, d, hw = self.model, self.drafter, self.hardware
        tp = max(self.tensor_parallel, 1)
        bw = hw.hbm_bytes_per_s * self.memory_efficiency
        flops = hw.bf16_flops * self.compute_efficiency
        # prefill attention per (query, key) pair and head: q·k over the key width, then
        # attention·v over the value width (MLA, absorbed: the latent and its rank)
        pair_width = m.mla_latent + m.mla_kv_rank if m.mla else 2 * m.head_dim
        return {
            "fixed_s": m.layers * self._overhead() + m.non_expert_params * m.weight_bytes
            / tp / bw,
            "expert_s": m.expert_params * m.expert_weight_bytes / tp / bw,
            "token_s": 2.0 * m.active_params / tp / flops,
            "kv_token_s": m.kv_values_per_token * self.kv_bytes / self._kv_shards() / bw,
            "pair_s": 2.0 * pair_width * m.attention_heads * m.layers / tp / flops,
            "draft_fixed_s": (d.layers * self._overhead() + d.params * m.weight_bytes / tp / bw
                              if d.layers else 0.0),
            "draft_token_s": 2.0 * d.params / tp / flops,
        }

    def describe(self) -> str:
        """One line: what the predictor assumes."""
        m, d, hw = self.model, self.drafter, self.hardware
        kind = (f"MoE {m.routed_experts} experts, {m.experts_per_token} per token"
                if m.routed_experts else "dense")
        hw_text = f"{hw.count}x {hw.kind}" + ("" if hw.known else " (unknown: learned)")
        drafter = ("no drafter" if not d.layers else
                   f"{'parallel' if d.parallel else 'sequential'} {d.method} drafter")
        return (f"{m.name}: {m.layers} layers, {kind}, {m.active_params / 1e9:.1f}B active; "
                f"{drafter}; {hw_text}, tensor parallel {self.tensor_parallel}")


def kimi_h200_facts() -> Facts:
    """Kimi-K2.6 with its DSpark drafter on 8×H200 (the seed's setting), from the shipped
    catalog; what tests and benchmarks use when they describe no other world."""
    return describe_replica(model="moonshotai/Kimi-K2.6", draft_model="novita/kimi-k2.6-dspark",
                            method="dspark", tensor_parallel=8, gpu="H200", gpu_count=8)


class UndescribedReplica(ValueError):
    """The predictor cannot describe a replica (the reason says what is missing)."""


def describe_replica(*, model: str, draft_model: str | None, method: str,
                     tensor_parallel: int, gpu: str | None, gpu_count: int) -> Facts:
    """The facts of a replica of a policy, from config.json files and the hardware table.

    Raises :class:`UndescribedReplica` when the target's ``config.json`` is nowhere to be
    found (a local path, the Hugging Face cache, or autotune's catalog): its shape is what the
    step cost is built on. A sequential draft model without a config is assumed one layer of
    the target's width (noted), and unknown hardware is learned from the runs.
    """
    from autotune.predict.model_config import catalog_models, find_model_config

    found = find_model_config(model)
    if found is None:
        raise UndescribedReplica(
            f"no config.json for {model!r} (not a local folder with one, not in the Hugging "
            f"Face cache, not among the published configs autotune ships: "
            f"{', '.join(catalog_models())})")
    cfg, source = found
    try:
        target = ModelFacts.from_config(cfg, model, source)
    except ValueError as e:
        raise UndescribedReplica(str(e)) from e
    notes = []
    draft = None
    if draft_model and method.lower() not in PARALLEL_DRAFTERS | MODEL_FREE_DRAFTERS:
        draft_found = find_model_config(draft_model)
        if draft_found is not None:
            try:
                draft = ModelFacts.from_config(draft_found[0], draft_model, draft_found[1])
            except ValueError:
                draft = None
        if draft is None:
            notes.append(f"no config.json for the draft {draft_model!r}: assumed one layer of "
                         "the target's width")
    hardware = hardware_facts(gpu, gpu_count)
    if not hardware.known:
        notes.append(f"hardware {gpu or 'not given'}: step cost learned from the runs "
                     "(policy key hardware: {gpu, count})")
    return Facts(target, DrafterFacts.of(method, target, draft), hardware,
                 tensor_parallel=tensor_parallel, notes=tuple(notes))
