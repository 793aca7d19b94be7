"""Streaming intake of a schedule's requests: chunks of requests become waiting records.

Requests are pulled from the (possibly huge, file-backed) iterable in chunks of
:data:`CHUNK` in arrival order; each chunk's truth is built vectorised, and only the chunk and
the requests in flight are held in memory.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autotune.backends.sim._profile import DrafterProfile
from autotune.backends.sim._truth import HeadMap, build_truth, request_keys
from autotune.types import Request

__all__ = ["CHUNK", "Incoming", "Record"]

CHUNK = 1024
_NO_LOGITS = np.zeros(0)


@dataclass(slots=True)
class Record:
    """A request waiting to be (re)scheduled: new, or preempted and waiting for recompute."""

    seq: int
    arrival: float
    prompt: int
    out: int
    gen: int
    need: int
    first_t: float
    last_t: float
    preemptions: int
    #: the true then the head-predicted acceptance logits over the drafter's block
    logits: npt.NDArray[np.float64]
    step_sd: float
    measured: bool


class Incoming:
    """Requests not yet arrived, pulled lazily from the schedule's iterable."""

    def __init__(self, requests: Iterable[Request], *, trace: bool, time_scale: float,
                 warmup: int, drafter: DrafterProfile | None, head_map: HeadMap | None,
                 block: int, seed: int) -> None:
        self._it: Iterator[Request] = iter(requests)
        self._trace = trace
        self._scale = time_scale
        self._warmup = warmup
        self._drafter = drafter
        self._head_map = head_map
        self._block = block
        self._seed = seed
        self._seq = 0
        self._pos = 0
        self._chunk: list[Request] = []
        self._times: list[float] = []  # the chunk's arrival times (trace mode)
        self._logits = np.empty((0, 2 * block))
        self._step_sd = np.empty(0)
        self._last_arrival = 0.0
        self.out_of_order = 0
        self.exhausted = False
        self.seen = 0

    def _fill(self) -> bool:
        chunk = list(itertools.islice(self._it, CHUNK))
        if not chunk:
            self.exhausted = True
            self._chunk = []
            return False
        self._chunk, self._pos = chunk, 0
        if self._trace:
            raw = np.fromiter(((r.arrival_s or 0.0) for r in chunk), dtype=np.float64,
                              count=len(chunk)) / self._scale
            clamped = np.maximum.accumulate(np.maximum(raw, self._last_arrival))
            self.out_of_order += int(np.count_nonzero(clamped > raw))
            self._times = clamped.tolist()
            self._last_arrival = float(clamped[-1])
        if self._drafter is not None and self._head_map is not None:
            truth = build_truth(self._drafter, self._head_map, self._block,
                                [r.workload for r in chunk], [r.acceptance for r in chunk],
                                request_keys([r.id for r in chunk], self._seed))
            self._logits = np.concatenate([truth.true, truth.head], axis=1)
            self._step_sd = truth.step_sd
        return True

    def _ready(self) -> bool:
        return self._pos < len(self._chunk) or (not self.exhausted and self._fill())

    def peek_time(self) -> float:
        """Arrival time of the next request (trace mode); inf when none is left."""
        if self._pos < len(self._chunk) or (not self.exhausted and self._fill()):
            return self._times[self._pos]
        return math.inf

    def pop(self, now: float) -> Record | None:
        """The next request as a waiting record, arriving at its trace time or at ``now``."""
        if not self._ready():
            return None
        i = self._pos
        r = self._chunk[i]
        self._pos += 1
        arrival = self._times[i] if self._trace else now
        seq = self._seq
        self._seq += 1
        self.seen += 1
        if self._drafter is not None:  # a view: a chunk's arrays are replaced, never written
            logits, sd = self._logits[i], float(self._step_sd[i])
        else:
            logits, sd = _NO_LOGITS, 0.0
        return Record(seq=seq, arrival=arrival, prompt=r.prompt_tokens, out=r.output_tokens,
                      gen=0, need=r.prompt_tokens, first_t=math.nan, last_t=math.nan,
                      preemptions=0, logits=logits, step_sd=sd, measured=seq >= self._warmup)
