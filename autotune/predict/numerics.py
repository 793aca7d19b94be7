"""Row-wise numerics the replica model needs on (configs × points) arrays: weighted quantiles,
counting below a threshold, and interpolation and its inverse along each row."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["count_le", "interp_rows", "inverse_rows", "weighted_quantile"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def weighted_quantile(values: FloatArray, weights: FloatArray, q: float) -> FloatArray:
    order = np.argsort(values, axis=1)
    v = np.take_along_axis(values, order, axis=1)
    w = np.take_along_axis(weights, order, axis=1)
    cum = np.cumsum(w, axis=1)
    total = cum[:, -1:]
    idx = (cum < q * np.maximum(total, 1e-30)).sum(axis=1)
    idx = np.minimum(idx, v.shape[1] - 1)
    out: FloatArray = v[np.arange(v.shape[0]), idx]
    return out


def count_le(sorted_rows: FloatArray, queries: FloatArray) -> IntArray:
    """Per row, how many values of ``sorted_rows`` are <= each query (row-wise searchsorted)."""
    k, n = sorted_rows.shape
    span = float(max(np.abs(sorted_rows).max(initial=0.0), np.abs(queries).max(initial=0.0)))
    span = 2.0 * span + 1.0
    off = (np.arange(k, dtype=np.float64) * span)[:, None]
    idx = np.searchsorted((sorted_rows + off).ravel(), (queries + off).ravel(), side="right")
    out: IntArray = idx.reshape(queries.shape) - (np.arange(k) * n)[:, None]
    return out


def _segments(xp: FloatArray, fp: FloatArray, i: IntArray) -> tuple[FloatArray, ...]:
    """x0, x1, f0, f1 of the segments ``i`` (per row) of (xp, fp): flat indexing, which is
    several times cheaper than take_along_axis on the small arrays the predictor uses."""
    flat = i + (np.arange(xp.shape[0]) * xp.shape[1])[:, None]
    xs, fs = xp.ravel(), fp.ravel()
    return xs[flat], xs[flat + 1], fs[flat], fs[flat + 1]


def interp_rows(xp: FloatArray, fp: FloatArray, x: FloatArray, *,
                extend: bool = False, uniform: bool = False) -> FloatArray:
    """Row-wise linear interpolation of (xp, fp) at x (xp sorted per row). Outside xp the
    value is clamped, or with ``extend`` continued along the last segment past the end.
    ``uniform``: every row of xp is evenly spaced from 0 (the segment is found by division
    instead of a search)."""
    m = xp.shape[1]
    if uniform:
        cell = np.floor(x * ((m - 1) / np.maximum(xp[:, -1:], 1e-300)))
        # fmax/fmin: a NaN query takes segment 0 (its value stays NaN) instead of an index
        # the cast to int would make up
        i = np.fmin(np.fmax(cell, 0), m - 2).astype(np.int64)
    else:
        i = np.minimum(np.maximum(count_le(xp, x) - 1, 0), m - 2)
    x0, x1, f0, f1 = _segments(xp, fp, i)
    w = np.maximum((x - x0) / np.maximum(x1 - x0, 1e-12), 0.0)
    if not extend:
        w = np.minimum(w, 1.0)
    out: FloatArray = f0 + w * (f1 - f0)
    return out


def inverse_rows(xp: FloatArray, fp: FloatArray, y: FloatArray) -> FloatArray:
    """x where the non-decreasing row function (xp, fp) reaches y; past the end, continued
    along its last segment (the inverse of ``interp_rows(..., extend=True)``)."""
    m = xp.shape[1]
    i = np.minimum(np.maximum(count_le(fp, y) - 1, 0), m - 2)
    x0, x1, f0, f1 = _segments(xp, fp, i)
    inside = x0 + np.maximum(y - f0, 0.0) / np.maximum(f1 - f0, 1e-12) * (x1 - x0)
    slope = (xp[:, -1:] - xp[:, -2:-1]) / np.maximum(fp[:, -1:] - fp[:, -2:-1], 1e-12)
    beyond = xp[:, -1:] + (y - fp[:, -1:]) * slope
    out: FloatArray = np.where(y > fp[:, -1:], beyond, inside)
    return out
