"""The JSONL that ``vllm bench serve --dataset-name custom`` reads, in both directions.

One object a line: ``prompt`` (text, required) and ``output_tokens`` (optional for vLLM, which
then uses ``--custom-output-len``; required here, since a sample needs output lengths). No
arrival times: replay is closed-loop. ``autotune traffic export --format vllm-bench`` writes
this format back from a sample (:func:`bench_record`).
"""

from __future__ import annotations

from typing import Any

from autotune.errors import TrafficError
from autotune.traffic.importers.base import Importer, LineParser, Row, describe
from autotune.types import Request

__all__ = ["IMPORTER", "VllmBenchParser", "bench_record"]


class VllmBenchParser(LineParser):
    def parse(self, text: str, line: int) -> Row | None:
        obj = self.json_object(text, line)
        prompt = obj.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise self.fail(line, "prompt", f"must be a non-empty string, got {describe(prompt)}")
        if obj.get("output_tokens") is None:
            raise self.fail(line, "output_tokens",
                            "missing; a traffic sample needs each request's output length "
                            "(vLLM's --custom-output-len has no per-request equivalent here)")
        return Row(line=line, prompt=prompt,
                   output_tokens=self.count(obj["output_tokens"], line, "output_tokens",
                                             output=True))


def bench_record(request: Request, path: str) -> dict[str, Any]:
    """The vLLM custom-dataset line of one sample request (which must have prompt text)."""
    if not request.prompt:
        raise TrafficError.at(path, request.line, "prompt",
                              "has no prompt text, which vllm bench needs; attach real texts "
                              "with --prompts FILE (by nearest length)")
    return {"prompt": request.prompt, "output_tokens": request.output_tokens}


IMPORTER = Importer(
    name="vllm-bench",
    summary="vllm bench serve custom dataset JSONL: prompt, output_tokens (no times)",
    parser=VllmBenchParser,
    has_times=False,
)
