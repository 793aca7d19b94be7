"""Real prompt texts for token-only traces, attached by nearest length (``--prompts FILE``).

A prompt file is JSON Lines; from each line the text is taken from the first of these that is
present: ``prompt`` (HumanEval, vllm-bench), ``problem`` (MATH-500, AIME), ``question``
(GSM8K), ``turns[0]`` (Spec-Bench, MT-Bench: the first, self-contained user turn),
``conversations`` (ShareGPT: the first human turn), ``messages`` (the first user message),
``text``. Lengths are estimated as characters / 4 (:func:`autotune.traffic.estimate_tokens`).

A request of ``prompt_tokens`` T gets a text whose estimated length is within 10 % of T
(a seeded pick among those). When no text is that close, it gets the nearest one, and with
``fit`` on (the default) that text is brought to about T tokens: cut when longer; when shorter
(T beyond the longest text), further texts (seeded picks) are appended, separated by blank
lines, and the result cut. A real-text stand-in of the right length, so a replay's prefill
matches the trace. The request keeps the trace's ``prompt_tokens`` either way.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autotune.errors import TrafficError
from autotune.traffic.lines import iter_lines, json_value
from autotune.traffic.sample import estimate_tokens

__all__ = ["PromptPool", "load_prompt_pool", "prompt_text"]

_TOLERANCE = 0.10
_CHARS_PER_TOKEN = 4


def prompt_text(obj: Any) -> str | None:
    """The prompt text of one line of a prompt set, or None when it has none."""
    if not isinstance(obj, dict):
        return None
    for key in ("prompt", "problem", "question"):
        if isinstance(obj.get(key), str) and obj[key].strip():
            return str(obj[key])
    turns = obj.get("turns")
    if isinstance(turns, list) and turns and isinstance(turns[0], str) and turns[0].strip():
        return turns[0]
    for key, who, said in (("conversations", "from", "value"), ("messages", "role", "content")):
        msgs = obj.get(key)
        if isinstance(msgs, list):
            for m in msgs:
                if (isinstance(m, dict) and m.get(who) in ("human", "user")
                        and isinstance(m.get(said), str) and m[said].strip()):
                    return str(m[said])
    if isinstance(obj.get("text"), str) and obj["text"].strip():
        return str(obj["text"])
    return None


@dataclass(frozen=True)
class PromptPool:
    """Prompt texts sorted by estimated token length (immutable; share it freely)."""

    texts: tuple[str, ...]
    lengths: tuple[int, ...]
    sources: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.texts)

    def pick(self, tokens: int, rng: np.random.Generator, *, fit: bool = True) -> str:
        """A real text of about ``tokens`` estimated tokens (see the module docstring)."""
        lo = bisect.bisect_left(self.lengths, tokens * (1 - _TOLERANCE))
        hi = bisect.bisect_right(self.lengths, tokens * (1 + _TOLERANCE))
        if hi > lo:
            return self.texts[lo + int(rng.integers(hi - lo))]
        i = bisect.bisect_left(self.lengths, tokens)
        near = [j for j in (i - 1, i) if 0 <= j < len(self.lengths)]
        best = min(near, key=lambda j: (abs(self.lengths[j] - tokens), j))
        text = self.texts[best]
        if not fit:
            return text
        want = tokens * _CHARS_PER_TOKEN
        parts, size = [text], len(text)
        while size < want:
            extra = self.texts[int(rng.integers(len(self.texts)))]
            parts.append(extra)
            size += len(extra) + 2
        return "\n\n".join(parts)[:want]


def load_prompt_pool(paths: Iterable[str | Path]) -> PromptPool:
    """Read prompt sets (JSONL) into one pool; errors name ``file:line``."""
    items: list[tuple[int, str, str]] = []
    for p in paths:
        path = Path(p)
        found = 0
        for raw in iter_lines(path, what="a JSONL prompt set, e.g. "
                                          "../shared/data/prompts/gsm8k_test.jsonl"):
            if raw.blank:
                continue
            text = raw.text()
            try:
                obj = json_value(text)
            except ValueError as e:
                raise raw.fail(f"not a JSON line of a prompt set: {e}") from None
            prompt = prompt_text(obj)
            if prompt is None:
                continue
            found += 1
            items.append((estimate_tokens(prompt), prompt, f"{path.name}:{raw.number}"))
        if not found:
            raise TrafficError.at(str(path), None, None,
                                  "holds no prompt texts (looked for prompt, problem, question, "
                                  "turns, conversations, messages, text)")
    if not items:
        raise TrafficError("no prompt files given; pass --prompts FILE")
    items.sort(key=lambda it: (it[0], it[2]))
    return PromptPool(texts=tuple(t for _, t, _ in items),
                      lengths=tuple(n for n, _, _ in items),
                      sources=tuple(s for _, _, s in items))


