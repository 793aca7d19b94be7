"""The capacity plan: replicas, GPUs and configs for a traffic, its peaks and its growth.

From a run's measured capacities (each with its interval), the workloads' rates (mean, and the
peak over ``plan.peak_window``), ``plan.headroom`` and growth factors, a plan says per workload
how many replicas (and GPUs) the recommended config needs and how many the baseline does, the
GPUs saved (the headline), the probability the SLO holds at each count and when a count flips
inside the capacity's interval; and whether one shared deployment serving the mixed traffic on
one config needs fewer GPUs than one deployment per workload (docs/plan.md).

- :mod:`~autotune.plan.rates`: the rate to plan for (mean, busiest window);
- :mod:`~autotune.plan.measured`: a config's capacity and interval from a trial's metrics;
- :mod:`~autotune.plan.sizing`: replicas and GPUs for a rate, and how far the count holds;
- :mod:`~autotune.plan.shared`: split by workload against shared;
- :mod:`~autotune.plan.build`: the plan; :mod:`~autotune.plan.inputs`: a run's plan from the
  database, measuring nothing; :mod:`~autotune.plan.deploy`: replica counts for the exports.
"""

from __future__ import annotations

from autotune.plan.build import (
    Plan,
    PlanSettings,
    SharedInput,
    WorkloadInput,
    WorkloadPlan,
    build_plan,
    check_settings,
)
from autotune.plan.deploy import ExportPick, deployment_for, pick_export, plan_deployments
from autotune.plan.inputs import (
    MIXED,
    plan_for_run,
    plan_settings,
    readings_made,
    sample_rate,
    shared_inputs,
)
from autotune.plan.measured import MeasuredCapacity, capacity_of
from autotune.plan.rates import Rates, duration_text, traffic_rates
from autotune.plan.shared import SharedOption, SplitOrShared, SplitShareRow
from autotune.plan.sizing import Sizing, replicas_for, size_for

__all__ = [
    "MIXED",
    "ExportPick",
    "MeasuredCapacity",
    "Plan",
    "PlanSettings",
    "Rates",
    "SharedInput",
    "SharedOption",
    "Sizing",
    "SplitOrShared",
    "SplitShareRow",
    "WorkloadInput",
    "WorkloadPlan",
    "build_plan",
    "capacity_of",
    "check_settings",
    "deployment_for",
    "duration_text",
    "pick_export",
    "plan_deployments",
    "plan_for_run",
    "plan_settings",
    "readings_made",
    "replicas_for",
    "sample_rate",
    "shared_inputs",
    "size_for",
    "traffic_rates",
]
