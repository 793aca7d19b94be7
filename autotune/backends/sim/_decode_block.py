"""The replay's fast path: many decode steps at once while the running batch cannot change.

Under load most steps are pure decode steps of the same requests: every running request
verifies its window, nobody is prefilling, and no waiting request could be admitted. Then
nothing about the step's shape changes until a request finishes, a new request arrives, or
the KV cache runs short, so the acceptance of a whole block of steps can be drawn at once
(an array of steps × requests × positions) and the block cut at the first of those events.
The draws, the emitted tokens, the KV blocks, the ITL gaps and the acceptance counters are
exactly those of the single-step path (:mod:`._engine`) applied step after step; only the
order of the random draws differs.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from autotune.backends.sim._adaptive import accepted_prefix, block_verify_budgets
from autotune.backends.sim._batch import FloatArray, IntArray
from autotune.backends.sim._state import ReplayState

__all__ = ["advance_steady_decode"]

#: Largest (steps × rows × window) block drawn at once.
MAX_BLOCK_CELLS = 1 << 21
#: Longest block, in steps.
MAX_BLOCK_STEPS = 1024


def _batch_is_steady(state: ReplayState) -> bool:
    """Every running request decodes its full window within the token budget, and no waiting
    request could be admitted (the batch is full in sequences or in tokens)."""
    cfg = state.cfg
    batch = state.running
    rows = batch.n
    tokens_per_row = 1 + cfg.window
    if rows == 0 or rows * tokens_per_row > cfg.max_num_batched_tokens:
        return False
    if (state.waiting and cfg.max_num_seqs > rows
            and cfg.max_num_batched_tokens > rows * tokens_per_row):
        return False
    return not np.logical_or.reduce(batch.done[:rows] < batch.need[:rows])


def advance_steady_decode(state: ReplayState, now: float) -> float | None:
    """Advance ``state`` by a block of steady decode steps; the simulated seconds advanced.

    Returns None (nothing done) when the batch could change at the next step: a request is
    still prefilling, a waiting request could be admitted, the window does not fit the token
    budget, or not even one step fits before the next arrival or the KV cache's end. The
    caller then runs one ordinary step.

    The block's length (the horizon) is sized so that the request closest to done finishes
    inside it at the recent emission rate. For each step of the horizon the acceptance of every
    request's draft is drawn as in a single step (one step shift per request, one logistic
    variate per position); with adaptive verification each step's verify budget is chosen from
    the head's confidences (:func:`._adaptive.block_verify_budgets`). The block is cut at the
    first step in which a request finishes, the last step that starts before the next arrival
    (trace mode), and the last step whose new KV blocks still fit.
    """
    if not _batch_is_steady(state):
        return None
    cfg = state.cfg
    batch = state.running
    rows = batch.n
    window = cfg.window
    tokens_per_row = 1 + window
    owed = batch.out[:rows] - batch.gen[:rows]
    horizon = int(int(np.minimum.reduce(owed)) / state.emit_rate * 1.25) + 2
    horizon = min(horizon, MAX_BLOCK_STEPS, max(2, MAX_BLOCK_CELLS // (rows * max(window, 1))))
    kv_start = float(np.add.reduce(batch.kv[:rows]))
    draft_s = cfg.draft_time(rows, 0, kv_start / rows)

    # acceptance of every (step, request): the accepted prefix of the drafted window
    budget: IntArray | None = None  # adaptive: draft tokens verified per (step, request)
    if window > 0:
        step_shift = state.rand.normal(horizon * rows).reshape(horizon, rows) * batch.sd[:rows]
        draws = state.rand.logistic(horizon * rows * window).reshape(horizon, rows, window)
        thresholds = batch.true[:rows, :window][None, :, :] + step_shift[:, :, None]
        accepted = accepted_prefix(draws, thresholds)
        if cfg.adaptive:
            budget = block_verify_budgets(batch.head[:rows, :window], step_shift, cfg.cost,
                                          kv_start, draft_s)
            accepted = np.minimum(accepted, budget)
    else:
        accepted = np.zeros((horizon, rows), dtype=np.int64)
    advanced = accepted + 1  # tokens each request moves forward per step
    emitted_so_far = advanced.cumsum(axis=0)
    finishing = np.logical_or.reduce(emitted_so_far >= owed, axis=1)
    if np.logical_or.reduce(finishing):
        horizon = int(finishing.argmax()) + 1  # stop at the first step a request finishes
        accepted, advanced = accepted[:horizon], advanced[:horizon]
        emitted_so_far = emitted_so_far[:horizon]
        if budget is not None:
            budget = budget[:horizon]

    # KV blocks each step needs, and the step times
    kv_before = np.empty((horizon, rows), dtype=np.int64)
    kv_before[0] = batch.kv[:rows]
    kv_before[1:] = emitted_so_far[:-1] + batch.kv[:rows]
    bs = cfg.kv_block_size
    blocks_needed = (kv_before + (tokens_per_row + bs - 1)) // bs
    new_blocks = np.add.reduce(np.maximum(blocks_needed - batch.blocks[:rows], 0), axis=1)
    kv_read = np.add.reduce(kv_before, axis=1)
    if budget is None:
        tokens: FloatArray | float = float(rows * tokens_per_row)
        context = kv_read / rows
    else:
        tokens = (rows + np.add.reduce(budget, axis=1)).astype(np.float64)
        context = np.add.reduce((1 + budget) * kv_before, axis=1) / tokens
    step_s = cfg.cost.decode_steps(tokens, kv_read, context, draft_s)
    step_end = now + step_s.cumsum()

    # cut the block at the next arrival and where the KV cache runs out
    steps = horizon
    if state.schedule.mode == "trace":
        next_arrival = state.incoming.peek_time()
        steps = min(steps, int((step_end - step_s).searchsorted(next_arrival, "left")))
    steps = min(steps, int(new_blocks.searchsorted(state.free_blocks, "right")))
    if steps < 1:
        return None
    if steps < horizon:
        accepted, advanced = accepted[:steps], advanced[:steps]
        step_s, step_end = step_s[:steps], step_end[:steps]
        emitted_so_far = emitted_so_far[:steps]
        if budget is not None:
            budget = budget[:steps]

    # apply: tokens emitted (the last step never emits more than a request still owes)
    emit = advanced.copy()
    overshoot = emitted_so_far[steps - 1] - owed
    if np.logical_or.reduce(overshoot > 0):
        emit[-1] -= np.maximum(overshoot, 0)
    mean_advance = float(np.add.reduce(advanced, axis=None)) / advanced.size
    state.emit_rate = 0.8 * state.emit_rate + 0.2 * mean_advance
    end = float(step_end[-1])
    batch.gen[:rows] += np.add.reduce(emit, axis=0)
    batch.kv[:rows] += np.add.reduce(advanced, axis=0)
    np.maximum(batch.blocks[:rows], blocks_needed[steps - 1], out=batch.blocks[:rows])
    state.free_blocks -= int(new_blocks[steps - 1])
    state.note_kv_use()
    state.note_asked(rows, rows * tokens_per_row)
    _record_measured(state, accepted, budget, step_s, step_end)
    if state.on_emit is not None:
        for k in range(steps):
            state.on_emit(batch.seq[:rows].copy(), emit[k], float(step_end[k]))
    batch.last_t[:rows] = end
    state.steps += steps
    state.batch_sum += steps * rows
    state.step_time_sum += float(np.add.reduce(step_s))
    finished = batch.gen[:rows] >= batch.out[:rows]
    if np.logical_or.reduce(finished):
        state.complete(finished, end)
    return end - now


def _record_measured(state: ReplayState, accepted: IntArray, budget: IntArray | None,
                     step_s: FloatArray, step_end: FloatArray) -> None:
    """Acceptance counters and ITL gaps of the measured (post-warm-up) requests of a block."""
    batch = state.running
    rows = batch.n
    window = state.cfg.window
    measured = batch.measured[:rows]
    n_measured = int(np.count_nonzero(measured))
    if not n_measured:
        return
    cols: slice | npt.NDArray[np.bool_] = slice(0, rows) if n_measured == rows else measured
    if window > 0 and budget is None:  # every step verified the whole window
        state.hist += np.bincount((accepted[:, cols] + window * (window + 1)).ravel(),
                                  minlength=state.hist.size)
    elif budget is not None:
        verified = budget[:, cols]
        drafted = verified > 0
        state.hist += np.bincount((verified * (window + 1) + accepted[:, cols])[drafted],
                                  minlength=state.hist.size)
        state.budget_sum += int(np.add.reduce(verified, axis=None))
        state.budget_steps += verified.size
    state.itl.extend(step_end[0] - batch.last_t[:rows][cols])
    if step_s.size > 1:
        state.itl.extend(np.repeat(step_s[1:], n_measured))
