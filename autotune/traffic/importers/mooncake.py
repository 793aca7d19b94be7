"""Mooncake trace JSONL (kvcache-ai/Mooncake, FAST'25 release; Kimi production traffic).

One JSON object a line: ``timestamp`` (milliseconds from the trace start), ``input_length``,
``output_length`` and ``hash_ids`` (ids of the prompt's 512-token blocks; equal leading ids
mean a shareable prefix). ``hash_ids`` is kept in the sample line, with ``hash_block_tokens``,
as prefix information for prefix-caching-aware replay.
"""

from __future__ import annotations

from autotune.traffic.importers.base import Importer, LineParser, Row, describe, is_number

__all__ = ["BLOCK_TOKENS", "IMPORTER", "MooncakeParser"]

#: Tokens per prefix block of the Mooncake traces' ``hash_ids``.
BLOCK_TOKENS = 512


class MooncakeParser(LineParser):
    def parse(self, text: str, line: int) -> Row | None:
        obj = self.json_object(text, line)
        ts = obj.get("timestamp")
        if ts is None:
            raise self.fail(line, "timestamp", "required field is missing (milliseconds)")
        if not is_number(ts) or ts < 0:
            raise self.fail(line, "timestamp",
                            f"must be a number of milliseconds >= 0, got {describe(ts)}")
        extra = {}
        hash_ids = obj.get("hash_ids")
        if hash_ids is not None:
            if not isinstance(hash_ids, list) or not all(
                    isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in hash_ids):
                raise self.fail(line, "hash_ids",
                                f"must be a list of block ids (integers >= 0), got "
                                f"{describe(hash_ids)}")
            extra = {"hash_ids": hash_ids, "hash_block_tokens": BLOCK_TOKENS}
        return Row(
            line=line,
            time_s=float(ts) / 1000.0,
            prompt_tokens=self.count(obj.get("input_length"), line, "input_length"),
            output_tokens=self.count(obj.get("output_length"), line, "output_length",
                                     output=True),
            extra=extra,
        )


IMPORTER = Importer(
    name="mooncake",
    summary="Mooncake trace JSONL: timestamp (ms), input_length, output_length, hash_ids",
    parser=MooncakeParser,
)
