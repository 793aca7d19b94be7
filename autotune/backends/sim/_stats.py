"""Growable result buffers of a replay: per-request columns and a uniformly thinned ITL pool."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ["Column", "RequestResults", "ThinnedPool"]


class Column:
    """An append-only numpy column that grows by doubling (no per-element Python objects)."""

    __slots__ = ("_data", "_n")

    def __init__(self, dtype: type[np.generic], capacity: int = 1024) -> None:
        self._data: npt.NDArray[np.generic] = np.empty(capacity, dtype=dtype)
        self._n = 0

    def extend(self, values: npt.ArrayLike) -> None:
        v = np.asarray(values)
        k = v.size
        if self._n + k > self._data.size:
            grown = np.empty(max(2 * self._data.size, self._n + k), dtype=self._data.dtype)
            grown[: self._n] = self._data[: self._n]
            self._data = grown
        self._data[self._n: self._n + k] = v
        self._n += k

    def array(self) -> npt.NDArray[np.generic]:
        return self._data[: self._n].copy()

    def __len__(self) -> int:
        return self._n


class ThinnedPool:
    """A uniform random subsample of a stream of floats, of at most ``cap`` values.

    Every value is kept with the same probability p: p starts at 1 and halves (thinning what is
    already kept by 1/2) whenever the buffer reaches 2·cap; at the end an exact uniform subset
    of ``cap`` is taken if more remain. Memory stays O(cap) however long the stream.
    """

    __slots__ = ("_buf", "_cap", "_keep", "_n", "_rng")

    def __init__(self, cap: int, rng: np.random.Generator) -> None:
        self._cap = cap
        self._buf = np.empty(2 * cap + 4096, dtype=np.float64)
        self._n = 0
        self._keep = 1.0
        self._rng = rng

    def extend(self, values: npt.NDArray[np.floating]) -> None:
        if self._keep < 1.0:
            values = values[self._rng.random(values.size) < self._keep]
        while self._n + values.size > self._buf.size:
            self._halve()  # halves p for the kept values and for this batch alike
            values = values[self._rng.random(values.size) < 0.5]
        k = values.size
        self._buf[self._n: self._n + k] = values
        self._n += k
        if self._n >= 2 * self._cap:
            self._halve()

    def _halve(self) -> None:
        kept = self._buf[: self._n][self._rng.random(self._n) < 0.5]
        self._n = kept.size
        self._buf[: self._n] = kept
        self._keep *= 0.5

    @property
    def sampled(self) -> bool:
        return self._keep < 1.0 or self._n > self._cap

    def array(self) -> npt.NDArray[np.float64]:
        out = self._buf[: self._n]
        if self._n > self._cap:
            out = out[np.sort(self._rng.choice(self._n, self._cap, replace=False))]
        return out.copy()


class RequestResults:
    """Per-request columns of measured requests, in completion order.

    Only what a completion knows is stored (TTFT, end to end, output tokens; failures by
    position); TPOT and the ok flags are derived once, in :meth:`arrays`, with the same
    arithmetic a per-completion computation would do.
    """

    def __init__(self) -> None:
        self.ttft = Column(np.float64)
        self.e2e = Column(np.float64)
        self.out = Column(np.int64)
        self._failed: list[int] = []
        self.first_arrival = math.inf
        self.last_finish = -math.inf

    def add(self, ttft: npt.NDArray[np.float64], e2e: npt.NDArray[np.float64],
            out: npt.NDArray[np.int64], finish: float) -> None:
        self.ttft.extend(ttft)
        self.e2e.extend(e2e)
        self.out.extend(out)
        if finish > self.last_finish:
            self.last_finish = finish

    def fail(self, at: float) -> None:
        self._failed.append(len(self.out))
        for col in (self.ttft, self.e2e):
            col.extend(_NAN)
        self.out.extend(_ZERO)
        self.last_finish = max(self.last_finish, at)

    def arrays(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64],
                              npt.NDArray[np.float64], npt.NDArray[np.int64],
                              npt.NDArray[np.bool_]]:
        """TTFT, TPOT (decode time per output token after the first; 0 for one token, NaN
        for a failed request), end to end, output tokens and ok, one entry per request."""
        ttft = self.ttft.array().astype(np.float64)
        e2e = self.e2e.array().astype(np.float64)
        out = self.out.array().astype(np.int64)
        ok = np.ones(out.size, dtype=bool)
        ok[self._failed] = False
        tpot = np.where(out > 1, (e2e - ttft) / np.maximum(out - 1, 1), 0.0)
        tpot[~ok] = math.nan
        return ttft, tpot, e2e, out, ok


_NAN = np.array([math.nan])
_ZERO = np.array([0], dtype=np.int64)
