"""A verify loop in miniature: the acceptance counters a speculative-decoding run would read.

Each draft of a window accepts its first k tokens with the survival of the request's true
conditional rates (position j accepted with probability ``p[j]`` given j-1 were); a step emits
the accepted tokens plus one, and a request drafts until it has emitted its output. The counters
are summed over requests, as vLLM's are.
"""

from __future__ import annotations

import numpy as np

from autotune.types import AcceptanceCounts, Request

__all__ = ["simulate_counts"]


def simulate_counts(reqs: list[Request], truth: np.ndarray, window: int, seed: int
                    ) -> AcceptanceCounts:
    """Draft every request until it has emitted its tokens, as a verify loop does."""
    rng = np.random.default_rng(seed)
    per_pos = np.zeros(window, dtype=np.int64)
    drafts = accepted = 0
    for r, p in zip(reqs, truth, strict=True):
        left = r.output_tokens - 1
        while left > 0:
            a = int(np.cumprod(rng.random(window) < p[:window]).sum())
            per_pos[:a] += 1
            drafts += 1
            accepted += a
            left -= a + 1
    return AcceptanceCounts(drafts, drafts * window, accepted, tuple(int(x) for x in per_pos))
