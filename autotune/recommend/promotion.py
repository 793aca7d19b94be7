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

__all__ = ["export_file_name", "export_promoted", "should_promote"]

log = logging.getLogger(__name__)


def should_promote(store: Store, policy: Policy, outcome: Outcome, trial_id: int | None,
                   active: RecommendationRecord | None, remeasured_id: int | None,
                   seed: int) -> PromotionDecision:
    """Promote only a result meeting the SLOs whose gain over ``active`` is significant."""
    objective = policy.objective.maximize
    slo = policy.objective.slo.slo()

    def rates(tid: int | None) -> RequestRates | None:
        trial = store.trial(tid) if tid is not None else None
        if trial is None or not trial.per_request:
            return None
        try:
            return request_rates(trial.per_request, trial.metrics.get("duration_s"), objective,
                                 slo)
        except SearchError as e:
            log.warning("trial %s: %s", tid, e)
            return None

    return decide(objective=objective, feasible=outcome.feasible,
                  constraints=outcome.constraints, new=rates(trial_id),
                  active_id=active.id if active else None,
                  active=rates(remeasured_id or active.trial_id) if active else None,
                  seed=seed)


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
