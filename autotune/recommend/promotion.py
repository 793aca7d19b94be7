"""Whether a result replaces the active recommendation, and exporting it when it does.

A result meeting the SLOs is promoted only when its gain over the active recommendation is
significant: a bootstrap over the two trials' requests (:mod:`autotune.recommend.significance`).
The active one is compared as re-measured in this run, on the same traffic, when it was; its
original trial otherwise. A promoted recommendation is written where ``vllm serve`` users pick
it up: ``<export dir>/<workload>.speculative-config.json`` (or ``.vllm-args.sh`` when it serves
without a drafter), atomically.
"""

from __future__ import annotations

import logging
from pathlib import Path

from autotune.errors import AutotuneError, SearchError
from autotune.export import export_stem, render, write_atomic
from autotune.objective import Outcome
from autotune.policy import Policy
from autotune.recommend.significance import (
    PromotionDecision,
    RequestRates,
    decide,
    request_rates,
)
from autotune.store import RecommendationRecord, Store

__all__ = ["export_file_name", "export_promoted", "should_promote", "trial_rates"]

log = logging.getLogger(__name__)


def should_promote(store: Store, policy: Policy, outcome: Outcome, trial_id: int | None,
                   active: RecommendationRecord | None, remeasured_id: int | None,
                   seed: int) -> PromotionDecision:
    """Promote only a result meeting the SLOs whose gain over ``active`` is significant."""
    return decide(objective=policy.objective.maximize, feasible=outcome.feasible,
                  constraints=outcome.constraints, new=trial_rates(store, policy, trial_id),
                  active_id=active.id if active else None,
                  active=(trial_rates(store, policy, remeasured_id or active.trial_id)
                          if active else None),
                  seed=seed)


def trial_rates(store: Store, policy: Policy, trial_id: int | None) -> RequestRates | None:
    """A stored trial's requests as the bootstrap sees them under ``policy``'s objective;
    None (a warning when they are malformed) when it kept none."""
    trial = store.trial(trial_id) if trial_id is not None else None
    if trial is None or not trial.per_request:
        return None
    try:
        return request_rates(trial.per_request, trial.metrics.get("duration_s"),
                             policy.objective.maximize, policy.objective.slo.slo())
    except SearchError as e:
        log.warning("trial %s: %s", trial_id, e)
        return None


def export_file_name(rec: RecommendationRecord) -> str:
    """``<workload>.speculative-config.json``, or ``<workload>.vllm-args.sh`` without a
    drafter, the workload label made a safe file name (:func:`autotune.export.export_stem`)."""
    safe = export_stem(rec.workload)
    return (f"{safe}.speculative-config.json" if rec.speculative_config else
            f"{safe}.vllm-args.sh")


def export_promoted(export_dir: Path, rec: RecommendationRecord) -> Path | None:
    """Write the export of a promoted recommendation; None (logged) when it cannot be."""
    fmt = "speculative-config" if rec.speculative_config else "vllm-args"
    try:
        return write_atomic(export_dir / export_file_name(rec), render(rec, fmt))
    except AutotuneError as e:
        log.warning("export of %s failed: %s", rec.workload, e)
        return None
