"""Synthetic prompts for requests that carry only ``prompt_tokens`` (no text).

The prompt is sent as token ids so its length is exact: a neutral English passage is tokenized
once by the server's own ``/tokenize`` and its ids are repeated, from a per-request offset, to the
wanted length. When ``/tokenize`` is not available the passage's words are sent as text (about
one token per word). Acceptance measured on such text says little about production traffic.
"""

from __future__ import annotations

import hashlib
import warnings

from autotune.types import Request

__all__ = ["BASE_TEXT", "SyntheticPromptWarning", "SyntheticPrompts", "warn_synthetic"]

#: A plain passage; what a speculative drafter makes of it is not representative of real traffic.
BASE_TEXT = (
    "The river runs through the old town and past the market, where traders set out bread, "
    "fruit and fish before the sun comes up. In the afternoon the square fills with children "
    "coming home from school, and the bakers start again for the evening. Travellers who stay "
    "for a week learn the names of the streets, the times of the ferries and the best place to "
    "watch the boats come in. When the weather turns, the cafes move their tables inside and "
    "the town grows quiet, until spring brings the first visitors back along the coast road."
)


class SyntheticPromptWarning(UserWarning):
    """Some requests were replayed with synthetic prompts (acceptance not representative)."""


def warn_synthetic(count: int, total: int | None) -> None:
    of = f" of {total}" if total is not None else ""
    warnings.warn(
        f"{count}{of} requests have no prompt text, only prompt_tokens; they were sent with "
        "synthetic prompts of that length. Latency is measured faithfully, but speculative "
        "acceptance on synthetic text is not representative of production traffic: include "
        "`prompt` in the traffic sample to measure it.",
        SyntheticPromptWarning, stacklevel=3)


class SyntheticPrompts:
    """Makes the prompt of a request without text: token ids (exact length) or plain text."""

    def __init__(self, base_ids: list[int] | None, seed: int) -> None:
        self._ids = [i for i in (base_ids or []) if i >= 0]
        self._words = BASE_TEXT.split()
        self._seed = seed

    @property
    def exact(self) -> bool:
        """True when prompts are token ids of exactly ``prompt_tokens`` length."""
        return bool(self._ids)

    def _offset(self, request: Request, modulo: int) -> int:
        digest = hashlib.sha256(f"{self._seed}:{request.id}".encode()).digest()
        return int.from_bytes(digest[:8], "little") % modulo

    def prompt(self, request: Request) -> list[int] | str:
        n = max(1, request.prompt_tokens)
        if self._ids:
            start = self._offset(request, len(self._ids))
            return [self._ids[(start + k) % len(self._ids)] for k in range(n)]
        start = self._offset(request, len(self._words))
        return " ".join(self._words[(start + k) % len(self._words)] for k in range(n))
