"""The replay's per-step working set: the running batch as columns, and pre-drawn variates.

:class:`RunningBatch` holds the requests admitted to the engine (prefilling or decoding) as a
struct of numpy arrays, one row per request in admission order, so that a step is a handful of
array operations over the batch. :class:`RandomBlocks` hands out logistic and normal variates
from pre-drawn blocks (fewer generator calls per step).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from autotune.backends.sim._source import Record

__all__ = ["FloatArray", "IntArray", "RandomBlocks", "RunningBatch"]

_RAND_BLOCK = 1 << 15
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class RandomBlocks:
    """Pre-drawn logistic and normal variates handed out in slices (fewer RNG calls)."""

    __slots__ = ("_logistic", "_lpos", "_normal", "_npos", "_rng")

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._logistic = rng.logistic(size=_RAND_BLOCK)
        self._normal = rng.standard_normal(_RAND_BLOCK)
        self._lpos = 0
        self._npos = 0

    def logistic(self, k: int) -> npt.NDArray[np.float64]:
        if self._lpos + k > self._logistic.size:
            self._logistic = self._rng.logistic(size=max(_RAND_BLOCK, k))
            self._lpos = 0
        out = self._logistic[self._lpos: self._lpos + k]
        self._lpos += k
        return out

    def normal(self, k: int) -> npt.NDArray[np.float64]:
        if self._npos + k > self._normal.size:
            self._normal = self._rng.standard_normal(max(_RAND_BLOCK, k))
            self._npos = 0
        out = self._normal[self._npos: self._npos + k]
        self._npos += k
        return out


class RunningBatch:
    """Struct-of-arrays of the running requests, rows in admission order.

    Columns: ``seq`` arrival order number; ``prompt`` / ``out`` prompt and output tokens;
    ``gen`` output tokens emitted so far; ``need`` tokens to prefill (the prompt, or prompt +
    output so far when recomputed after preemption) and ``done`` those prefilled; ``kv`` tokens
    in the KV cache and ``blocks`` KV blocks held; ``pre`` preemptions; ``arrival``,
    ``first_t`` (first token) and ``last_t`` (last emission) times; ``sd`` the request's step
    shift sd; ``measured`` (False during warm-up); ``true`` / ``head`` the per-position true
    and head-predicted acceptance logits over the drafter's block.
    """

    INT = ("seq", "prompt", "out", "gen", "need", "done", "kv", "blocks", "pre")
    FLOAT = ("arrival", "first_t", "last_t", "sd")
    seq: IntArray
    prompt: IntArray
    out: IntArray
    gen: IntArray
    need: IntArray
    done: IntArray
    kv: IntArray
    blocks: IntArray
    pre: IntArray
    arrival: FloatArray
    first_t: FloatArray
    last_t: FloatArray
    sd: FloatArray
    measured: npt.NDArray[np.bool_]
    true: FloatArray
    head: FloatArray

    def __init__(self, block: int, capacity: int = 64) -> None:
        self.block = block
        self.n = 0
        self.capacity = 0
        self._alloc(capacity)

    def _columns(self) -> tuple[str, ...]:
        return (*self.INT, *self.FLOAT, "measured", "true", "head")

    def _alloc(self, capacity: int) -> None:
        n = self.n if self.capacity else 0
        for name in self._columns():
            if name in self.INT:
                fresh: npt.NDArray[np.generic] = np.zeros(capacity, dtype=np.int64)
            elif name in self.FLOAT:
                fresh = np.zeros(capacity, dtype=np.float64)
            elif name == "measured":
                fresh = np.zeros(capacity, dtype=bool)
            else:
                fresh = np.zeros((capacity, self.block))
            if n:
                fresh[:n] = getattr(self, name)[:n]
            setattr(self, name, fresh)
        self.capacity = capacity

    def push(self, r: Record) -> int:
        if self.n == self.capacity:
            self._alloc(2 * self.capacity)
        i = self.n
        self.seq[i] = r.seq
        self.prompt[i] = r.prompt
        self.out[i] = r.out
        self.gen[i] = r.gen
        self.need[i] = r.need
        self.done[i] = 0
        self.kv[i] = 0
        self.blocks[i] = 0
        self.pre[i] = r.preemptions
        self.arrival[i] = r.arrival
        self.first_t[i] = r.first_t
        self.last_t[i] = r.last_t
        self.sd[i] = r.step_sd
        self.measured[i] = r.measured
        if self.block:
            self.true[i] = r.true
            self.head[i] = r.head
        self.n += 1
        return i

    def record(self, i: int) -> Record:
        """Row ``i`` as a waiting record after preemption (recompute prompt + output so far)."""
        gen = int(self.gen[i])
        return Record(seq=int(self.seq[i]), arrival=float(self.arrival[i]),
                      prompt=int(self.prompt[i]), out=int(self.out[i]), gen=gen,
                      need=int(self.prompt[i]) + gen, first_t=float(self.first_t[i]),
                      last_t=float(self.last_t[i]), preemptions=int(self.pre[i]) + 1,
                      true=self.true[i].copy(), head=self.head[i].copy(),
                      step_sd=float(self.sd[i]), measured=bool(self.measured[i]))

    def keep(self, mask: npt.NDArray[np.bool_]) -> None:
        """Drop the rows where ``mask`` is False, preserving order."""
        n = self.n
        k = int(mask.sum())
        for name in (*self.INT, *self.FLOAT, "measured"):
            col = getattr(self, name)
            col[:k] = col[:n][mask]
        if self.block:
            self.true[:k] = self.true[:n][mask]
            self.head[:k] = self.head[:n][mask]
        self.n = k
