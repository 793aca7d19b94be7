"""What the Store returns: frozen, typed records of runs, trials, recommendations, calibrations
and traffic samples.

A record is read in one transaction and never changes afterwards; callers use its attributes,
never a row's column names. Each has one JSON form (``to_json()``), which is what the CLI's
``--format json`` prints: the field names below are that contract (docs/storage.md). Free-form
JSON the database keeps as it was written (a trial's metric summary, a recommendation's
provenance, the serve section of its policy) stays a read-only mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from autotune.types import TrialConfig

__all__ = [
    "CalibrationRecord",
    "PlanRecord",
    "RecommendationRecord",
    "RunRecord",
    "SampleRecord",
    "TrialRecord",
    "WorkloadStatus",
    "iso",
]


def iso(t: datetime | None) -> str | None:
    """``2026-11-29T15:42:07+00:00`` (times are stored in UTC; SQLite drops the zone)."""
    if t is None:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.isoformat(timespec="seconds")


def _pair(pair: tuple[float, float] | None) -> list[float] | None:
    return list(pair) if pair is not None else None


@dataclass(frozen=True)
class SampleRecord:
    """A traffic sample as recorded once per content hash, with its workloads' summaries."""

    id: int
    path: str
    sha256: str
    size_bytes: int
    requests: int
    workloads: Mapping[str, Mapping[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "path": self.path, "sha256": self.sha256,
                "size_bytes": self.size_bytes, "requests": self.requests,
                "workloads": {k: dict(v) for k, v in self.workloads.items()}}


@dataclass(frozen=True)
class RunRecord:
    """One tuning pass: its status, inputs (backend, policy, sample, seed) and times."""

    id: str
    status: str  # running | finished | failed | interrupted
    backend: str
    policy_name: str
    policy_sha256: str
    sample_id: int
    sample_path: str
    sample_sha256: str
    sample_requests: int
    seed: int
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    #: the run's options JSON: ``cost`` (what the pass cost on real replicas, per workload and
    #: in total, :mod:`autotune.cost`) and ``budget_stop`` (why the budget ended it) among them
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def cost(self) -> Mapping[str, Any] | None:
        """The pass's cost as recorded when it ended (None: not recorded)."""
        cost = self.options.get("cost")
        return cost if isinstance(cost, Mapping) else None

    @property
    def budget_stop(self) -> str | None:
        """Why the budget ended the pass (None: it did not)."""
        why = self.options.get("budget_stop")
        return str(why) if why else None

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.id,
            "status": self.status,
            "backend": self.backend,
            "policy": {"name": self.policy_name, "sha256": self.policy_sha256},
            "traffic": {"path": self.sample_path, "sha256": self.sample_sha256,
                        "requests": self.sample_requests, "sample_id": self.sample_id},
            "seed": self.seed,
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "error": self.error,
            "cost": dict(self.cost) if self.cost is not None else None,
            "budget_stop": self.budget_stop,
        }


@dataclass(frozen=True)
class TrialRecord:
    """One trial of a run: the config it ran, its state, what it measured or why it failed.

    ``metrics`` is the measurement's summary (plus ``constraints`` and, for the re-measured
    active config, ``role``); ``per_request`` the per-request columns kept for the bootstrap,
    present only when asked for.
    """

    id: int
    run: str
    workload: str
    number: int
    state: str  # complete | failed | pruned | running
    baseline: bool
    params: Mapping[str, Any]
    replica: str | None
    node: str | None
    value: float | None
    feasible: bool | None
    metrics: Mapping[str, Any]
    acceptance_rate: float | None
    error: str | None
    attempts: int
    per_request: Mapping[str, Any] | None = None

    @property
    def config(self) -> TrialConfig:
        return TrialConfig.from_dict(self.params)

    def to_json(self) -> dict[str, Any]:
        out = {
            "run": self.run,
            "workload": self.workload,
            "number": self.number,
            "state": self.state,
            "baseline": self.baseline,
            "params": dict(self.params),
            "replica": self.replica,
            "node": self.node,
            "value": self.value,
            "feasible": self.feasible,
            "metrics": dict(self.metrics),
            "acceptance_rate": self.acceptance_rate,
            "error": self.error,
            "attempts": self.attempts,
            "id": self.id,
        }
        if self.per_request is not None:
            out["per_request"] = dict(self.per_request)
        return out


@dataclass(frozen=True)
class RecommendationRecord:
    """A recommendation: the config, what it measured, the decision and its provenance.

    ``status`` is candidate, active or retired (docs/storage.md, the lifecycle); ``gain`` is
    the relative improvement over recommendation ``compared_with`` with its interval.
    ``config`` is the knobs as stored; :attr:`trial_config` reads them as a TrialConfig.
    """

    id: int
    workload: str
    status: str
    config: Mapping[str, Any]
    speculative_config: Mapping[str, Any] | None
    serve: Mapping[str, Any]
    objective: str
    value: float
    value_ci: tuple[float, float] | None
    baseline_value: float | None
    speedup_vs_baseline: float | None
    gain: float | None
    gain_ci: tuple[float, float] | None
    compared_with: int | None
    run: str
    trial_id: int | None
    backend: str
    provenance: Mapping[str, Any]
    reason: str
    created_at: datetime | None
    promoted_at: datetime | None
    retired_at: datetime | None
    retired_by: int | None

    @property
    def trial_config(self) -> TrialConfig:
        """The recommended knobs (raises KeyError for a row stored without them)."""
        return TrialConfig.from_dict(self.config)

    @property
    def model(self) -> str | None:
        return self.provenance.get("model") or self.serve.get("model")

    @property
    def draft_model(self) -> str | None:
        return self.provenance.get("draft_model", self.serve.get("draft_model"))

    def to_json(self) -> dict[str, Any]:
        p = self.provenance
        return {
            "id": self.id,
            "workload": self.workload,
            "status": self.status,
            "config": dict(self.config),
            "speculative_config": (dict(self.speculative_config)
                                   if self.speculative_config is not None else None),
            "serve": dict(self.serve),
            "objective": self.objective,
            "value": self.value,
            "value_ci": _pair(self.value_ci),
            "baseline_value": self.baseline_value,
            "speedup_vs_baseline": self.speedup_vs_baseline,
            "gain": self.gain,
            "gain_ci": _pair(self.gain_ci),
            "compared_with": self.compared_with,
            "run": self.run,
            "trial_id": self.trial_id,
            "backend": self.backend,
            "model": self.model,
            "draft_model": self.draft_model,
            "vllm_version": p.get("vllm_version"),
            "hardware": p.get("hardware"),
            "profile": p.get("profile"),
            "traffic": p.get("traffic"),
            "policy": p.get("policy"),
            "acceptance": p.get("acceptance"),
            "provenance": dict(p),
            "reason": self.reason,
            "created_at": iso(self.created_at),
            "promoted_at": iso(self.promoted_at),
            "retired_at": iso(self.retired_at),
            "retired_by": self.retired_by,
        }


@dataclass(frozen=True)
class WorkloadStatus:
    """A workload's newest result: its active recommendation, else the newest recommendation
    stored for it (infeasible, candidate, retired), else ``failed``: the newest run that tuned
    it recommended nothing (every trial failed, or the run failed; ``reason`` says which).

    ``recommendation`` is None only for ``failed``; ``at`` is when the result was made (the
    recommendation's creation, or the run's end).
    """

    workload: str
    status: str  # active | candidate | infeasible | retired | failed
    reason: str
    run: str
    at: datetime | None
    recommendation: RecommendationRecord | None = None

    def to_json(self) -> dict[str, Any]:
        """The recommendation's JSON form; for ``failed``, the same keys that say what
        happened (workload, status, reason, run, created_at) and ``id`` null."""
        if self.recommendation is not None:
            return self.recommendation.to_json()
        return {"id": None, "workload": self.workload, "status": self.status,
                "reason": self.reason, "run": self.run, "created_at": iso(self.at)}


@dataclass(frozen=True)
class CalibrationRecord:
    """A confidence-head calibration a guided search fitted, with its errors."""

    workload: str
    run: str | None
    method: str
    params: Mapping[str, Any]
    ece_before: float | None
    ece_after: float | None
    created_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload, "run": self.run, "method": self.method,
                "params": dict(self.params), "ece_before": self.ece_before,
                "ece_after": self.ece_after, "created_at": iso(self.created_at)}


@dataclass(frozen=True)
class PlanRecord:
    """A run's stored plan: the inputs it reads besides the trials (``inputs``: each
    workload's replayed arrival times), the mixed sample's readings (``shared``: config and
    metrics each) and the plan the pass made (None until it made one)."""

    run: str
    inputs: Mapping[str, Any]
    shared: tuple[Mapping[str, Any], ...]
    plan: Mapping[str, Any] | None
    created_at: datetime | None
    updated_at: datetime | None
