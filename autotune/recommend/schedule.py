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


#: Measurements (trials meeting the SLO) a max_num_seqs level needs to say its best window.
MIN_MEASUREMENTS = 2


def window_schedule(points: Iterable[WindowPoint], max_num_seqs: int, window: int
                    ) -> tuple[list[list[int]] | None, dict[int, int], dict[int, int]]:
    """Rows ``[start_bs, end_bs, K]`` when the best window shrinks as the batch grows.

    For every ``max_num_seqs`` level measured up to the recommended one with at least
    :data:`MIN_MEASUREMENTS` trials meeting the SLOs, the best window is the K of the level's
    best trial (levels with fewer are left out: one trial compares nothing). K is capped at
    the recommended ``window``, the schedule's ``num_speculative_tokens`` (vLLM never drafts
    more than that). Level L_i with best K_i covers batch sizes (L_{i-1}, L_i], the first from
    1 and the last up to ``max_num_seqs``; equal neighbours merge. Rows are returned only when
    K never grows with the level and does shrink; otherwise None. Also returned: the best K
    per level (capped; what the decision saw) and the levels left out with their counts.
    """
    best: dict[int, tuple[float, int]] = {}
    count: dict[int, int] = {}
    for seqs, k, value, feasible in points:
        if not feasible or seqs > max_num_seqs or not math.isfinite(value):
            continue
        count[seqs] = count.get(seqs, 0) + 1
        if seqs not in best or (value, -k) > (best[seqs][0], -best[seqs][1]):
            best[seqs] = (value, k)
    thin = {level: n for level, n in sorted(count.items()) if n < MIN_MEASUREMENTS}
    levels = sorted(level for level in best if level not in thin)
    by_level = {level: min(best[level][1], window) for level in levels}
    windows = [by_level[level] for level in levels]
    shrinks = len(windows) >= 2 and windows[0] > windows[-1] and all(
        a >= b for a, b in itertools.pairwise(windows))
    if not shrinks or min(windows) <= 0:
        return None, by_level, thin
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
    return rows, by_level, thin
