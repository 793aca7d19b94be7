"""A byte-level BPE tokenizer trained on a few KB of real prompt text, so that models built
locally (the benchmark's spec pairs, the tests' tiny Llamas) load offline in vLLM and
transformers with no model hub.

The corpus is MT-Bench questions from the shared data (``prompts/mt_bench_question.jsonl``);
the tokenizer is trained with the ``tokenizers`` library and saved in transformers' format.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["read_corpus", "train_tokenizer"]

_SPECIAL = ["<unk>", "<s>", "</s>"]


def read_corpus(data_dir: Path, max_chars: int = 8000) -> str:
    """A few KB of English prompt text: MT-Bench questions, one turn per line."""
    lines: list[str] = []
    size = 0
    with (data_dir / "prompts" / "mt_bench_question.jsonl").open(encoding="utf-8") as fh:
        for raw in fh:
            for turn in json.loads(raw)["turns"]:
                lines.append(turn)
                size += len(turn) + 1
            if size >= max_chars:
                break
    return "\n".join(lines)


def train_tokenizer(corpus: str, out_dir: Path, vocab_size: int = 512) -> Path:
    """Train a byte-level BPE tokenizer on ``corpus`` and save it in transformers' format."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=_SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus.splitlines(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out_dir))
    return out_dir
