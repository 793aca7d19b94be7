"""The window-by-batch schedule: does the best draft window shrink as the batch grows?

vLLM's ``num_speculative_tokens_per_batch_size`` takes rows ``[start_bs, end_bs, K]``: the
window K to draft while the running batch is between start_bs and end_bs. From a run's
trials, :func:`window_schedule` finds the best window at every ``max_num_seqs`` level
measured and returns rows when that window shrinks with the level (the export's ``schedule``
format renders them, :mod:`autotune.export`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable

__all__ = ["WindowPoint", "window_schedule"]


#: One measured trial as the schedule sees it: (max_num_seqs, window K, objective value,
#: meets the SLOs).
WindowPoint = tuple[int, int, float, bool]


def window_schedule(points: Iterable[WindowPoint],
                    max_num_seqs: int) -> tuple[list[list[int]] | None, dict[int, int]]:
    """Rows ``[start_bs, end_bs, K]`` when the best window shrinks as the batch grows.

    For every ``max_num_seqs`` level measured up to the recommended one, the best window is
    the K of the level's best trial (among those meeting the SLOs; levels with none are left
    out). Level L_i with best K_i covers batch sizes (L_{i-1}, L_i], the first from 1 and the
    last up to ``max_num_seqs``; equal neighbours merge. Rows are returned only when K never
    grows with the level and does shrink; otherwise None. The second value is the best K per
    level (what the decision saw).
    """
    best: dict[int, tuple[float, int]] = {}
    for seqs, k, value, feasible in points:
        if not feasible or seqs > max_num_seqs or not math.isfinite(value):
            continue
        if seqs not in best or (value, -k) > (best[seqs][0], -best[seqs][1]):
            best[seqs] = (value, k)
    levels = sorted(best)
    by_level = {level: best[level][1] for level in levels}
    windows = [by_level[level] for level in levels]
    shrinks = len(windows) >= 2 and windows[0] > windows[-1] and all(
        a >= b for a, b in itertools.pairwise(windows))
    if not shrinks or min(windows) <= 0:
        return None, by_level
    rows: list[list[int]] = []
    start = 1
    for i, level in enumerate(levels):
        end = max_num_seqs if i == len(levels) - 1 else level
        k = by_level[level]
        if rows and rows[-1][2] == k:
            rows[-1][1] = end
        else:
            rows.append([start, end, k])
        start = end + 1
    return rows, by_level
