"""What the replica model is evaluated on: the workload, the candidate configs, fitted factors.

:class:`WorkloadModel` holds a workload's per-request arrays in arrival order (prompt and
output lengths, arrivals, which requests are measured) and per-window acceptance tables from
the calibrated per-request acceptance curves; :class:`ConfigGrid` holds the candidate configs
as arrays; :class:`ReplicaFactors` are the few parts of the model fitted to measured runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autotune.acceptance import AcceptanceModel
from autotune.types import Request, Slo, TrialConfig

__all__ = ["FACTOR_NAMES", "THRESHOLDS", "ConfigGrid", "ReplicaFactors", "WorkloadModel"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Survival thresholds of adaptive verification's rule (keep a position while its survival is
#: worth its marginal step cost); index 0 keeps every position of the window.
THRESHOLDS = np.concatenate([[0.0], np.logspace(-3, 0, 40)])
_FACTOR_DEFAULTS = {"itl": 0.0, "ttft": 0.0, "slots": 0.0, "av": 0.0, "bias": 0.0}
FACTOR_NAMES = tuple(_FACTOR_DEFAULTS)


@dataclass(frozen=True)
class ReplicaFactors:
    """Fitted parts of the replica model (log multipliers unless noted).

    ``itl`` scales step durations against the ITL SLO, ``ttft`` the wait for the prefill
    budget, ``slots`` the wait for a free sequence slot, ``av`` the accepted tokens of adaptive
    verification beyond the static rule, ``bias`` the predicted objective.
    """

    itl: float = _FACTOR_DEFAULTS["itl"]
    ttft: float = _FACTOR_DEFAULTS["ttft"]
    slots: float = _FACTOR_DEFAULTS["slots"]
    av: float = _FACTOR_DEFAULTS["av"]
    bias: float = _FACTOR_DEFAULTS["bias"]


@dataclass(frozen=True)
class ConfigGrid:
    """Candidate configs as arrays."""

    configs: tuple[TrialConfig, ...]
    n: IntArray
    av: npt.NDArray[np.bool_]
    seqs: FloatArray
    tok: FloatArray

    @classmethod
    def of(cls, configs: Sequence[TrialConfig]) -> ConfigGrid:
        return cls(tuple(configs),
                   np.asarray([c.num_speculative_tokens for c in configs], dtype=np.int64),
                   np.asarray([c.enable_adaptive_verification and c.num_speculative_tokens > 0
                               for c in configs], dtype=bool),
                   np.asarray([c.max_num_seqs for c in configs], dtype=np.float64),
                   np.asarray([c.max_num_batched_tokens for c in configs], dtype=np.float64))

    def __len__(self) -> int:
        return len(self.configs)


class WorkloadModel:
    """Per-request arrays of a workload and per-window acceptance tables (built once)."""

    def __init__(self, requests: Sequence[Request], acceptance: AcceptanceModel, *,
                 warmup: int, slo: Slo, kv_tokens: float, mode: str = "trace",
                 time_scale: float = 1.0, concurrency: int = 1,
                 find_capacity: bool = True, window_s: float | None = None) -> None:
        order = sorted(range(len(requests)),
                       key=lambda i: (requests[i].arrival_s or 0.0, requests[i].line, i))
        self.prompt = np.asarray([max(requests[i].prompt_tokens, 1) for i in order], float)
        self.output = np.asarray([max(requests[i].output_tokens, 1) for i in order], float)
        arrivals = [requests[i].arrival_s for i in order]
        self.mode = "closed" if mode == "closed" or any(a is None for a in arrivals) else "trace"
        self.arrival = np.asarray([a or 0.0 for a in arrivals], float)
        self.arrival -= self.arrival[0] if self.arrival.size else 0.0
        n = self.prompt.size
        self.measured = np.arange(n) >= min(warmup, max(n - 1, 0))
        span_all = float(self.arrival[-1] - self.arrival[0]) if n > 1 else 0.0
        self.base_rate = (n - 1) / span_all if span_all > 0 else 1.0
        m = self.measured
        self.span = float(self.arrival[m][-1] - self.arrival[m][0]) if m.sum() > 1 else 0.0
        self.slo = slo
        self.kv_tokens = kv_tokens
        self.time_scale = time_scale
        self.concurrency = max(concurrency, 1)
        self.find_capacity = find_capacity and self.mode == "trace"
        #: replica seconds of arrivals one capacity reading replays (``replay.window_s``;
        #: None: the whole sample)
        self.window_s = window_s
        self.mean_prompt = float(self.prompt.mean()) if n else 0.0
        self.mean_pairs = float((self.prompt**2).mean() / 2.0) if n else 0.0
        self.order = np.asarray(order, dtype=np.int64)
        self.span_all = span_all
        self.weighted_prompt = float((self.prompt**2).sum() / self.prompt.sum()) if n else 0.0
        self.set_acceptance(self.align(acceptance))

    def align(self, acceptance: AcceptanceModel) -> AcceptanceModel:
        """A model whose rows follow the sample's order, reordered to arrival order."""
        return acceptance.with_conditional(acceptance.conditional[self.order])

    def set_acceptance(self, acceptance: AcceptanceModel) -> None:
        """(Re)build the window tables from per-request conditionals in arrival order."""
        surv = acceptance.survival()
        block = surv.shape[1]
        g = THRESHOLDS.size
        n = self.prompt.size
        self.block = block
        # m_req[w, g, i]: positions verified at window w and threshold g; e_acc: E - 1
        keep = surv[None, :, :] >= THRESHOLDS[:, None, None]          # (g, i, k)
        self.m_req = np.zeros((block + 1, g, n))
        self.e_acc = np.zeros((block + 1, g, n))
        for w in range(1, block + 1):
            kept = keep[:, :, :w].cumprod(axis=2)
            self.m_req[w] = kept.sum(axis=2)
            self.e_acc[w] = (kept * surv[None, :, :w]).sum(axis=2)
        self._scalars: dict[float, tuple[FloatArray, ...]] = {}

    def scalars(self, gain: float) -> tuple[FloatArray, ...]:
        """(window+1, thresholds) tables: mean decode steps per request, step-weighted
        verified positions, step-weighted context, tokens per step; accepted tokens × gain."""
        hit = self._scalars.get(gain)
        if hit is None:
            need = np.maximum(self.output - 1.0, 1.0)
            steps = need / (1.0 + self.e_acc * gain)
            tot = steps.sum(axis=2)
            s_bar = steps.mean(axis=2)
            m_bar = (steps * self.m_req).sum(axis=2) / tot
            ctx = (steps * (self.prompt + self.output / 2.0)).sum(axis=2) / tot
            e_bar = need.sum() / tot
            hit = (s_bar, m_bar, ctx, e_bar)
            if len(self._scalars) > 4:
                self._scalars.clear()
            self._scalars[gain] = hit
        return hit

    def per_request(self, n: IntArray, g: IntArray, gain: FloatArray
                    ) -> tuple[FloatArray, FloatArray]:
        """Per config: expected tokens per step and decode steps of every request (K, N)."""
        e = 1.0 + self.e_acc[n, g] * gain[:, None]
        steps = np.maximum(self.output - 1.0, 1.0)[None, :] / e
        return e, steps
