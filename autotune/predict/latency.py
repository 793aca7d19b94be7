"""What a replay model predicts a replay of the workload measures, for every config at once.

Both replay models return it: the closed loop (:mod:`autotune.predict.closed_loop`) and the
trace replay (:mod:`autotune.predict.trace_replay`); :mod:`autotune.predict.replica` reads the
p99s, goodput and capacity from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["PredictedLatency"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class PredictedLatency:
    """Per config (K rows): the ITL gaps as a weighted set of step durations, and per-request
    (N columns, arrival order) TTFT, decode step time and completion."""

    #: the replay can run: a stable step time, prefill budget left beside the decoding
    #: windows, max_num_batched_tokens >= max_num_seqs, the KV cache holding the peak batch
    feasible: npt.NDArray[np.bool_]
    #: (K, M) step durations (s), the fitted ITL factor applied
    durations: FloatArray
    #: (K, M) how many inter-token gaps last each duration
    weights: FloatArray
    #: (K, N) each request's time to first token (s)
    ttft: FloatArray
    #: (K, N) each request's mean decode step time (s); trace replay only
    step: FloatArray | None = None
    #: (K, N) each request's completion time (s, from the first arrival); trace replay only
    end: FloatArray | None = None
    #: columns of ``durations`` from this one on are steps that carry a prefill chunk (they
    #: stall every sequence decoding beside them at once); the columns before are decode-only
    stall_from: int = 1
    #: (K, N) the part of each TTFT spent waiting (for a slot, in the prefill queue), not
    #: prefilling its own prompt
    wait: FloatArray | None = None
