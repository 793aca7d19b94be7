"""Where a recommendation comes from: enough to reproduce and to trust it.

The run part (:func:`run_provenance`) is the same for every workload of a pass: backend and
what it describes (profile or hardware, vLLM version), model and drafter, the traffic sample
(path, sha256, size), the policy (name, sha256), the run and its seed. The workload part
(:func:`workload_provenance`) adds predicted against measured acceptance of the chosen config,
the number of trials, and the window-by-batch schedule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.acceptance import curve_from_predictions
from autotune.policy import Policy
from autotune.recommend.choose import Scored
from autotune.recommend.schedule import window_schedule
from autotune.types import Request

__all__ = ["run_provenance", "workload_provenance"]


def run_provenance(*, policy: Policy, backend: str, described: Mapping[str, Any],
                   sample: Mapping[str, Any], run_id: str, seed: int) -> dict[str, Any]:
    """The provenance every workload of a run shares; ``described`` is what the backend says
    of itself, ``sample`` the traffic sample (path, sha256, sample_id, size_bytes, requests).
    """
    return {
        "backend": backend,
        "backend_details": dict(described),
        "model": policy.serve.model,
        "draft_model": policy.serve.draft_model,
        "method": policy.serve.method,
        "vllm_version": described.get("vllm_version"),
        "hardware": described.get("hardware") or described.get("profile"),
        "traffic": dict(sample),
        "policy": {"name": policy.name, "sha256": policy.sha256()},
        "run": run_id,
        "seed": seed,
    }


def workload_provenance(base: Mapping[str, Any], *, policy: Policy,
                        requests: Sequence[Request], best: Scored,
                        trials: Sequence[Scored]) -> dict[str, Any]:
    """The run's provenance plus what this workload's recommendation rests on."""
    assert best.outcome is not None
    config = best.config
    curve = curve_from_predictions(requests, policy.serve.draft_block_size)
    provenance = dict(base)
    provenance["acceptance"] = {
        "predicted_per_position": (list(curve.survival[: config.num_speculative_tokens])
                                   if curve else None),
        "measured_per_position": best.outcome.summary.get("per_position_acceptance"),
        "predicted_tokens_per_step": (curve.expected_tokens(config.num_speculative_tokens)
                                      if curve else None),
        "measured_tokens_per_step": best.outcome.summary.get("mean_accepted_length"),
    }
    provenance["profile"] = (base.get("backend_details") or {}).get("profile")
    provenance["trials"] = len(trials)
    provenance["feasible"] = best.outcome.feasible
    rows, by_level, thin = window_schedule(
        ((t.config.max_num_seqs, t.config.num_speculative_tokens, t.outcome.value,
          t.outcome.feasible) for t in trials if t.outcome is not None), config.max_num_seqs,
        config.num_speculative_tokens)
    provenance["window_schedule"] = rows
    provenance["window_by_max_num_seqs"] = {str(k): v for k, v in by_level.items()}
    provenance["window_levels_left_out"] = {str(k): v for k, v in thin.items()}
    return provenance
