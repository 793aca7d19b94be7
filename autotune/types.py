"""Value types every layer shares: requests, trial configs, measurements, acceptance curves.

This module imports nothing from autotune but the SLO rule (:mod:`autotune.slo`, a leaf), so
every subpackage can depend on it without cycles. The types are immutable values; the arrays
inside a :class:`Measurement` must not be mutated by whoever receives them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, Protocol

from autotune.slo import Slo, SloCheck, quantile_ms

if TYPE_CHECKING:  # no numpy at import: read-only commands (store, tables) start faster
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]

__all__ = [
    "KNOB_NAMES",
    "SPECULATIVE_CONFIG_KEYS",
    "AcceptanceCounts",
    "AcceptanceCurve",
    "CapacityHint",
    "FloatArray",
    "GreedyOutput",
    "Measurement",
    "OutputCheck",
    "Progress",
    "ReplaySchedule",
    "Request",
    "ServeSpec",
    "Slo",
    "SloCheck",
    "TrialConfig",
    "outputs_as_dict",
    "outputs_from_dict",
    "quantile_ms",
]

ReplayMode = Literal["trace", "closed"]


def __getattr__(name: str) -> Any:
    if name == "FloatArray":  # the array alias, built on first use (numpy loads late)
        import numpy as np
        import numpy.typing as npt

        return npt.NDArray[np.float64]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: Keys autotune may put in a ``--speculative-config`` JSON: fields of vLLM's SpeculativeConfig.
SPECULATIVE_CONFIG_KEYS = frozenset(
    {
        "model",
        "method",
        "num_speculative_tokens",
        "draft_tensor_parallel_size",
        "enable_adaptive_verification",
        "dspark_draft_topk",
        "num_speculative_tokens_per_batch_size",
        "prompt_lookup_max",
        "prompt_lookup_min",
    }
)


class Progress(Protocol):
    """Progress callback: ``progress(done, total)``; ``total`` is None when unknown."""

    def __call__(self, done: int, total: int | None) -> None: ...


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a traffic sample (the README's "The sample format").

    ``acceptance`` is the DSpark confidence head's *prediction*: conditional per-position
    acceptance probabilities c_1..c_m, not the truth. ``line`` is the sample line it came from.
    """

    id: str
    prompt_tokens: int
    output_tokens: int
    arrival_s: float | None = None
    workload: str | None = None
    prompt: str | None = None
    acceptance: tuple[float, ...] | None = None
    temperature: float = 0.0
    line: int = 0


@dataclass(frozen=True, slots=True)
class CapacityHint:
    """Where a strategy expects a config's capacity: ``scale`` (× the sample's own rate) and
    the standard deviation of its log, ``log_sd``. The capacity reading may start there and
    choose its rates by it instead of halving or doubling from 1×."""

    scale: float
    log_sd: float


@dataclass(frozen=True, slots=True)
class OutputCheck:
    """Prompts a trial decodes greedily after its replay, so that its outputs can be compared
    with other configs' (docs/outputs.md): the same ``requests`` (their prompts) for every
    trial of a workload, ``max_tokens`` tokens each, temperature 0, end-of-sequence ignored."""

    requests: tuple[Request, ...]
    max_tokens: int


@dataclass(frozen=True, slots=True)
class GreedyOutput:
    """One prompt's greedily decoded tokens. ``margins[t]``: the log-probability of the chosen
    token minus that of the runner-up at position t (NaN: unknown); ``runner_up[t]``: the
    runner-up's token id (-1: unknown). Both are empty when the engine returned no
    log-probabilities."""

    tokens: tuple[int, ...]
    margins: tuple[float, ...] = ()
    runner_up: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ReplaySchedule:
    """What a replica replays: requests in arrival order plus how to pace them.

    ``mode="trace"`` honours ``arrival_s`` scaled by ``time_scale`` (2.0 = twice as fast);
    ``mode="closed"`` keeps ``concurrency`` requests in flight and ignores arrival times.
    The first ``warmup_requests`` requests run but are left out of the statistics.
    ``requests`` may be any re-iterable (a list, or a streaming reader over a file).

    ``capacity_slo`` (trace mode only) asks the trial runner for the *capacity* reading of the
    trial: replay the trace at several rates (``time_scale``) on the same replica and keep the
    highest rate whose p99 TTFT and p99 ITL meet this SLO (DistServe's goodput). Without it the
    trace is replayed once, at ``time_scale``. ``capacity_hint``: where the strategy that chose
    the config expects its capacity (None: no expectation). ``output_check``: prompts the
    trial decodes greedily after its replay (None: no check; a backend without tokens ignores
    it). ``capacity_window_s``: replica seconds of arrivals one capacity reading replays (a
    slice of ``requests``; None: all).
    """

    requests: Iterable[Request]
    mode: ReplayMode = "trace"
    time_scale: float = 1.0
    concurrency: int = 1
    warmup_requests: int = 0
    seed: int = 0
    label: str = ""
    capacity_slo: Slo | None = None
    capacity_hint: CapacityHint | None = None
    output_check: OutputCheck | None = None
    capacity_window_s: float | None = None


@dataclass(frozen=True, slots=True, order=True)
class TrialConfig:
    """The four knobs a trial sets. ``num_speculative_tokens=0`` means no drafter."""

    num_speculative_tokens: int
    enable_adaptive_verification: bool
    max_num_seqs: int
    max_num_batched_tokens: int

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialConfig:
        return cls(
            num_speculative_tokens=int(data["num_speculative_tokens"]),
            enable_adaptive_verification=bool(data["enable_adaptive_verification"]),
            max_num_seqs=int(data["max_num_seqs"]),
            max_num_batched_tokens=int(data["max_num_batched_tokens"]),
        )

    def short(self) -> str:
        """Compact human label, e.g. ``n=5 av seqs=64 tok=8192``."""
        av = " av" if self.enable_adaptive_verification else ""
        return (
            f"n={self.num_speculative_tokens}{av} seqs={self.max_num_seqs} "
            f"tok={self.max_num_batched_tokens}"
        )


#: The knobs a trial sets, in order: the field names of :class:`TrialConfig`.
KNOB_NAMES: tuple[str, ...] = tuple(f.name for f in fields(TrialConfig))


@dataclass(frozen=True, slots=True)
class ServeSpec:
    """The fixed part of every trial's server (the policy's ``serve`` section)."""

    model: str
    draft_model: str | None
    method: str
    draft_block_size: int
    tensor_parallel_size: int = 8
    gpus_per_replica: int = 8
    max_model_len: int = 20000
    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    command: tuple[str, ...] = ()

    def speculative_config(self, config: TrialConfig) -> dict[str, Any] | None:
        """The exact ``--speculative-config`` JSON object for ``config`` (None: no drafter)."""
        if config.num_speculative_tokens <= 0:
            return None
        spec: dict[str, Any] = {"method": self.method}
        if self.draft_model:
            spec["model"] = self.draft_model
        spec["num_speculative_tokens"] = config.num_speculative_tokens
        if config.enable_adaptive_verification:
            spec["enable_adaptive_verification"] = True
        return spec


@dataclass(frozen=True, slots=True)
class AcceptanceCounts:
    """Speculative-decoding counters over a replay, as vLLM's ``/metrics`` exposes them.

    ``accepted_per_pos[k]`` counts drafts whose token at position k (0-based) was accepted;
    the per-position acceptance rate is ``accepted_per_pos[k] / drafts`` (a survival, since a
    token is only accepted if every earlier one was).
    """

    drafts: int
    draft_tokens: int
    accepted: int
    accepted_per_pos: tuple[int, ...]

    @property
    def rate(self) -> float:
        return self.accepted / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def per_position(self) -> tuple[float, ...]:
        if not self.drafts:
            return tuple(0.0 for _ in self.accepted_per_pos)
        return tuple(a / self.drafts for a in self.accepted_per_pos)

    @property
    def mean_accepted_length(self) -> float:
        """Tokens emitted per verify step: 1 (the bonus/corrected token) + accepted drafts."""
        return 1.0 + (self.accepted / self.drafts if self.drafts else 0.0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted": self.accepted,
            "accepted_per_pos": list(self.accepted_per_pos),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AcceptanceCounts:
        return cls(
            drafts=int(data["drafts"]),
            draft_tokens=int(data["draft_tokens"]),
            accepted=int(data["accepted"]),
            accepted_per_pos=tuple(int(x) for x in data["accepted_per_pos"]),
        )


#: ``Measurement.extra`` key: the most requests the replica held at once in a replay (sent and
#: not yet finished, warm-up included), counted from the client's side on every backend. The
#: replica runs at most that many sequences, so a ``max_num_seqs`` at or above it never bound.
PEAK_IN_FLIGHT = "peak_in_flight"

#: ``Measurement.extra`` keys: the smallest ``max_num_seqs`` and ``max_num_batched_tokens``
#: under which the replica would have run the same schedule. A cap at or above it refused
#: nothing, so two configs that differ only in such caps read alike. The simulator counts them
#: from its scheduler: the most requests running at once, and the most tokens a step asked
#: for (each running request's window or the rest of its prompt, each admitted request's
#: whole prompt), each plus one when a request was left waiting after admission. A backend
#: that cannot see its scheduler leaves them out; :data:`PEAK_IN_FLIGHT` bounds the first
#: from above.
SEQS_REACHED = "max_num_seqs_reached"
TOKENS_REACHED = "max_num_batched_tokens_reached"

#: The ``Measurement.extra`` keys that bound a cap from above: a capacity reading keeps the
#: largest over its replays.
CAP_BOUNDS = (PEAK_IN_FLIGHT, SEQS_REACHED, TOKENS_REACHED)


@dataclass(frozen=True)
class Measurement:
    """What one replay of a schedule on one replica measured; the same shape from every backend.

    Per-request arrays hold one entry per *measured* request (warm-up excluded), in completion
    order: ``ttft_s`` (time to first token), ``tpot_s`` (mean time per output token after the
    first), ``e2e_s`` (end to end), ``output_tokens``, and ``ok`` (False: the request errored).
    ``itl_s`` pools inter-token gaps (one per decode step that emitted tokens, as vLLM's
    ``inter_token_latency`` histogram does); a backend may subsample it uniformly when huge.
    ``duration_s`` is the measured window (first measured arrival to last measured completion),
    in the replica's clock (simulated seconds for the simulator). ``busy_s`` is what the replay
    cost the replica: from the first request sent (warm-up included) to the last completion, in
    the same clock — on real hardware, replica time spent (NaN: the backend did not say).
    ``outputs``: the schedule's :class:`OutputCheck` decoded greedily, one per prompt (None: not
    checked, e.g. the simulator, which has no tokens).
    """

    ttft_s: FloatArray
    tpot_s: FloatArray
    e2e_s: FloatArray
    output_tokens: npt.NDArray[np.int64]
    ok: npt.NDArray[np.bool_]
    itl_s: FloatArray
    duration_s: float
    wall_time_s: float
    acceptance: AcceptanceCounts | None = None
    errors: tuple[str, ...] = ()
    extra: Mapping[str, float] = field(default_factory=dict)
    busy_s: float = math.nan
    outputs: tuple[GreedyOutput, ...] | None = None

    @property
    def requests(self) -> int:
        return int(self.ttft_s.size)

    def meets_slo(self, slo: Slo) -> npt.NDArray[np.bool_]:
        """Per request: meets the SLO as goodput counts it (:meth:`Slo.met_by_requests`)."""
        return slo.met_by_requests(self.ok, self.ttft_s, self.tpot_s)

    def decode_totals(self) -> tuple[float, float, float]:
        """Σ decode time (E2E - TTFT) and Σ decoded tokens (output - 1) over completed
        requests, and the measured span: what a mean step time and a mean decoding batch are
        read from (any server's per-request latencies give them)."""
        ok = self.ok
        return (float((self.e2e_s - self.ttft_s)[ok].sum()),
                float((self.output_tokens[ok] - 1).clip(min=0).sum()), float(self.duration_s))

    def slo_check(self, slo: Slo) -> SloCheck:
        """The replay judged against ``slo`` (:meth:`Slo.check`): p99s, failures, verdict."""
        return slo.check(self.ok, self.ttft_s, self.itl_s)

    def summary(self, slo: Slo) -> dict[str, Any]:
        """Scalar metrics (JSON-ready): throughputs, goodput, latency quantiles, acceptance."""
        span = self.duration_s if self.duration_s > 0 else math.nan
        done = self.ok
        out: dict[str, Any] = {
            "requests": self.requests,
            "failed_requests": int((~done).sum()),
            "duration_s": self.duration_s,
            "wall_time_s": self.wall_time_s,
            "output_tokens_per_s": float(self.output_tokens[done].sum()) / span,
            "requests_per_s": float(done.sum()) / span,
            "goodput": float(self.meets_slo(slo).sum()) / span,
            "slo_attainment": float(self.meets_slo(slo).mean()) if self.requests else math.nan,
            "tpot_mean_ms": float(self.tpot_s[done].mean()) * 1000.0 if done.any() else math.nan,
        }
        for name, values in (("ttft", self.ttft_s[done]), ("itl", self.itl_s),
                             ("e2e", self.e2e_s[done])):
            for q in (50, 90, 99):
                out[f"{name}_p{q}_ms"] = quantile_ms(values, q / 100.0)
        if self.acceptance is not None:
            out["acceptance_rate"] = self.acceptance.rate
            out["mean_accepted_length"] = self.acceptance.mean_accepted_length
            out["per_position_acceptance"] = list(self.acceptance.per_position)
            out["acceptance"] = self.acceptance.as_dict()
        out.update({k: float(v) for k, v in self.extra.items()})
        out = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
               for k, v in out.items()}
        if self.outputs is not None:
            out["outputs"] = outputs_as_dict(self.outputs)
        return out


def outputs_as_dict(outputs: Iterable[GreedyOutput]) -> dict[str, Any]:
    """Greedy outputs as JSON (a trial's ``metrics["outputs"]``): per prompt its tokens, and
    its margins (None when unknown) and runner-up ids when the engine gave log-probabilities."""
    items = list(outputs)
    return {
        "tokens": [list(o.tokens) for o in items],
        "margins": [[round(m, 5) if math.isfinite(m) else None for m in o.margins]
                    for o in items],
        "runner_up": [list(o.runner_up) for o in items],
    }


def outputs_from_dict(data: Mapping[str, Any]) -> tuple[GreedyOutput, ...]:
    """The inverse of :func:`outputs_as_dict` (a stored trial's greedy outputs)."""
    tokens = data.get("tokens") or []
    margins = data.get("margins") or [[] for _ in tokens]
    runner_up = data.get("runner_up") or [[] for _ in tokens]
    return tuple(
        GreedyOutput(tuple(int(x) for x in t),
                     tuple(math.nan if m is None else float(m) for m in ms),
                     tuple(int(r) for r in rs))
        for t, ms, rs in zip(tokens, margins, runner_up, strict=False))


@dataclass(frozen=True, slots=True)
class AcceptanceCurve:
    """Per-position conditional acceptance c_1..c_m and what follows from it.

    Survival s_k = c_1·…·c_k; expected tokens per verify step with window n is 1 + Σ_{k≤n} s_k.
    ``expected`` optionally carries the already-averaged E[1+Σ s_k] per window (the mean of
    per-request curves, which differs from the curve of the mean c_k on mixed traffic) and
    ``expected_lo``/``expected_hi`` a confidence interval of it.
    """

    conditional: tuple[float, ...]
    expected: tuple[float, ...] = ()
    expected_lo: tuple[float, ...] = ()
    expected_hi: tuple[float, ...] = ()
    samples: int = 0

    @property
    def survival(self) -> tuple[float, ...]:
        out: list[float] = []
        s = 1.0
        for c in self.conditional:
            s *= c
            out.append(s)
        return tuple(out)

    def expected_tokens(self, n: int) -> float:
        """Expected tokens emitted per verify step with window ``n`` (1 when n = 0)."""
        if n <= 0:
            return 1.0
        if self.expected and n <= len(self.expected):
            return self.expected[n - 1]
        surv = self.survival
        return 1.0 + sum(surv[: min(n, len(surv))])
