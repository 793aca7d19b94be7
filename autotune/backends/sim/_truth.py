"""The simulator's hidden acceptance truth (private to ``autotune.backends.sim``).

Every request carries two per-position logit vectors over the drafter's block:

- ``true``: logit of the conditional probability c_k that draft token k is accepted given the
  earlier ones were (what the engine draws acceptance from), and
- ``head``: logit of the confidence head's *prediction* of c_k (what adaptive verification
  sees and what generated samples write into ``acceptance``).

The head is miscalibrated: per position k it reports ``true_k / T_k + b_k + noise`` with a
per-position temperature T_k and bias b_k drawn once from the drafter's head seed, and noise
per request and position. For a user's sample the prediction is given and the truth is the
inverse map plus noise; for requests without a prediction the truth is drawn from the prior of
their workload and the head's view follows from it. Per-request noise comes from a hash of the
request id and the backend seed, so the same request has the same truth in every trial.

A decode step also shifts all positions of a request by a shared normal ``z·step_sd`` (easy and
hard stretches of text); the head sees that shift too, which is what adaptive verification
exploits. The prior's ``c1``/``slope`` describe the logit mean, before the step shift.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autotune.backends.sim._profile import AcceptancePrior, DrafterProfile, HeadMiscalibration

__all__ = ["POSITION_SD", "HeadMap", "TruthBatch", "hashed_normals", "logit", "request_keys",
           "sigmoid"]

FloatArray = npt.NDArray[np.float64]
_EPS = 1e-6
#: Position-to-position jitter (logits) of a request's profile around its prior's line.
POSITION_SD = 0.15


def logit(p: FloatArray | float) -> FloatArray:
    q = np.clip(np.asarray(p, dtype=np.float64), _EPS, 1.0 - _EPS)
    out: FloatArray = np.log(q / (1.0 - q))
    return out


def sigmoid(x: FloatArray) -> FloatArray:
    out: FloatArray = 1.0 / (1.0 + np.exp(-x))
    return out


def request_keys(ids: Sequence[str], seed: int) -> npt.NDArray[np.uint64]:
    """A 64-bit key per request id (stable across runs and processes), mixed with the seed."""
    base = np.fromiter((zlib.crc32(i.encode("utf-8")) for i in ids), dtype=np.uint64,
                       count=len(ids))
    salt = np.uint64((seed * 0x9E3779B1 + 0x7F4A7C15) & 0xFFFFFFFFFFFFFFFF)
    return (base << np.uint64(32)) ^ salt


def _splitmix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        out: npt.NDArray[np.uint64] = z ^ (z >> np.uint64(31))
    return out


def hashed_normals(keys: npt.NDArray[np.uint64], cols: int, salt: int) -> FloatArray:
    """Standard normals of shape (len(keys), cols), a pure function of (key, column, salt)."""
    with np.errstate(over="ignore"):
        j = np.arange(2 * cols, dtype=np.uint64) + np.uint64(salt) * np.uint64(0x100)
        bits = _splitmix(keys[:, None] * np.uint64(0xD1B54A32D192ED03) + j[None, :])
    u = ((bits >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)
    u1, u2 = u[:, :cols], u[:, cols:]
    out: FloatArray = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
    return out


@dataclass(frozen=True)
class HeadMap:
    """The hidden per-position miscalibration of one drafter's confidence head."""

    inv_temperature: FloatArray
    bias: FloatArray
    noise_sd: float

    @classmethod
    def build(cls, head: HeadMiscalibration, block: int) -> HeadMap:
        rng = np.random.default_rng(head.seed)
        temp = head.temperature * np.exp(head.temperature_sd * rng.standard_normal(block))
        bias = head.bias + head.bias_sd * rng.standard_normal(block)
        return cls(inv_temperature=1.0 / temp, bias=bias, noise_sd=head.noise_sd)

    def predict(self, true: FloatArray, noise: FloatArray) -> FloatArray:
        """Head logits for true logits (rows = requests); ``noise`` is standard normal."""
        k = true.shape[1]
        out: FloatArray = (true * self.inv_temperature[:k] + self.bias[:k]
                           + self.noise_sd * noise)
        return out

    def invert(self, head: FloatArray, noise: FloatArray) -> FloatArray:
        """True logits behind head logits: the inverse map plus the head's noise."""
        k = head.shape[1]
        out: FloatArray = (head - self.bias[:k] - self.noise_sd * noise) / self.inv_temperature[:k]
        return out


@dataclass(frozen=True)
class TruthBatch:
    """True and head logits (rows = requests, columns = block positions) plus step noise."""

    true: FloatArray
    head: FloatArray
    step_sd: FloatArray


def prior_mean(prior: AcceptancePrior, block: int) -> FloatArray:
    """The prior's mean logit line over ``block`` positions."""
    out: FloatArray = logit(prior.c1) + prior.slope * np.arange(block, dtype=np.float64)
    return out


def build_truth(drafter: DrafterProfile, head_map: HeadMap, block: int,
                workloads: Sequence[str | None],
                predictions: Sequence[tuple[float, ...] | None],
                keys: npt.NDArray[np.uint64]) -> TruthBatch:
    """True and head logits for a chunk of requests (see the module docstring)."""
    n = len(workloads)
    true = np.empty((n, block))
    step_sd = np.empty(n)
    z_req = hashed_normals(keys, 1, salt=1)[:, 0]
    z_pos = hashed_normals(keys, block, salt=2)
    z_head = hashed_normals(keys, block, salt=3)
    cache: dict[str | None, tuple[FloatArray, AcceptancePrior]] = {}
    for i, w in enumerate(workloads):
        hit = cache.get(w)
        if hit is None:
            prior = drafter.prior_for(w)[1]
            hit = (prior_mean(prior, block), prior)
            cache[w] = hit
        line, prior = hit
        true[i] = line + prior.request_sd * z_req[i] + POSITION_SD * z_pos[i]
        step_sd[i] = prior.step_sd
    head = head_map.predict(true, z_head)
    has_pred = [i for i, p in enumerate(predictions) if p]
    if has_pred:
        for i in has_pred:
            pred = predictions[i]
            assert pred is not None
            m = min(len(pred), block)
            given = logit(np.asarray(pred[:m], dtype=np.float64))
            row = head[i]
            row[:m] = given
            if m < block:  # beyond the prediction: continue its last value along the prior slope
                slope = drafter.prior_for(workloads[i])[1].slope
                row[m:] = given[-1] + slope * np.arange(1, block - m + 1)
        idx = np.asarray(has_pred)
        true[idx] = head_map.invert(head[idx], z_head[idx])
    return TruthBatch(true=true, head=head, step_sd=step_sd)
