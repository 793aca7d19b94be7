"""A sample's requests as columns: what summaries and grouping need, ~100 bytes a request.

A :class:`~autotune.types.Request` object costs ~550 bytes (its acceptance tuple alone ~300);
a million of them do not fit a 500 MB budget. :func:`collect_columns` streams requests into
compact numpy columns — token counts, arrival times, the acceptance predictions flattened with
row offsets, workload labels as codes — so that ``traffic inspect`` can summarise and group a
million-request sample in one pass over the file.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autotune.types import Request

__all__ = ["RequestColumns", "collect_columns"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: Rows per block when predictions are gathered (keeps temporaries to a few MB).
CHUNK = 65_536


@dataclass(frozen=True)
class RequestColumns:
    """Row ``i`` is the sample's ``i``-th request.

    ``arrival_s`` is NaN for a request without a time. Request ``i``'s acceptance predictions
    are ``acceptance[offsets[i]:offsets[i + 1]]`` (empty when it has none). ``workload[i]`` is an
    index into ``names``, or -1 for an unlabelled request. ``line`` is the sample line.
    """

    line: IntArray
    prompt_tokens: IntArray
    output_tokens: IntArray
    arrival_s: FloatArray
    acceptance: FloatArray
    offsets: IntArray
    workload: npt.NDArray[np.int32]
    names: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    def acceptance_lengths(self) -> IntArray:
        return np.diff(self.offsets)

    def predictions(self, rows: IntArray, positions: int) -> Iterator[tuple[int, FloatArray]]:
        """The first ``positions`` predictions of ``rows`` (each has that many), as blocks of
        at most ``CHUNK`` rows: (index of the block's first row in ``rows``, the block), so
        that temporaries stay small whatever the sample's size."""
        steps = np.arange(positions)
        for start in range(0, len(rows), CHUNK):
            index = self.offsets[rows[start:start + CHUNK]][:, None] + steps
            yield start, self.acceptance[index]

    def survival(self, rows: IntArray, positions: int) -> FloatArray:
        """Survival curves s_1..s_positions (cumulative products of the predictions) of
        ``rows``, each of which has at least ``positions`` predictions."""
        out = np.empty((len(rows), positions))
        for start, block in self.predictions(rows, positions):
            np.cumprod(block, axis=1, out=out[start:start + len(block)])
        return out

    def relabelled(self, rows: IntArray, codes: Sequence[int] | IntArray,
                   names: Sequence[str]) -> RequestColumns:
        """A copy whose ``rows`` carry the labels ``names[codes]`` (others keep theirs)."""
        all_names = list(self.names)
        index = {n: i for i, n in enumerate(all_names)}
        for n in names:
            if n not in index:
                index[n] = len(all_names)
                all_names.append(n)
        mapping = np.array([index[n] for n in names], dtype=np.int32)
        workload = self.workload.copy()
        workload[rows] = mapping[np.asarray(codes, dtype=np.intp)]
        return RequestColumns(self.line, self.prompt_tokens, self.output_tokens, self.arrival_s,
                              self.acceptance, self.offsets, workload, tuple(all_names))


def collect_columns(requests: Iterable[Request]) -> RequestColumns:
    """Stream ``requests`` (a list, or a sample read lazily) into columns."""
    line, prompt, output, arrival = array("q"), array("q"), array("q"), array("d")
    acceptance, offsets, workload = array("d"), array("q", [0]), array("i")
    codes: dict[str, int] = {}
    nan = float("nan")
    for r in requests:
        line.append(r.line)
        prompt.append(r.prompt_tokens)
        output.append(r.output_tokens)
        arrival.append(nan if r.arrival_s is None else r.arrival_s)
        if r.acceptance:
            acceptance.extend(r.acceptance)
        offsets.append(len(acceptance))
        if r.workload is None:
            workload.append(-1)
        else:
            workload.append(codes.setdefault(r.workload, len(codes)))
    return RequestColumns(
        line=np.frombuffer(line, dtype=np.int64),
        prompt_tokens=np.frombuffer(prompt, dtype=np.int64),
        output_tokens=np.frombuffer(output, dtype=np.int64),
        arrival_s=np.frombuffer(arrival, dtype=np.float64),
        acceptance=np.frombuffer(acceptance, dtype=np.float64),
        offsets=np.frombuffer(offsets, dtype=np.int64),
        workload=np.frombuffer(workload, dtype=np.int32),
        names=tuple(codes))
