"""What one replay works on: its fixed configuration and its mutable state.

:class:`EngineConfig` is everything a replica fixes (cost law, drafter, window, batching
limits, KV cache). :class:`ReplayState` is what changes while a schedule is replayed: the
running batch, the waiting queue, free KV blocks, the measured results and the counters that
become the measurement. The event loop (:mod:`._engine`) and the multi-step decode fast path
(:mod:`._decode_block`) both advance it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autotune.backends.sim._batch import IntArray, RandomBlocks, RunningBatch
from autotune.backends.sim._cost import StepCostLaw
from autotune.backends.sim._profile import DrafterProfile
from autotune.backends.sim._source import Incoming, Record
from autotune.backends.sim._stats import RequestResults, ThinnedPool
from autotune.backends.sim._truth import HeadMap
from autotune.types import ReplaySchedule

__all__ = ["ITL_CAP", "EmitObserver", "EngineConfig", "ReplayState"]

ITL_CAP = 200_000

#: Test hook: called after every step with (request sequence numbers, tokens emitted, time).
EmitObserver = Callable[[IntArray, IntArray, float], None]


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Everything one replay needs besides the schedule (all fixed for a replica)."""

    cost: StepCostLaw
    drafter: DrafterProfile | None
    head_map: HeadMap | None
    window: int
    adaptive: bool
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_blocks: int
    kv_block_size: int
    max_model_len: int
    block: int
    seed: int

    def draft_time(self, seqs: int, prefill_tokens: int, context: float) -> float:
        """Seconds the drafter adds to a step drafting the window for ``seqs`` sequences."""
        if self.drafter is None or self.window <= 0:
            return 0.0
        return self.cost.draft_time(self.window, seqs, prefill_tokens, context)


class ReplayState:
    """The mutable state of one replay (see the module docstring)."""

    def __init__(self, cfg: EngineConfig, schedule: ReplaySchedule,
                 on_emit: EmitObserver | None = None) -> None:
        self.cfg = cfg
        self.schedule = schedule
        self.on_emit = on_emit
        seeds = [abs(int(cfg.seed)) & 0xFFFFFFFF, abs(int(schedule.seed)) & 0xFFFFFFFF]
        self.rng = np.random.default_rng(seeds)
        self.rand = RandomBlocks(self.rng)
        self.itl = ThinnedPool(ITL_CAP, np.random.default_rng([*seeds, 1]))
        self.results = RequestResults()
        self.running = RunningBatch(cfg.block if cfg.window > 0 else 0)
        self.waiting: deque[Record] = deque()
        self.incoming = Incoming(
            schedule.requests, trace=schedule.mode == "trace", time_scale=schedule.time_scale,
            warmup=schedule.warmup_requests, drafter=cfg.drafter if cfg.window > 0 else None,
            head_map=cfg.head_map, block=cfg.block, seed=cfg.seed)
        self.free_blocks = cfg.kv_blocks
        n = max(cfg.window, 0)
        #: acceptance histogram of measured requests: [verified m, accepted a] flattened
        self.hist = np.zeros((n + 1) * (n + 1), dtype=np.int64)
        self.finished = 0
        self.steps = 0
        self.batch_sum = 0
        self.step_time_sum = 0.0
        self.preemptions = 0
        self.rejected = 0
        self.peak_blocks = 0
        #: the most requests in the replica at once (waiting or running): see PEAK_IN_FLIGHT
        self.peak_in_flight = 0
        #: the smallest caps that would have run this schedule: see SEQS_REACHED
        self.seqs_reached = 0
        self.tokens_reached = 0
        self.budget_sum = 0
        self.budget_steps = 0
        #: smoothed tokens emitted per request per decode step (sizes the fast path's horizon)
        self.emit_rate = 1.0 + 0.5 * max(cfg.window, 0)

    def note_asked(self, rows: int, tokens: int) -> None:
        """Track the caps a step reached: ``rows`` running and ``tokens`` asked for, each plus
        one when a request is left waiting (a cap of exactly that would have refused it)."""
        waited = 1 if self.waiting else 0
        self.seqs_reached = max(self.seqs_reached, rows + waited)
        self.tokens_reached = max(self.tokens_reached, tokens + waited)

    def note_kv_use(self) -> None:
        """Track the peak of KV blocks in use."""
        used = self.cfg.kv_blocks - self.free_blocks
        if used > self.peak_blocks:
            self.peak_blocks = used

    def complete(self, finished: npt.NDArray[np.bool_], end: float) -> None:
        """Retire the running rows marked ``finished`` at time ``end``: free their KV blocks
        and record the measured ones."""
        batch = self.running
        rows = finished.nonzero()[0]
        self.free_blocks += int(np.add.reduce(batch.blocks[rows]))
        self.finished += rows.size
        measured = rows[batch.measured[rows]]
        if measured.size:
            arrival = batch.arrival[measured]
            self.results.add(batch.first_t[measured] - arrival, end - arrival,
                             batch.out[measured], end)
        batch.keep(~finished[: batch.n])
