"""The backend conformance suite: what every replica backend must do (autotune/backends/base.py).

Use it by subclassing :class:`BackendConformance` in a test module next to this file and
providing a ``backend`` fixture (anything implementing ``autotune.backends.Backend``)::

    class TestMyBackendConformance(BackendConformance):
        window = 3

        @pytest.fixture
        def backend(self) -> Backend:
            return create_backend("mine", serve, {...}, seed=0)

A backend slow to start (a real server) can shrink the schedule through the class attributes
(``n_requests``, ``warmup``, ``output_lengths``, ``concurrency``), and share its started
replicas between checks by overriding the ``started`` and ``unspeculative`` fixtures at a wider
scope. Every check is a separate test, so a failure names the contract it breaks. The checks
use only the public protocol (start → replay → stop, describe) and the Measurement contract of
``autotune.types``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from autotune.backends import Backend, Replica
from autotune.errors import BackendError
from autotune.types import Measurement, ReplaySchedule, Request, TrialConfig

__all__ = ["BackendConformance", "StoppedReplica", "make_requests"]


def make_requests(count: int, output_lengths: tuple[int, ...], prompt_tokens: int = 24,
                  spacing_s: float | None = None, workload: str = "chat",
                  acceptance_len: int = 8) -> list[Request]:
    """``count`` small requests whose output lengths cycle through ``output_lengths``.

    Two in three carry confidence predictions of ``acceptance_len`` positions.
    """
    pred = tuple(round(0.9 - 0.07 * k, 2) for k in range(acceptance_len))
    out = []
    for i in range(count):
        out.append(Request(
            id=f"conf-{i}",
            prompt_tokens=prompt_tokens + (i % 5),
            output_tokens=output_lengths[i % len(output_lengths)],
            arrival_s=None if spacing_s is None else i * spacing_s,
            workload=workload,
            prompt="Write a short story about a lighthouse keeper." if i % 2 else None,
            acceptance=pred if i % 3 and pred else None,
        ))
    return out


@dataclass(frozen=True)
class StoppedReplica:
    """A replica of the config without speculation (window 0): its replay's measurement, then
    what it did once stopped: the error of a second stop and of a replay (None: none raised)."""

    measurement: Measurement
    second_stop: Exception | None
    replay_once_stopped: Exception | None


def _raised(call: Callable[[], object]) -> Exception | None:
    try:
        call()
    except Exception as e:  # the check that reads it says what was expected
        return e
    return None


class BackendConformance:
    """Checks every backend must pass; subclasses provide the ``backend`` fixture."""

    #: Draft window of the speculative configs (must be within the backend's block size).
    window: ClassVar[int] = 3
    n_requests: ClassVar[int] = 12
    warmup: ClassVar[int] = 2
    #: Warm-up requests get the first lengths; measured ones the rest (so exclusion shows).
    output_lengths: ClassVar[tuple[int, ...]] = (5, 9, 16, 23, 31)
    concurrency: ClassVar[int] = 4
    max_num_seqs: ClassVar[int] = 8
    max_num_batched_tokens: ClassVar[int] = 2048

    @pytest.fixture
    def backend(self) -> Backend:  # pragma: no cover - subclasses override
        raise NotImplementedError("subclass BackendConformance and provide a backend fixture")

    # -- helpers -----------------------------------------------------------------------------
    def config(self, window: int | None = None) -> TrialConfig:
        n = self.window if window is None else window
        return TrialConfig(n, False, self.max_num_seqs, self.max_num_batched_tokens)

    def requests(self) -> list[Request]:
        return make_requests(self.n_requests, self.output_lengths)

    def schedule(self, mode: str = "closed", seed: int = 0) -> ReplaySchedule:
        reqs = self.requests()
        if mode == "trace":
            reqs = make_requests(self.n_requests, self.output_lengths, spacing_s=0.05)
        return ReplaySchedule(requests=reqs, mode=mode,  # type: ignore[arg-type]
                              concurrency=self.concurrency, warmup_requests=self.warmup,
                              seed=seed)

    @pytest.fixture
    def started(self, backend: Backend) -> Iterator[Replica]:
        replica = backend.start(self.config())
        try:
            yield replica
        finally:
            replica.stop()

    def run_unspeculative(self, backend: Backend) -> StoppedReplica:
        """Start the config without speculation, replay it and stop it; then stop it again and
        ask it to replay (what the stop check and the no-speculation check read)."""
        replica = backend.start(self.config(window=0))
        try:
            m = replica.replay(self.schedule())
        finally:
            replica.stop()
        return StoppedReplica(m, _raised(replica.stop),
                              _raised(lambda: replica.replay(self.schedule())))

    @pytest.fixture
    def unspeculative(self, backend: Backend) -> StoppedReplica:
        """:meth:`run_unspeculative` on ``backend`` (a subclass whose start is dear may run it
        once for both checks that read it, at class scope)."""
        return self.run_unspeculative(backend)

    def measured_outputs(self) -> list[int]:
        return sorted(r.output_tokens for r in self.requests()[self.warmup:])

    # -- the protocol ------------------------------------------------------------------------
    def test_backend_satisfies_protocol(self, backend: Backend) -> None:
        assert isinstance(backend, Backend)
        assert isinstance(backend.kind, str) and backend.kind

    def test_describe_names_backend(self, backend: Backend) -> None:
        info = backend.describe()
        assert isinstance(info, dict)
        assert info.get("backend") == backend.kind

    def test_start_returns_replica_with_config(self, started: Replica) -> None:
        # ``started`` is what ``backend.start(self.config())`` returned (a subclass may share
        # one started replica between its replay checks: a real server's start is dear)
        assert isinstance(started, Replica)
        assert started.config == self.config()
        # what the start cost, and where that figure comes from (autotune.cost)
        assert np.isfinite(started.start_s) and started.start_s >= 0
        assert isinstance(started.start_source, str) and started.start_source

    def test_stop_is_idempotent_and_final(self, unspeculative: StoppedReplica) -> None:
        # a second stop is a no-op, not an error
        assert unspeculative.second_stop is None, repr(unspeculative.second_stop)
        # and a stopped replica replays no more
        error = unspeculative.replay_once_stopped
        assert isinstance(error, BackendError) and "stopped" in str(error), repr(error)

    # -- the measurement ---------------------------------------------------------------------
    def test_measurement_shape(self, started: Replica) -> None:
        m = started.replay(self.schedule())
        assert isinstance(m, Measurement)
        k = self.n_requests - self.warmup
        for name in ("ttft_s", "tpot_s", "e2e_s", "output_tokens", "ok"):
            arr = getattr(m, name)
            assert isinstance(arr, np.ndarray), name
            assert arr.shape == (k,), f"{name} has shape {arr.shape}, want ({k},)"
        assert m.requests == k
        assert m.ok.all(), m.errors
        assert m.duration_s > 0
        assert m.wall_time_s >= 0

    def test_warmup_is_excluded(self, started: Replica) -> None:
        m = started.replay(self.schedule())
        assert sorted(m.output_tokens.tolist()) == self.measured_outputs()

    def test_latencies_are_consistent(self, started: Replica) -> None:
        m = started.replay(self.schedule())
        assert np.all(np.isfinite(m.ttft_s)) and np.all(m.ttft_s > 0)
        assert np.all(m.e2e_s >= m.ttft_s)
        assert np.all(m.tpot_s >= 0)
        multi = m.output_tokens > 1
        expected = (m.e2e_s[multi] - m.ttft_s[multi]) / (m.output_tokens[multi] - 1)
        np.testing.assert_allclose(m.tpot_s[multi], expected, rtol=1e-6, atol=1e-9)
        assert m.itl_s.ndim == 1 and m.itl_s.size > 0
        assert np.all(np.isfinite(m.itl_s)) and np.all(m.itl_s >= 0)
        assert m.duration_s >= float(m.e2e_s.max()) - 1e-9

    def test_busy_time_spans_warmup_and_the_measured_window(self, started: Replica) -> None:
        """``busy_s`` counts the whole replay a real replica pays for: the warm-up requests
        before the measured window and the window itself."""
        sched = self.schedule("trace")
        m = started.replay(sched)
        assert np.isfinite(m.busy_s)
        assert m.busy_s >= m.duration_s - 1e-9
        # the warm-up requests arrive 0.05 s apart before the first measured one
        assert m.busy_s >= m.duration_s + 0.05 * self.warmup - 1e-6

    def test_trace_mode_honours_arrivals(self, started: Replica) -> None:
        sched = self.schedule("trace")
        m = started.replay(sched)
        assert m.requests == self.n_requests - self.warmup
        span = 0.05 * (self.n_requests - 1 - self.warmup)
        assert m.duration_s >= span

    def test_acceptance_counters(self, started: Replica) -> None:
        m = started.replay(self.schedule())
        acc = m.acceptance
        assert acc is not None
        n = self.window
        assert len(acc.accepted_per_pos) == n
        per_pos = list(acc.accepted_per_pos)
        assert all(a >= b for a, b in itertools.pairwise(per_pos)), per_pos
        assert acc.drafts > 0
        assert 0 <= acc.accepted == sum(per_pos)
        assert acc.accepted <= acc.draft_tokens <= acc.drafts * n
        assert per_pos[0] <= acc.drafts
        assert all(0.0 <= r <= 1.0 for r in acc.per_position)

    def test_no_speculation_has_no_acceptance(self, unspeculative: StoppedReplica) -> None:
        m = unspeculative.measurement
        assert m.requests == self.n_requests - self.warmup
        acc = m.acceptance
        if acc is not None:
            assert acc.drafts == acc.draft_tokens == acc.accepted == 0
            assert all(a == 0 for a in acc.accepted_per_pos)

    def test_progress_is_reported(self, started: Replica) -> None:
        calls: list[tuple[int, int | None]] = []
        started.replay(self.schedule(), lambda done, total: calls.append((done, total)))
        assert calls, "progress was never called"
        done, total = calls[-1]
        assert total in (None, self.n_requests)
        assert done == self.n_requests
        assert all(a[0] <= b[0] for a, b in itertools.pairwise(calls))

    def test_summary_is_json_ready(self, started: Replica) -> None:
        import json

        from autotune.types import Slo

        m = started.replay(self.schedule())
        s = m.summary(Slo(ttft_p99_ms=10_000, itl_p99_ms=10_000))
        json.dumps(s)
        assert s["requests"] == self.n_requests - self.warmup
        assert s["output_tokens_per_s"] > 0
