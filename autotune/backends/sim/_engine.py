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

Requests live in struct-of-array columns while running, so a step is a handful of numpy
operations over the batch; waiting requests are small records in a deque.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autotune.backends.sim._cost import StepCost
from autotune.backends.sim._profile import DrafterProfile
from autotune.backends.sim._source import Incoming, Record
from autotune.backends.sim._stats import Column, ThinnedPool
from autotune.backends.sim._truth import HeadMap
from autotune.errors import BackendError
from autotune.types import AcceptanceCounts, Measurement, Progress, ReplaySchedule, Request

__all__ = ["EmitObserver", "EngineConfig", "replay"]

ITL_CAP = 200_000
#: Largest (steps x rows x window) block one multi-step decode draws at once.
_MACRO_CELLS = 1 << 21
_RAND_BLOCK = 1 << 15


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Everything one replay needs besides the schedule (all fixed for a replica)."""

    cost: StepCost
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


class _RandomBlocks:
    """Pre-drawn logistic and normal variates handed out in slices (fewer RNG calls)."""

    __slots__ = ("_logistic", "_lpos", "_normal", "_npos", "_rng")

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._logistic = rng.logistic(size=_RAND_BLOCK)
        self._normal = rng.standard_normal(_RAND_BLOCK)
        self._lpos = 0
        self._npos = 0

    def logistic(self, k: int) -> npt.NDArray[np.float64]:
        if self._lpos + k > self._logistic.size:
            self._logistic = self._rng.logistic(size=max(_RAND_BLOCK, k))
            self._lpos = 0
        out = self._logistic[self._lpos: self._lpos + k]
        self._lpos += k
        return out

    def normal(self, k: int) -> npt.NDArray[np.float64]:
        if self._npos + k > self._normal.size:
            self._normal = self._rng.standard_normal(max(_RAND_BLOCK, k))
            self._npos = 0
        out = self._normal[self._npos: self._npos + k]
        self._npos += k
        return out


IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class _Running:
    """Struct-of-arrays of the running requests, rows in admission order."""

    INT = ("seq", "prompt", "out", "gen", "need", "done", "kv", "blocks", "pre")
    FLOAT = ("arrival", "first_t", "last_t", "sd")
    seq: IntArray
    prompt: IntArray
    out: IntArray
    gen: IntArray
    need: IntArray
    done: IntArray
    kv: IntArray
    blocks: IntArray
    pre: IntArray
    arrival: FloatArray
    first_t: FloatArray
    last_t: FloatArray
    sd: FloatArray
    measured: npt.NDArray[np.bool_]
    true: FloatArray
    head: FloatArray

    def __init__(self, block: int, capacity: int = 64) -> None:
        self.block = block
        self.n = 0
        self.capacity = 0
        self._alloc(capacity)

    def _columns(self) -> tuple[str, ...]:
        return (*self.INT, *self.FLOAT, "measured", "true", "head")

    def _alloc(self, capacity: int) -> None:
        n = self.n if self.capacity else 0
        for name in self._columns():
            if name in self.INT:
                fresh: npt.NDArray[np.generic] = np.zeros(capacity, dtype=np.int64)
            elif name in self.FLOAT:
                fresh = np.zeros(capacity, dtype=np.float64)
            elif name == "measured":
                fresh = np.zeros(capacity, dtype=bool)
            else:
                fresh = np.zeros((capacity, self.block))
            if n:
                fresh[:n] = getattr(self, name)[:n]
            setattr(self, name, fresh)
        self.capacity = capacity

    def push(self, r: Record) -> int:
        if self.n == self.capacity:
            self._alloc(2 * self.capacity)
        i = self.n
        self.seq[i] = r.seq
        self.prompt[i] = r.prompt
        self.out[i] = r.out
        self.gen[i] = r.gen
        self.need[i] = r.need
        self.done[i] = 0
        self.kv[i] = 0
        self.blocks[i] = 0
        self.pre[i] = r.preemptions
        self.arrival[i] = r.arrival
        self.first_t[i] = r.first_t
        self.last_t[i] = r.last_t
        self.sd[i] = r.step_sd
        self.measured[i] = r.measured
        if self.block:
            self.true[i] = r.true
            self.head[i] = r.head
        self.n += 1
        return i

    def record(self, i: int) -> Record:
        """Row ``i`` as a waiting record after preemption (recompute prompt + output so far)."""
        gen = int(self.gen[i])
        return Record(seq=int(self.seq[i]), arrival=float(self.arrival[i]),
                      prompt=int(self.prompt[i]), out=int(self.out[i]), gen=gen,
                      need=int(self.prompt[i]) + gen, first_t=float(self.first_t[i]),
                      last_t=float(self.last_t[i]), preemptions=int(self.pre[i]) + 1,
                      true=self.true[i].copy(), head=self.head[i].copy(),
                      step_sd=float(self.sd[i]), measured=bool(self.measured[i]))

    def keep(self, mask: npt.NDArray[np.bool_]) -> None:
        """Drop the rows where ``mask`` is False, preserving order."""
        n = self.n
        k = int(mask.sum())
        for name in (*self.INT, *self.FLOAT, "measured"):
            col = getattr(self, name)
            col[:k] = col[:n][mask]
        if self.block:
            self.true[:k] = self.true[:n][mask]
            self.head[:k] = self.head[:n][mask]
        self.n = k


class _Results:
    """Per-request columns of measured requests, in completion order."""

    def __init__(self) -> None:
        self.ttft = Column(np.float64)
        self.tpot = Column(np.float64)
        self.e2e = Column(np.float64)
        self.out = Column(np.int64)
        self.ok = Column(np.bool_)
        self.first_arrival = math.inf
        self.last_finish = -math.inf

    def add(self, ttft: npt.NDArray[np.float64], e2e: npt.NDArray[np.float64],
            out: npt.NDArray[np.int64], finish: float) -> None:
        self.ttft.extend(ttft)
        self.e2e.extend(e2e)
        decode = e2e - ttft
        tpot = np.where(out > 1, decode / np.maximum(out - 1, 1), 0.0)
        self.tpot.extend(tpot)
        self.out.extend(out)
        self.ok.extend(np.ones(out.size, dtype=bool))
        self.last_finish = max(self.last_finish, finish)

    def fail(self, at: float) -> None:
        for col in (self.ttft, self.tpot, self.e2e):
            col.extend(np.array([math.nan]))
        self.out.extend(np.array([0]))
        self.ok.extend(np.array([False]))
        self.last_finish = max(self.last_finish, at)


def _total(requests: Iterable[Request]) -> int | None:
    try:
        return len(requests)  # type: ignore[arg-type]
    except TypeError:
        return None


#: Test hook: called after every step with (request sequence numbers, tokens emitted, time).
EmitObserver = Callable[[IntArray, IntArray, float], None]


def replay(cfg: EngineConfig, schedule: ReplaySchedule, progress: Progress | None = None,
           on_emit: EmitObserver | None = None) -> Measurement:
    """Replay ``schedule`` on a replica configured by ``cfg``; deterministic given the seeds."""
    return _Replay(cfg, schedule, progress, on_emit).run()


class _Replay:
    def __init__(self, cfg: EngineConfig, schedule: ReplaySchedule,
                 progress: Progress | None, on_emit: EmitObserver | None = None) -> None:
        self.cfg = cfg
        self.on_emit = on_emit
        self.schedule = schedule
        self.progress = progress
        seeds = [abs(int(cfg.seed)) & 0xFFFFFFFF, abs(int(schedule.seed)) & 0xFFFFFFFF]
        self.rng = np.random.default_rng(seeds)
        self.rand = _RandomBlocks(self.rng)
        self.itl = ThinnedPool(ITL_CAP, np.random.default_rng([*seeds, 1]))
        self.results = _Results()
        self.running = _Running(cfg.block if cfg.window > 0 else 0)
        self.waiting: deque[Record] = deque()
        self.incoming = Incoming(
            schedule.requests, trace=schedule.mode == "trace", time_scale=schedule.time_scale,
            warmup=schedule.warmup_requests, drafter=cfg.drafter if cfg.window > 0 else None,
            head_map=cfg.head_map, block=cfg.block, seed=cfg.seed)
        self.total = _total(schedule.requests)
        self.free_blocks = cfg.kv_blocks
        n = max(cfg.window, 0)
        self.hist = np.zeros((n + 1) * (n + 1), dtype=np.int64)
        self.finished = 0
        self.steps = 0
        self.batch_sum = 0
        self.step_time_sum = 0.0
        self.preemptions = 0
        self.rejected = 0
        self.peak_blocks = 0
        self.budget_sum = 0
        self.budget_steps = 0
        self.emit_rate = 1.0 + 0.5 * max(cfg.window, 0)

    # -- intake ------------------------------------------------------------------------------
    def _admit_record(self, r: Record | None) -> bool:
        if r is None:
            return False
        if r.measured:
            self.results.first_arrival = min(self.results.first_arrival, r.arrival)
        if r.prompt + r.out > self.cfg.max_model_len:
            self.rejected += 1
            self.finished += 1
            if r.measured:
                self.results.fail(r.arrival)
            return True
        self.waiting.append(r)
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
            dt = self._macro(now)
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
        return self._measurement(time.perf_counter() - wall0)

    def _macro(self, now: float) -> float | None:
        """Several steady decode steps at once, when the batch cannot change in between.

        Applies when every running request is decoding, no waiting request could be admitted,
        and adaptive verification is off: then the rows, their token counts and the step's
        cost structure stay fixed until the first request finishes, the next arrival, or the
        KV cache runs short. Acceptance is drawn for a block of steps ahead and the block is
        cut at the first of those events; the draws and bookkeeping are the single-step ones,
        vectorised over (steps, rows).
        """
        cfg = self.cfg
        R = self.running
        B = R.n
        n = cfg.window
        per = 1 + n
        if B == 0 or B * per > cfg.max_num_batched_tokens:
            return None
        if (self.waiting and cfg.max_num_seqs > B
                and cfg.max_num_batched_tokens > B * per):
            return None
        if np.any(R.done[:B] < R.need[:B]):
            return None
        owe = R.out[:B] - R.gen[:B]
        # enough steps for the nearest request to finish at the recent emission rate
        K = int(int(owe.min()) / self.emit_rate * 1.25) + 2
        K = min(K, 1024, max(2, _MACRO_CELLS // (B * max(n, 1))))
        draft = (cfg.drafter.draft_time(n, B, 0)
                 if cfg.drafter is not None and n > 0 else 0.0)
        m: IntArray | None = None
        if n > 0:
            z = self.rand.normal(K * B).reshape(K, B) * R.sd[:B]
            eps = self.rand.logistic(K * B * n).reshape(K, B, n)
            ok = eps < R.true[:B, :n][None, :, :] + z[:, :, None]
            acc = np.cumprod(ok, axis=2).sum(axis=2)
            if cfg.adaptive:
                m = self._adaptive_many(z, draft)
                acc = np.minimum(acc, m)
        else:
            acc = np.zeros((K, B), dtype=np.int64)
        adv = acc + 1
        emitted = np.cumsum(adv, axis=0)
        finishing = (emitted >= owe).any(axis=1)
        if finishing.any():
            K = int(np.argmax(finishing)) + 1  # stop at the first step a request finishes
            acc, adv, emitted = acc[:K], adv[:K], emitted[:K]
            if m is not None:
                m = m[:K]
        kv_before = np.empty((K, B), dtype=np.int64)
        kv_before[0] = R.kv[:B]
        kv_before[1:] = emitted[:-1] + R.kv[:B]
        bs = cfg.kv_block_size
        need_blocks = (kv_before + (per + bs - 1)) // bs
        extra = np.maximum(need_blocks - R.blocks[:B], 0).sum(axis=1)
        if m is None:
            const: FloatArray | float = cfg.cost.target(B * per, 0.0, 0.0) + draft
        else:
            const = cfg.cost.target_many((B + m.sum(axis=1)).astype(np.float64), 0.0, 0.0) + draft
        dt = const + cfg.cost.cost.kv_token_s * kv_before.sum(axis=1)
        ends = now + np.cumsum(dt)
        k_eff = K
        if self.schedule.mode == "trace":
            k_eff = min(k_eff, int(np.searchsorted(ends - dt, self.incoming.peek_time(), "left")))
        k_eff = min(k_eff, int(np.searchsorted(extra, self.free_blocks, "right")))
        if k_eff < 1:
            return None
        if k_eff < K:
            acc, adv, dt, ends = acc[:k_eff], adv[:k_eff], dt[:k_eff], ends[:k_eff]
            emitted = emitted[:k_eff]
            if m is not None:
                m = m[:k_eff]
        emit = adv.copy()
        over = emitted[k_eff - 1] - owe
        if np.any(over > 0):
            emit[-1] -= np.maximum(over, 0)
        self.emit_rate = 0.8 * self.emit_rate + 0.2 * float(adv.mean())
        end = float(ends[-1])
        R.gen[:B] += emit.sum(axis=0)
        R.kv[:B] += adv.sum(axis=0)
        np.maximum(R.blocks[:B], need_blocks[k_eff - 1], out=R.blocks[:B])
        self.free_blocks -= int(extra[k_eff - 1])
        used = cfg.kv_blocks - self.free_blocks
        if used > self.peak_blocks:
            self.peak_blocks = used
        meas = R.measured[:B]
        nm = int(meas.sum())
        if nm:
            if n > 0 and m is None:
                self.hist += np.bincount((acc[:, meas] + n * (n + 1)).ravel(),
                                         minlength=self.hist.size)
            elif m is not None:
                mm = m[:, meas]
                drafted = mm > 0
                self.hist += np.bincount((mm * (n + 1) + acc[:, meas])[drafted],
                                         minlength=self.hist.size)
                self.budget_sum += int(mm.sum())
                self.budget_steps += mm.size
            self.itl.extend(ends[0] - R.last_t[:B][meas])
            if k_eff > 1:
                self.itl.extend(np.repeat(dt[1:], nm))
        if self.on_emit is not None:
            for k in range(k_eff):
                self.on_emit(R.seq[:B].copy(), emit[k], float(ends[k]))
        R.last_t[:B] = end
        self.steps += k_eff
        self.batch_sum += k_eff * B
        self.step_time_sum += float(dt.sum())
        finished = R.gen[:B] >= R.out[:B]
        if finished.any():
            self._complete(finished, end)
        return end - now

    def _adaptive_many(self, z: FloatArray, draft: float) -> IntArray:
        """:meth:`_adaptive_budget` for a block of steady decode steps (rows = steps).

        The KV-read term is taken at the block's start for the choice (it shifts every
        candidate's step time by the same small amount); the step times themselves use the
        exact context.
        """
        R = self.running
        n = self.cfg.window
        K, B = z.shape
        conf = 1.0 / (1.0 + np.exp(-(R.head[:B, :n][None, :, :] + z[:, :, None])))
        surv = np.cumprod(conf, axis=2)
        desc = -np.sort(-surv.reshape(K, B * n), axis=1)
        gains = np.zeros((K, B * n + 1))
        np.cumsum(desc, axis=1, out=gains[:, 1:])
        kv = float(R.kv[:B].sum())
        times = self.cfg.cost.target_many(B + np.arange(B * n + 1, dtype=np.float64), kv,
                                          0.0) + draft
        best = np.argmax((B + gains) / times[None, :], axis=1)
        thr = np.where(best > 0, desc[np.arange(K), np.maximum(best - 1, 0)], np.inf)
        out: IntArray = (surv >= thr[:, None, None]).sum(axis=2)
        return out

    def _step(self, now: float) -> float:
        cfg = self.cfg
        R = self.running
        n = cfg.window
        bs = cfg.kv_block_size
        budget = cfg.max_num_batched_tokens
        B = R.n
        preempted = False
        if B:
            need, done = R.need[:B], R.done[:B]
            remaining = need - done
            desired = np.where(remaining > 0, remaining, 1 + n)
            sched = desired
            if int(desired.sum()) > budget:
                cum = np.cumsum(desired)
                sched = np.clip(budget - (cum - desired), 0, desired)
            want = np.maximum((R.kv[:B] + sched + (bs - 1)) // bs - R.blocks[:B], 0)
            extra = int(want.sum())
            while extra > self.free_blocks and B > 1:
                B -= 1  # preempt the most recently admitted request
                self.free_blocks += int(R.blocks[B])
                self.waiting.appendleft(R.record(B))
                self.preemptions += 1
                preempted = True
                extra -= int(want[B])
                R.n = B
                sched, want = sched[:B], want[:B]
            budget -= int(sched.sum())
            self.free_blocks -= extra
            R.blocks[:B] += want
        else:
            sched = np.zeros(0, dtype=np.int64)
        if not preempted and self.waiting and budget > 0:
            new: list[int] = []
            while self.waiting and R.n < cfg.max_num_seqs and budget > 0:
                r = self.waiting[0]
                chunk = min(r.need, budget)
                blocks = (chunk + bs - 1) // bs
                if blocks > self.free_blocks:
                    break
                self.waiting.popleft()
                i = R.push(r)
                R.blocks[i] = blocks
                self.free_blocks -= blocks
                budget -= chunk
                new.append(chunk)
            if new:
                sched = np.concatenate([sched, np.asarray(new, dtype=np.int64)])
        B = R.n
        if B == 0:  # cannot happen once one max_model_len sequence fits the cache
            raise BackendError(f"simulator stalled at t={now:.3f}s: nothing schedulable with "
                               f"{self.free_blocks} free KV blocks")
        used = cfg.kv_blocks - self.free_blocks
        if used > self.peak_blocks:
            self.peak_blocks = used
        return self._execute(now, sched, B)

    def _execute(self, now: float, sched: npt.NDArray[np.int64], B: int) -> float:
        cfg = self.cfg
        R = self.running
        n = cfg.window
        prefilling = R.done[:B] < R.need[:B]
        decoding = ~prefilling & (sched > 0)
        dec = np.flatnonzero(decoding)
        pre = np.flatnonzero(prefilling & (sched > 0))
        nd = dec.size
        m = sched[dec] - 1 if n > 0 else np.zeros(nd, dtype=np.int64)
        chunks = sched[pre]
        pre_tokens = int(chunks.sum())
        kv_ctx = float(R.kv[dec].sum()) if nd else 0.0
        pairs = float((chunks * (R.done[pre] + chunks * 0.5)).sum()) if pre.size else 0.0
        draft = 0.0
        if cfg.drafter is not None and n > 0:
            finishing = int(np.count_nonzero(R.done[pre] + chunks >= R.need[pre]))
            draft = cfg.drafter.draft_time(n, nd + finishing, pre_tokens)
        z = None
        if n > 0 and nd:
            z = self.rand.normal(nd) * R.sd[dec]
            if cfg.adaptive:
                m = self._adaptive_budget(dec, m, z, pre_tokens, kv_ctx, pairs, draft)
        tokens = pre_tokens + nd + int(m.sum())
        dt = cfg.cost.target(tokens, kv_ctx, pairs) + draft
        end = now + dt
        self.batch_sum += nd
        self.step_time_sum += dt
        if nd:
            self._decode(dec, m, z, end)
        if pre.size:
            self._prefill(pre, chunks, end)
        finished = R.gen[:B] >= R.out[:B]
        if finished.any():
            self._complete(finished, end)
        return dt

    def _adaptive_budget(self, dec: npt.NDArray[np.int64], m_max: npt.NDArray[np.int64],
                         z: npt.NDArray[np.float64], pre_tokens: int, kv_ctx: float,
                         pairs: float, draft: float) -> npt.NDArray[np.int64]:
        """DSpark adaptive verification: per step, the verify budget (draft tokens per request)
        that maximises expected emitted tokens per step time, from the head's confidences."""
        R = self.running
        n = self.cfg.window
        nd = dec.size
        conf = 1.0 / (1.0 + np.exp(-(R.head[dec, :n] + z[:, None])))
        surv = np.cumprod(conf, axis=1)
        surv[np.arange(n)[None, :] >= m_max[:, None]] = -1.0
        flat = surv.ravel()
        order = np.argsort(-flat, kind="stable")
        valid = int(np.count_nonzero(flat >= 0.0))
        gains = np.concatenate([[0.0], np.cumsum(flat[order[:valid]])])
        base = pre_tokens + nd
        times = self.cfg.cost.target_many(base + np.arange(valid + 1, dtype=np.float64),
                                          kv_ctx, pairs) + draft
        best = int(np.argmax((nd + gains) / times))
        chosen = np.bincount(order[:best] // n, minlength=nd).astype(np.int64)
        self.budget_sum += int(chosen.sum())
        self.budget_steps += nd
        return chosen

    def _decode(self, dec: npt.NDArray[np.int64], m: npt.NDArray[np.int64],
                z: npt.NDArray[np.float64] | None, end: float) -> None:
        R = self.running
        n = self.cfg.window
        nd = dec.size
        if n > 0 and z is not None:
            eps = self.rand.logistic(nd * n).reshape(nd, n)
            ok = eps < R.true[dec, :n] + z[:, None]
            accepted = np.minimum(np.cumprod(ok, axis=1).sum(axis=1), m)
            drafted = m > 0
            meas = R.measured[dec] & drafted
            if meas.any():
                idx = m[meas] * (n + 1) + accepted[meas]
                self.hist += np.bincount(idx, minlength=self.hist.size)
        else:
            accepted = np.zeros(nd, dtype=np.int64)
        owe = R.out[dec] - R.gen[dec]
        emit = np.minimum(accepted + 1, owe)
        R.gen[dec] += emit
        if self.on_emit is not None:
            self.on_emit(R.seq[dec], emit, end)
        R.kv[dec] += accepted + 1
        meas = R.measured[dec]
        if meas.all():
            self.itl.extend(end - R.last_t[dec])
        elif meas.any():
            self.itl.extend(end - R.last_t[dec[meas]])
        R.last_t[dec] = end

    def _prefill(self, pre: npt.NDArray[np.int64], chunks: npt.NDArray[np.int64],
                 end: float) -> None:
        R = self.running
        R.done[pre] += chunks
        R.kv[pre] += chunks
        fin = pre[R.done[pre] >= R.need[pre]]
        if fin.size == 0:
            return
        R.gen[fin] += 1
        if self.on_emit is not None:
            self.on_emit(R.seq[fin], np.ones(fin.size, dtype=np.int64), end)
        again = fin[~np.isnan(R.first_t[fin])]  # recomputed after preemption: an ITL gap
        if again.size:
            meas = again[R.measured[again]]
            if meas.size:
                self.itl.extend(end - R.last_t[meas])
        first = fin[np.isnan(R.first_t[fin])]
        R.first_t[first] = end
        R.last_t[fin] = end

    def _complete(self, finished: npt.NDArray[np.bool_], end: float) -> None:
        R = self.running
        B = R.n
        rows = np.flatnonzero(finished)
        self.free_blocks += int(R.blocks[rows].sum())
        self.finished += rows.size
        meas = rows[R.measured[rows]]
        if meas.size:
            arrival = R.arrival[meas]
            self.results.add(R.first_t[meas] - arrival, end - arrival, R.out[meas], end)
        R.keep(~finished[:B])

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
            "out_of_order_arrivals": float(self.incoming.out_of_order),
            "itl_subsampled": float(self.itl.sampled),
        }
        if self.budget_steps:
            extra["mean_verify_budget"] = self.budget_sum / self.budget_steps
        return Measurement(
            ttft_s=res.ttft.array().astype(np.float64),
            tpot_s=res.tpot.array().astype(np.float64),
            e2e_s=res.e2e.array().astype(np.float64),
            output_tokens=res.out.array().astype(np.int64),
            ok=res.ok.array().astype(bool),
            itl_s=self.itl.array(),
            duration_s=max(duration, 0.0),
            wall_time_s=wall,
            acceptance=acceptance,
            errors=errors,
            extra=extra,
        )
