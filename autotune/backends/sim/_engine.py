"""The discrete-event replica: continuous batching with chunked prefill and speculative decoding.

One loop iteration is one engine step, scheduled the way vLLM's V1 scheduler does it:

1. running requests in admission order get their tokens from the step's token budget
   (``max_num_batched_tokens``): a decoding request verifies its window (1 + n tokens, the
   window truncated when the budget runs out), a prefilling one takes its next chunk;
2. KV blocks are allocated for the scheduled tokens; when the cache is full the most recently
   admitted request is preempted (its blocks freed; it is recomputed later from its prompt and
   the tokens it already produced), as vLLM's recompute preemption does;
3. if nothing was preempted, waiting requests are admitted first-come-first-served while the
   budget, ``max_num_seqs`` and free KV blocks allow;
4. the step time comes from the profile (:mod:`._cost` plus the drafter), and at its end each
   decoding request accepts a prefix of its draft drawn from its true acceptance profile and
   emits accepted + 1 tokens (never more than it still owes).

Requests live in struct-of-array columns while running (:mod:`._batch`), so a step is a handful
of numpy operations over the batch; waiting requests are small records in a deque. When the
batch cannot change for a while, :mod:`._decode_block` advances many decode steps at once.

A replay runs tens of thousands of steps over batches of tens to hundreds of rows, where a
numpy call's fixed cost outweighs its arithmetic. So the per-step code (here, in
:mod:`._decode_block` and :mod:`._adaptive`) calls ufunc methods and C-level array methods
(``np.add.reduce``, ``np.logical_or.reduce``, ``a.cumsum()``, ``a.nonzero()``) instead of
``a.sum()`` / ``a.any()`` / ``np.cumsum``, whose Python-level wrappers cost as much again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from autotune.backends.sim._adaptive import accepted_prefix, step_verify_budget
from autotune.backends.sim._decode_block import advance_steady_decode
from autotune.backends.sim._source import Record
from autotune.backends.sim._state import EmitObserver, EngineConfig, ReplayState
from autotune.errors import BackendError
from autotune.types import (
    PEAK_IN_FLIGHT,
    SEQS_REACHED,
    TOKENS_REACHED,
    AcceptanceCounts,
    Measurement,
    Progress,
    ReplaySchedule,
    Request,
)

__all__ = ["EmitObserver", "EngineConfig", "simulate_replay"]

#: Some rows of the running batch: a slice (a view) or row indices.
Rows = slice | npt.NDArray[np.int64]


def _total(requests: Iterable[Request]) -> int | None:
    try:
        return len(requests)  # type: ignore[arg-type]
    except TypeError:
        return None


def simulate_replay(cfg: EngineConfig, schedule: ReplaySchedule, progress: Progress | None = None,
                    on_emit: EmitObserver | None = None) -> Measurement:
    """Replay ``schedule`` on a replica configured by ``cfg``; deterministic given the seeds."""
    return _Replay(cfg, schedule, progress, on_emit).run()


class _Replay(ReplayState):
    """The event loop of one replay: arrivals, one engine step at a time, the measurement."""

    def __init__(self, cfg: EngineConfig, schedule: ReplaySchedule,
                 progress: Progress | None, on_emit: EmitObserver | None = None) -> None:
        super().__init__(cfg, schedule, on_emit)
        self.progress = progress
        self.total = _total(schedule.requests)
        #: the first request's arrival (warm-up included): the replica is busy from then on
        self.first_sent = math.inf
        #: the replica clock when the replay ended (its last completion)
        self.end = 0.0

    # -- intake ------------------------------------------------------------------------------
    def _admit_record(self, r: Record | None) -> bool:
        if r is None:
            return False
        self.first_sent = min(self.first_sent, r.arrival)
        if r.measured:
            self.results.first_arrival = min(self.results.first_arrival, r.arrival)
        if r.prompt + r.out > self.cfg.max_model_len:
            self.rejected += 1
            self.finished += 1
            if r.measured:
                self.results.fail(r.arrival)
            return True
        self.waiting.append(r)
        self.peak_in_flight = max(self.peak_in_flight, self.running.n + len(self.waiting))
        return True

    def _arrive(self, now: float) -> None:
        inc = self.incoming
        if self.schedule.mode == "trace":
            while inc.peek_time() <= now:
                self._admit_record(inc.pop(now))
            return
        target = max(1, self.schedule.concurrency)
        while self.running.n + len(self.waiting) < target and not inc.exhausted:
            if not self._admit_record(inc.pop(now)):
                break

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> Measurement:
        wall0 = time.perf_counter()
        last_report = wall0
        now = 0.0
        loops = 0
        trace = self.schedule.mode == "trace"
        while True:
            self._arrive(now)
            if self.running.n == 0 and not self.waiting:
                if trace:
                    nxt = self.incoming.peek_time()
                    if math.isinf(nxt):
                        break
                    now = max(now, nxt)
                    continue
                if self.incoming.exhausted:
                    break
                continue
            dt = advance_steady_decode(self, now)
            if dt is None:
                dt = self._step(now)
                self.steps += 1
            now += dt
            loops += 1
            if self.progress is not None and (loops & 255) == 0:
                wall = time.perf_counter()
                if wall - last_report > 0.25:
                    last_report = wall
                    self.progress(self.finished, self.total)
        if self.progress is not None:
            self.progress(self.finished, self.total if self.total is not None else self.finished)
        self.end = now
        return self._measurement(time.perf_counter() - wall0)

    def _step(self, now: float) -> float:
        """One engine step: schedule the running requests (preempting when KV runs out), admit
        waiting ones, then execute; the step's duration."""
        cfg = self.cfg
        batch = self.running
        n = cfg.window
        bs = cfg.kv_block_size
        budget = cfg.max_num_batched_tokens
        rows = batch.n
        preempted = False
        if rows:
            need, done = batch.need[:rows], batch.done[:rows]
            remaining = need - done
            desired = np.where(remaining > 0, remaining, 1 + n)
            asked = int(np.add.reduce(desired))
            sched = desired
            if asked > budget:
                cum = desired.cumsum()
                sched = np.clip(budget - (cum - desired), 0, desired)
            want = np.maximum((batch.kv[:rows] + sched + (bs - 1)) // bs - batch.blocks[:rows], 0)
            extra = int(np.add.reduce(want))
            while extra > self.free_blocks and rows > 1:
                rows -= 1  # preempt the most recently admitted request
                self.free_blocks += int(batch.blocks[rows])
                self.waiting.appendleft(batch.record(rows))
                self.preemptions += 1
                preempted = True
                extra -= int(want[rows])
                batch.n = rows
                sched, want = sched[:rows], want[:rows]
            budget -= int(np.add.reduce(sched))
            self.free_blocks -= extra
            batch.blocks[:rows] += want
        else:
            asked = 0
            sched = np.zeros(0, dtype=np.int64)
        if not preempted and self.waiting and budget > 0:
            new: list[int] = []
            while self.waiting and batch.n < cfg.max_num_seqs and budget > 0:
                r = self.waiting[0]
                chunk = min(r.need, budget)
                blocks = (chunk + bs - 1) // bs
                if blocks > self.free_blocks:
                    break
                self.waiting.popleft()
                i = batch.push(r)
                batch.blocks[i] = blocks
                self.free_blocks -= blocks
                budget -= chunk
                asked += r.need
                new.append(chunk)
            if new:
                sched = np.concatenate([sched, np.asarray(new, dtype=np.int64)])
        rows = batch.n
        if rows == 0:  # cannot happen once one max_model_len sequence fits the cache
            raise BackendError(f"simulator stalled at t={now:.3f}s: nothing schedulable with "
                               f"{self.free_blocks} free KV blocks")
        self.note_kv_use()
        self.note_asked(rows, asked)
        return self._execute(now, sched, rows)

    def _execute(self, now: float, sched: npt.NDArray[np.int64], rows: int) -> float:
        cfg = self.cfg
        batch = self.running
        n = cfg.window
        prefilling = batch.done[:rows] < batch.need[:rows]
        decoding = ~prefilling & (sched > 0)
        dec = decoding.nonzero()[0]
        pre = (prefilling & (sched > 0)).nonzero()[0]
        nd = dec.size
        # rows are in admission order, so the decoding rows are usually the first nd: then a
        # slice selects them (views) instead of a gather (copies)
        d: Rows = slice(0, nd) if nd == 0 or dec[-1] == nd - 1 else dec
        m = sched[d] - 1 if n > 0 else np.zeros(nd, dtype=np.int64)
        chunks = sched[pre]
        pre_tokens = int(np.add.reduce(chunks))
        kv_ctx = float(np.add.reduce(batch.kv[d])) if nd else 0.0
        pairs = (float(np.add.reduce(chunks * (batch.done[pre] + chunks * 0.5))) if pre.size
                 else 0.0)
        # keys a batch token attends to, on average (the table law's context coordinate)
        context = (kv_ctx + pairs) / max(nd + pre_tokens, 1)
        draft = 0.0
        if cfg.drafter is not None and n > 0:
            finishing = int(np.count_nonzero(batch.done[pre] + chunks >= batch.need[pre]))
            draft = cfg.draft_time(nd + finishing, pre_tokens, context)
        z = None
        if n > 0 and nd:
            z = self.rand.normal(nd) * batch.sd[d]
            if cfg.adaptive:
                m = self._adaptive_budget(d, nd, m, z, pre_tokens, kv_ctx, pairs, context,
                                          draft)
        tokens = pre_tokens + nd + int(np.add.reduce(m))
        if cfg.cost.law == "table" and nd and n > 0:
            context = (float(np.add.reduce((1 + m) * batch.kv[d])) + pairs) / tokens
        dt = cfg.cost.target(tokens, kv_ctx, pairs, context) + draft
        end = now + dt
        self.batch_sum += nd
        self.step_time_sum += dt
        if nd:
            self._decode(d, nd, m, z, end)
        if pre.size:
            self._prefill(pre, chunks, end)
        finished = batch.gen[:rows] >= batch.out[:rows]
        if np.logical_or.reduce(finished):
            self.complete(finished, end)
        return dt

    def _adaptive_budget(self, d: Rows, nd: int, m_max: npt.NDArray[np.int64],
                         z: npt.NDArray[np.float64], pre_tokens: int, kv_ctx: float,
                         pairs: float, context: float, draft: float) -> npt.NDArray[np.int64]:
        """DSpark adaptive verification: per step, the verify budget (draft tokens per request)
        that maximises expected emitted tokens per step time, from the head's confidences."""
        chosen = step_verify_budget(self.running.head[d, :self.cfg.window], z, m_max,
                                    self.cfg.cost, pre_tokens + nd, kv_ctx, pairs, context,
                                    draft)
        self.budget_sum += int(np.add.reduce(chosen))
        self.budget_steps += nd
        return chosen

    def _decode(self, d: Rows, nd: int, m: npt.NDArray[np.int64],
                z: npt.NDArray[np.float64] | None, end: float) -> None:
        """The decoding rows ``d`` (``nd`` of them) verify ``m`` draft tokens each and emit."""
        batch = self.running
        n = self.cfg.window
        measured = batch.measured[d]
        if n > 0 and z is not None:
            eps = self.rand.logistic(nd * n).reshape(nd, n)
            accepted = np.minimum(accepted_prefix(eps, batch.true[d, :n] + z[:, None]), m)
            meas = measured & (m > 0)
            if np.logical_or.reduce(meas):
                idx = m[meas] * (n + 1) + accepted[meas]
                self.hist += np.bincount(idx, minlength=self.hist.size)
        else:
            accepted = np.zeros(nd, dtype=np.int64)
        emit = np.minimum(accepted + 1, batch.out[d] - batch.gen[d])
        batch.gen[d] += emit
        if self.on_emit is not None:
            self.on_emit(batch.seq[d].copy(), emit, end)
        batch.kv[d] += accepted + 1
        if np.logical_and.reduce(measured):
            self.itl.extend(end - batch.last_t[d])
        elif np.logical_or.reduce(measured):
            self.itl.extend(end - batch.last_t[d][measured])
        batch.last_t[d] = end

    def _prefill(self, pre: npt.NDArray[np.int64], chunks: npt.NDArray[np.int64],
                 end: float) -> None:
        batch = self.running
        batch.done[pre] += chunks
        batch.kv[pre] += chunks
        fin = pre[batch.done[pre] >= batch.need[pre]]
        if fin.size == 0:
            return
        batch.gen[fin] += 1
        if self.on_emit is not None:
            self.on_emit(batch.seq[fin], np.ones(fin.size, dtype=np.int64), end)
        again = fin[~np.isnan(batch.first_t[fin])]  # recomputed after preemption: an ITL gap
        if again.size:
            meas = again[batch.measured[again]]
            if meas.size:
                self.itl.extend(end - batch.last_t[meas])
        first = fin[np.isnan(batch.first_t[fin])]
        batch.first_t[first] = end
        batch.last_t[fin] = end

    # -- result ------------------------------------------------------------------------------
    def _measurement(self, wall: float) -> Measurement:
        res = self.results
        n = self.cfg.window
        acceptance = None
        if n > 0:
            hist = self.hist.reshape(n + 1, n + 1)  # [verified m, accepted a]
            ms = np.arange(n + 1)
            drafts = int(hist[1:].sum())
            draft_tokens = int((hist.sum(axis=1) * ms).sum())
            per_accept = hist.sum(axis=0)
            accepted = int((per_accept * ms).sum())
            per_pos = tuple(int(per_accept[k + 1:].sum()) for k in range(n))
            acceptance = AcceptanceCounts(drafts, draft_tokens, accepted, per_pos)
        elif self.cfg.drafter is not None:
            acceptance = AcceptanceCounts(0, 0, 0, ())
        duration = (res.last_finish - res.first_arrival
                    if math.isfinite(res.first_arrival) and math.isfinite(res.last_finish)
                    else 0.0)
        errors: tuple[str, ...] = ()
        if self.rejected:
            errors = (f"{self.rejected} request(s) rejected: prompt_tokens + output_tokens "
                      f"exceeds max_model_len={self.cfg.max_model_len} (vLLM answers 400)",)
        steps = max(self.steps, 1)
        extra = {
            "steps": float(self.steps),
            "mean_batch_size": self.batch_sum / steps,
            "mean_step_ms": 1000.0 * self.step_time_sum / steps,
            "preemptions": float(self.preemptions),
            "rejected_requests": float(self.rejected),
            "kv_peak_utilization": self.peak_blocks / max(self.cfg.kv_blocks, 1),
            PEAK_IN_FLIGHT: float(self.peak_in_flight),
            SEQS_REACHED: float(self.seqs_reached),
            TOKENS_REACHED: float(self.tokens_reached),
            "out_of_order_arrivals": float(self.incoming.out_of_order),
            "itl_subsampled": float(self.itl.sampled),
        }
        if self.budget_steps:
            extra["mean_verify_budget"] = self.budget_sum / self.budget_steps
        ttft, tpot, e2e, out, ok = res.arrays()
        return Measurement(
            ttft_s=ttft,
            tpot_s=tpot,
            e2e_s=e2e,
            output_tokens=out,
            ok=ok,
            itl_s=self.itl.array(),
            duration_s=max(duration, 0.0),
            wall_time_s=wall,
            acceptance=acceptance,
            errors=errors,
            extra=extra,
            busy_s=max(self.end - self.first_sent, 0.0) if math.isfinite(self.first_sent) else 0.0,
        )
