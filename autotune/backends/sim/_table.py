"""Measured step-time tables: the file format, its validation, and interpolation.

A table gives the step time of the target (and optionally of the drafter) on a grid of batch
tokens × context length, as measured on an engine::

    {"engine": str, "hardware": str, "script": str, "model": {...free text facts...},
     "batch_tokens": [ints ascending], "context_tokens": [ints ascending],
     "target_step_ms": [[one row per batch_tokens value, one value per context_tokens value]],
     "draft_step_ms": same shape or null, "graph_buckets": [ints ascending] or null}

A cell (b, c) is the time of one forward over b batch tokens whose tokens attend to c tokens
of context on average (b decoding sequences of context c, for instance). Between grid points
the time is interpolated bilinearly (exact when the time is affine in each coordinate, as a
roofline's memory and compute terms are); beyond the last point it is extrapolated along the
last segment, below the first it is held at the first value. With ``graph_buckets`` (CUDA-graph
capture sizes) a step of b tokens up to the largest bucket runs, and costs, as the next bucket.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["StepTable", "TableLookup"]

FloatArray = npt.NDArray[np.float64]


def _strictly_ascending(name: str, values: list[int], least: int = 2) -> None:
    if len(values) < least:
        raise ValueError(f"{name} needs at least {least} grid points, got {len(values)}")
    if any(b <= a for a, b in itertools.pairwise(values)):
        raise ValueError(f"{name} must be strictly ascending, got {values}")
    if values[0] < 0:
        raise ValueError(f"{name} must be >= 0, got {values[0]}")


class StepTable(BaseModel):
    """One measured step-time table (the file format in the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: str = Field(description="Engine and version the table was measured on.")
    hardware: str = Field(description="Hardware it was measured on.")
    script: str = Field(description="Script that measured it (path in the repository).")
    model: dict[str, Any] = Field(description="Free-text facts about the measured model.")
    batch_tokens: list[int] = Field(description="Grid of batch tokens, ascending.")
    context_tokens: list[int] = Field(description="Grid of context lengths, ascending.")
    target_step_ms: list[list[float]] = Field(
        description="Target step time (ms): one row per batch_tokens, one value per context.")
    draft_step_ms: list[list[float]] | None = Field(
        default=None, description="One drafter forward (ms), same shape, or null.")
    graph_buckets: list[int] | None = Field(
        default=None, description="CUDA-graph capture sizes (batch tokens), or null.")

    @model_validator(mode="after")
    def _check(self) -> StepTable:
        _strictly_ascending("batch_tokens", self.batch_tokens)
        _strictly_ascending("context_tokens", self.context_tokens)
        if self.graph_buckets is not None:
            _strictly_ascending("graph_buckets", self.graph_buckets, least=1)
            if self.graph_buckets[0] < 1:
                raise ValueError(f"graph_buckets must be >= 1, got {self.graph_buckets[0]}")
        for name in ("target_step_ms", "draft_step_ms"):
            grid = getattr(self, name)
            if grid is None:
                continue
            if len(grid) != len(self.batch_tokens) or any(
                    len(row) != len(self.context_tokens) for row in grid):
                raise ValueError(
                    f"{name} must have {len(self.batch_tokens)} rows (one per batch_tokens) "
                    f"of {len(self.context_tokens)} values (one per context_tokens)")
            values = np.asarray(grid, dtype=np.float64)
            if not np.all(np.isfinite(values)) or np.any(values <= 0):
                raise ValueError(f"{name}: every step time must be a positive number of ms")
            drops = np.argwhere(np.diff(values, axis=0) < 0)
            if drops.size:
                i, j = (int(v) for v in drops[0])
                raise ValueError(
                    f"{name} must not decrease with batch tokens: at context "
                    f"{self.context_tokens[j]}, {self.batch_tokens[i + 1]} tokens take "
                    f"{values[i + 1, j]} ms < {values[i, j]} ms at {self.batch_tokens[i]}")
        return self


class TableLookup:
    """Bilinear interpolation of one grid of a :class:`StepTable`, in seconds."""

    __slots__ = ("_buckets", "_ctx", "_grid", "_tokens")

    def __init__(self, table: StepTable, grid: list[list[float]]) -> None:
        self._tokens = np.asarray(table.batch_tokens, dtype=np.float64)
        self._ctx = np.asarray(table.context_tokens, dtype=np.float64)
        self._grid = np.asarray(grid, dtype=np.float64) / 1000.0
        self._buckets = (np.asarray(table.graph_buckets, dtype=np.float64)
                         if table.graph_buckets else None)

    def padded(self, tokens: FloatArray) -> FloatArray:
        """Batch tokens after CUDA-graph padding (the next capture size, up to the largest)."""
        if self._buckets is None:
            return tokens
        idx = np.searchsorted(self._buckets, tokens, side="left")
        inside = idx < self._buckets.size
        out: FloatArray = np.where(inside, self._buckets[np.minimum(idx, self._buckets.size - 1)],
                                   tokens)
        return out

    def seconds(self, tokens: FloatArray | float, context: FloatArray | float) -> FloatArray:
        """Step seconds at ``tokens`` batch tokens and ``context`` (broadcast together)."""
        t = self.padded(np.asarray(tokens, dtype=np.float64))
        c = np.asarray(context, dtype=np.float64)
        ti, tw = _segment(self._tokens, t)
        ci, cw = _segment(self._ctx, c)
        g = self._grid
        low = g[ti, ci] * (1.0 - cw) + g[ti, ci + 1] * cw
        high = g[ti + 1, ci] * (1.0 - cw) + g[ti + 1, ci + 1] * cw
        out: FloatArray = np.maximum(low * (1.0 - tw) + high * tw, 0.0)
        return out


def _segment(grid: FloatArray, x: FloatArray) -> tuple[npt.NDArray[np.intp], FloatArray]:
    """Index of the grid segment holding ``x`` and the weight of its upper end.

    Below the grid the weight is 0 (held at the first point); above, the last segment is
    extended (weight > 1). The grid has at least two points.
    """
    x = np.maximum(x, grid[0])
    i = np.clip(np.searchsorted(grid, x, side="right") - 1, 0, grid.size - 2)
    w = (x - grid[i]) / (grid[i + 1] - grid[i])
    return i, w
