"""The sim backend against the backend conformance suite."""

from __future__ import annotations

import pytest
from conformance import BackendConformance

from autotune.backends import Backend, create_backend
from autotune.types import ServeSpec

SERVE = ServeSpec(model="moonshotai/Kimi-K2.6", draft_model="novita/kimi-k2.6-dspark",
                  method="dspark", draft_block_size=8)


class TestSimConformance(BackendConformance):
    window = 3

    @pytest.fixture
    def backend(self) -> Backend:
        return create_backend("sim", SERVE, {"drafter": "dspark"}, seed=11)


class TestSimEagleConformance(BackendConformance):
    window = 5
    n_requests = 20
    warmup = 4

    @pytest.fixture
    def backend(self) -> Backend:
        return create_backend("sim", SERVE, {"profile": "kimi-k2.7-code@8xH200-tp8",
                                             "drafter": "eagle3-mla"}, seed=3)
