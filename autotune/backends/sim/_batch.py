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

    The columns are views into four blocks of storage (integers, floats, the measured flags,
    the logits), so that admitting a request and dropping finished ones (:meth:`keep`, run at
    almost every step under load) are a few array operations instead of one per column.
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
        self._ints: IntArray = np.zeros((len(self.INT), 0), dtype=np.int64)
        self._floats: FloatArray = np.zeros((len(self.FLOAT), 0))
        self.measured = np.zeros(0, dtype=bool)
        self._logits: FloatArray = np.zeros((0, 2 * block))  # true | head
        self._alloc(capacity)

    @property
    def capacity(self) -> int:
        return int(self.measured.size)

    def _alloc(self, capacity: int) -> None:
        n = self.n
        ints = np.zeros((len(self.INT), capacity), dtype=np.int64)
        floats = np.zeros((len(self.FLOAT), capacity))
        measured = np.zeros(capacity, dtype=bool)
        logits = np.zeros((capacity, 2 * self.block))
        ints[:, :n] = self._ints[:, :n]
        floats[:, :n] = self._floats[:, :n]
        measured[:n] = self.measured[:n]
        logits[:n] = self._logits[:n]
        self._ints, self._floats, self.measured, self._logits = ints, floats, measured, logits
        for k, name in enumerate(self.INT):
            setattr(self, name, ints[k])
        for k, name in enumerate(self.FLOAT):
            setattr(self, name, floats[k])
        self.true = logits[:, : self.block]
        self.head = logits[:, self.block:]

    def push(self, r: Record) -> int:
        if self.n == self.capacity:
            self._alloc(2 * self.capacity)
        i = self.n
        self._ints[:, i] = (r.seq, r.prompt, r.out, r.gen, r.need, 0, 0, 0, r.preemptions)
        self._floats[:, i] = (r.arrival, r.first_t, r.last_t, r.step_sd)
        self.measured[i] = r.measured
        if self.block:
            self._logits[i] = r.logits
        self.n += 1
        return i

    def record(self, i: int) -> Record:
        """Row ``i`` as a waiting record after preemption (recompute prompt + output so far)."""
        gen = int(self.gen[i])
        return Record(seq=int(self.seq[i]), arrival=float(self.arrival[i]),
                      prompt=int(self.prompt[i]), out=int(self.out[i]), gen=gen,
                      need=int(self.prompt[i]) + gen, first_t=float(self.first_t[i]),
                      last_t=float(self.last_t[i]), preemptions=int(self.pre[i]) + 1,
                      logits=self._logits[i].copy(), step_sd=float(self.sd[i]),
                      measured=bool(self.measured[i]))

    def keep(self, mask: npt.NDArray[np.bool_]) -> None:
        """Drop the rows where ``mask`` is False, preserving order."""
        n = self.n
        k = int(np.count_nonzero(mask))
        self._ints[:, :k] = self._ints[:, :n][:, mask]
        self._floats[:, :k] = self._floats[:, :n][:, mask]
        self.measured[:k] = self.measured[:n][mask]
        if self.block:
            self._logits[:k] = self._logits[:n][mask]
        self.n = k
