"""A workload's recommendation from its finished search, stored and (when promoted) exported.

:func:`recommend_workload` chooses the best trial (:mod:`autotune.recommend.choose`),
records its provenance (:mod:`autotune.recommend.provenance`) and its lead over the runner-up
(:mod:`autotune.recommend.runner_up`), decides whether it replaces the
active recommendation (:mod:`autotune.recommend.promotion`), adds it to the store as active or
candidate, and exports it when promoted. The result says what happened and why.

A run recommends once per workload: a resumed run whose workload was recommended before it
stopped keeps that recommendation (the store returns it instead of adding a second) and
exports it again if it is active (the stop may have come between the two).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.objective import Outcome
from autotune.policy import Policy
from autotune.recommend.choose import Scored, combine_readings, select_best
from autotune.recommend.feasibility import Feasibility, judge_feasibility, slo_probability
from autotune.recommend.outputs import check_outputs, not_checked, unchecked_reason
from autotune.recommend.promotion import export_promoted, should_promote, trial_rates
from autotune.recommend.provenance import workload_provenance
from autotune.recommend.runner_up import Race, runner_up_race
from autotune.recommend.significance import Comparison, compare_rates
from autotune.store import RecommendationRecord, Store
from autotune.types import Request, Slo, TrialConfig

__all__ = ["WorkloadResult", "WorkloadTrials", "recommend_workload"]


@dataclass(frozen=True)
class WorkloadTrials:
    """One workload's finished search, as the recommendation step takes it."""

    workload: str
    requests: Sequence[Request]
    trials: Sequence[Scored]
    incumbent: TrialConfig | None = None  # the active config when the run started
    stop_reason: str = ""

    @property
    def failed(self) -> int:
        return sum(t.outcome is None for t in self.trials)

    @property
    def baseline(self) -> Scored | None:
        return next((t for t in self.trials if t.is_baseline), None)


@dataclass(frozen=True)
class WorkloadResult:
    """What a pass concluded for one workload.

    ``status`` is the recommendation's (active, candidate, infeasible), or ``failed`` when
    every trial failed; ``feasibility`` says whether the best config serves the workload's
    traffic within the SLO and, when not, why and what would make it feasible.
    """

    workload: str
    trials: int
    failed: int
    recommendation: RecommendationRecord | None
    best: Outcome | None
    baseline: Outcome | None
    export_path: Path | None
    promoted: bool
    reason: str
    stop_reason: str = ""
    feasibility: Feasibility | None = None
    race: Race | None = None  # against the runner-up: is the lead inside the replay noise?
    outputs: Mapping[str, Any] | None = None  # the recommended config's output check
    flagged: tuple[str, ...] = ()  # every flagged trial: "#number config: reason"

    @property
    def outputs_flagged(self) -> bool:
        """The recommended config's outputs differ beyond the engine's numerics."""
        return bool(self.outputs and self.outputs.get("flagged"))

    @property
    def status(self) -> str:
        return self.recommendation.status if self.recommendation else "failed"


def _baseline_outcome(done: WorkloadTrials, target: float, slo: Slo | None) -> Outcome | None:
    """The baseline as every reading of its config stands (:func:`combine_readings`, the rule
    the best config is chosen and valued by): a baseline read again is compared by the mean
    of its readings, and meets the SLO only if every reading did."""
    first = done.baseline
    if first is None:
        return None
    both = combine_readings([t for t in done.trials if t.config == first.config], slo, target)
    return both.outcome if both is not None else None


def recommend_workload(store: Store, policy: Policy, run_id: str, done: WorkloadTrials,
                       provenance: Mapping[str, Any], *, backend: str, export_dir: Path,
                       seed: int, decodes_tokens: bool = False) -> WorkloadResult:
    """Store (and export when promoted) the recommendation of one workload's search;
    ``decodes_tokens``: the backend's replicas return tokens (their outputs are checked)."""
    slo = policy.objective.slo.slo()
    target = policy.replay.time_scale
    best = select_best(done.trials, target, slo)
    base_outcome = _baseline_outcome(done, target, slo)
    if best is None or best.outcome is None:
        return WorkloadResult(done.workload, len(done.trials), done.failed, None, None,
                              base_outcome, None, False,
                              f"every trial failed; see `autotune trials --run {run_id}`",
                              done.stop_reason)
    feasibility = judge_feasibility(policy, best)
    checks = _record_output_checks(store, policy, done, backend, decodes_tokens)
    outputs = _config_check(checks, done, best)
    flagged = bool(outputs.get("flagged"))
    flagged_trials = tuple(f"#{t.number} {t.config.short()}: {checks[t.number]['reason']}"
                           for t in done.trials if checks.get(t.number, {}).get("flagged"))
    active = store.active_recommendation(done.workload)
    # The active config re-measured in this run, on this traffic, is what the best trial must
    # beat significantly (a measurement on older traffic is not comparable).
    remeasured = next((t for t in done.trials if done.incumbent is not None
                       and t.config == done.incumbent and t.outcome is not None), None)
    decision = should_promote(store, policy, best.outcome, best.trial_id, active,
                              remeasured.trial_id if remeasured else None, seed)
    details = workload_provenance(provenance, policy=policy, requests=done.requests,
                                  best=best, trials=done.trials)
    readings = [t.outcome for t in done.trials
                if t.config == best.config and t.outcome is not None]
    details["feasibility"] = feasibility.as_dict()
    details["slo_probability"] = slo_probability(readings, slo, target)
    details["readings"] = len(readings)
    details["stop_reason"] = done.stop_reason
    race = _race(store, policy, done, best, seed)
    details["runner_up"] = race.as_dict() if race else None
    details["outputs"] = outputs
    details["baseline"] = {
        "config": policy.baseline.config().as_dict(),
        "value": base_outcome.value if base_outcome else None,
        "meets_slo": bool(base_outcome and base_outcome.feasible)}
    # A speedup is a ratio to a baseline that serves the traffic within the SLO, or nothing.
    baseline_value = base_outcome.value if base_outcome and base_outcome.feasible else None
    rec = store.add_recommendation(
        workload=done.workload, config=best.config,
        speculative_config=policy.serve.spec().speculative_config(best.config),
        serve=policy.serve.model_dump(mode="json"), objective=policy.objective.maximize,
        value=best.outcome.value, baseline_value=baseline_value,
        run_id=run_id, trial_id=best.trial_id, backend=backend, provenance=details,
        value_ci=decision.value_ci,
        promote=decision.promote and feasibility.feasible and not flagged,
        reason=(feasibility.reason if not feasibility.feasible else
                f"not promoted: {outputs['reason']}" if flagged else decision.reason),
        gain=decision.gain, gain_ci=decision.gain_ci, compared_with=decision.compared_with,
        check_active=True, infeasible=not feasibility.feasible, once_per_run=True)
    promoted = rec.status == "active"
    export_path = export_promoted(export_dir, rec) if promoted else None
    return WorkloadResult(done.workload, len(done.trials), done.failed, rec, best.outcome,
                          base_outcome, export_path, promoted, rec.reason, done.stop_reason,
                          feasibility, race, outputs, flagged_trials)


def _record_output_checks(store: Store, policy: Policy, done: WorkloadTrials, backend: str,
                          decodes_tokens: bool) -> dict[int, dict[str, Any]]:
    """Every trial's output check (:mod:`autotune.recommend.outputs`), keyed by trial number;
    a check made here is stored with its trial (``metrics["output_check"]``). A trial with no
    greedy outputs was stored "not checked" when it finished, so a pass resumed here leaves
    its trials as they were."""
    results = check_outputs(done.trials, policy.outputs.tie_margin)
    why = unchecked_reason(backend, decodes_tokens, policy.outputs.prompts)
    out: dict[int, dict[str, Any]] = {}
    for t in done.trials:
        if t.outcome is None:
            continue
        result = results.get(t.number)
        out[t.number] = result.as_dict() if result is not None else not_checked(why)
        if result is not None and t.trial_id is not None:
            store.update_trial_metrics(t.trial_id, {"output_check": out[t.number]})
    return out


def _config_check(checks: Mapping[int, dict[str, Any]], done: WorkloadTrials,
                  best: Scored) -> dict[str, Any]:
    """The check that stands for the recommended config: a flagged reading if any (a config
    read twice is flagged when either reading is), else its latest reading's."""
    readings = [checks[t.number] for t in done.trials
                if t.config == best.config and t.number in checks]
    flagged = [c for c in readings if c.get("flagged")]
    if flagged:
        return flagged[0]
    return readings[-1] if readings else not_checked("no reading of the config completed")


def _race(store: Store, policy: Policy, done: WorkloadTrials, best: Scored,
          seed: int) -> Race | None:
    """The recommendation against its runner-up (:mod:`autotune.recommend.runner_up`)."""
    def compare(a: int, b: int) -> Comparison | None:
        new, old = trial_rates(store, policy, a), trial_rates(store, policy, b)
        return compare_rates(new, old, seed=seed) if new and old else None

    return runner_up_race(done.trials, best, policy.objective.slo.slo(),
                          policy.replay.time_scale, compare)
