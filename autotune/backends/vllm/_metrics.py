"""Speculative-decoding acceptance from vLLM's Prometheus ``/metrics``.

vLLM exposes the counters ``vllm:spec_decode_num_drafts``, ``…num_draft_tokens``,
``…num_accepted_tokens`` and ``…num_accepted_tokens_per_pos{position}`` (each as ``*_total``,
labelled by ``model_name`` and ``engine``). A scrape before and one after a replay give their
deltas; the counters are summed over engines and models.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from autotune.errors import DependencyError
from autotune.types import AcceptanceCounts

__all__ = ["SpecCounters", "acceptance_delta", "parse_spec_counters"]

_log = logging.getLogger(__name__)

_PREFIX = "vllm:spec_decode_"
_SCALARS = {
    "num_drafts": "drafts",
    "num_draft_tokens": "draft_tokens",
    "num_accepted_tokens": "accepted",
}
_PER_POS = "num_accepted_tokens_per_pos"


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """The speculative-decoding counters of one scrape (``present``: any of them was there)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: dict[int, float] = field(default_factory=dict)
    present: bool = False


def _stem(sample_name: str) -> str | None:
    """``vllm:spec_decode_num_drafts_total`` -> ``num_drafts``; None for other samples."""
    if not sample_name.startswith(_PREFIX):
        return None
    stem = sample_name[len(_PREFIX):]
    if stem.endswith("_created"):
        return None
    return stem.removesuffix("_total")


def parse_spec_counters(text: str) -> SpecCounters:
    """Sum the speculative-decoding counters of a Prometheus text exposition."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError as e:
        raise DependencyError.missing("prometheus_client", "vllm",
                                      "Reading vLLM's /metrics") from e
    totals = dict.fromkeys(_SCALARS.values(), 0.0)
    per_pos: dict[int, float] = {}
    present = False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            stem = _stem(sample.name)
            if stem is None:
                continue
            if stem in _SCALARS:
                totals[_SCALARS[stem]] += float(sample.value)
                present = True
            elif stem == _PER_POS and "position" in sample.labels:
                pos = int(sample.labels["position"])
                per_pos[pos] = per_pos.get(pos, 0.0) + float(sample.value)
                present = True
    return SpecCounters(drafts=totals["drafts"], draft_tokens=totals["draft_tokens"],
                        accepted=totals["accepted"], per_pos=per_pos, present=present)


def acceptance_delta(before: SpecCounters | None, after: SpecCounters | None
                     ) -> AcceptanceCounts | None:
    """Counts between two scrapes; None when the server has no speculative decoding or a
    counter went backwards (the server restarted in between)."""
    if before is None or after is None or not after.present:
        return None
    drafts = after.drafts - before.drafts
    draft_tokens = after.draft_tokens - before.draft_tokens
    accepted = after.accepted - before.accepted
    positions = range(max(after.per_pos, default=-1) + 1)
    per_pos = [after.per_pos.get(k, 0.0) - before.per_pos.get(k, 0.0) for k in positions]
    if min([drafts, draft_tokens, accepted, *per_pos]) < 0:
        _log.warning("vLLM speculative-decoding counters went backwards between the scrapes "
                     "before and after the replay (server restarted?); acceptance not measured")
        return None
    return AcceptanceCounts(drafts=round(drafts), draft_tokens=round(draft_tokens),
                            accepted=round(accepted),
                            accepted_per_pos=tuple(round(v) for v in per_pos))
