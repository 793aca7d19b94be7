"""Growable result buffers of a replay: per-request columns and a uniformly thinned ITL pool."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["Column", "ThinnedPool"]


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
