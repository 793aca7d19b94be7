"""A plan from measured capacities: the saving against the baseline, growth, workloads left
out with the reason, split against shared, and settings that are not positive numbers."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.errors import PlanError
from autotune.plan import (
    PlanSettings,
    SharedInput,
    WorkloadInput,
    build_plan,
    capacity_of,
)
from autotune.plan.measured import MeasuredCapacity
from autotune.slo import Slo
from autotune.types import TrialConfig

REC = TrialConfig(3, False, 64, 8192)
BASE = TrialConfig(7, False, 1024, 8192)
OTHER = TrialConfig(4, True, 128, 8192)


def settings(**kw: object) -> PlanSettings:
    base: dict[str, object] = {"headroom": 0.1, "growth": (1.0, 2.0, 4.0),
                               "peak_window_s": None, "gpus_per_replica": 8,
                               "slo": Slo(3000, 60)}
    base.update(kw)
    return PlanSettings(**base)  # type: ignore[arg-type]


def arrivals(rate: float, seconds: float = 100.0) -> tuple[float, ...]:
    return tuple(np.arange(0.0, seconds, 1.0 / rate).tolist())


def cap(config: TrialConfig, low: float, high: float, rate: float) -> MeasuredCapacity:
    m = {"load_scale": low, "capacity_met_slo": 1.0, "capacity_high_scale": high,
         "capacity_sustained": 1.0, "replay0_scale": 1.0, "replay1_scale": high}
    c = capacity_of(config, m, rate)
    assert isinstance(c, MeasuredCapacity)
    return c


def workload(name: str, rate: float, rec_scale: float, base_scale: float | None) -> WorkloadInput:
    times = arrivals(rate)
    r = (len(times) - 1) / (times[-1] - times[0])
    base: MeasuredCapacity | str = (cap(BASE, base_scale, base_scale * 1.05, r)
                                    if base_scale else "meets the SLO at no rate measured")
    return WorkloadInput(name, times, cap(REC, rec_scale, rec_scale * 1.05, r), base)


def test_the_headline_is_the_gpus_the_recommended_configs_save() -> None:
    # code: 2 req/s, recommended serves 2.5x (5 req/s per replica), baseline 0.5x (1 req/s)
    plan = build_plan([workload("code", 2.0, 2.5, 0.5)], [], settings(), run_id="r",
                      backend="sim")
    w = plan.workloads[0]
    assert [s.replicas for s in w.recommended_sizing] == [1, 1, 2]  # 2.2, 4.4, 8.8 over ~5
    assert [s.replicas for s in w.baseline_sizing] == [3, 5, 9]
    totals = plan.totals(0)
    assert totals["gpus_saved"] == (3 - 1) * 8 and totals["replicas_saved"] == 2
    assert plan.headline().startswith("16 GPUs saved (2 replicas)")
    assert plan.headline().endswith("(at ×2: 32 GPUs saved (4 replicas), ×4: 56 GPUs saved "
                                    "(7 replicas))")
    assert plan.as_dict()["totals"][2]["gpus_saved"] == (9 - 2) * 8


def test_a_workload_no_config_serves_is_left_out_with_its_reason() -> None:
    bad = WorkloadInput("chat", arrivals(3.0), "meets the SLO at no rate measured", "x")
    plan = build_plan([workload("code", 2.0, 2.5, 0.5), bad], [], settings(), run_id="r",
                      backend="sim")
    out = {w.workload: w for w in plan.workloads}
    assert not out["chat"].planned and "no rate" in out["chat"].left_out
    assert plan.totals(0)["recommended_gpus"] == 8  # code only


def test_a_baseline_that_serves_no_rate_is_said_and_left_out_of_the_saving() -> None:
    plan = build_plan([workload("code", 2.0, 2.5, None), workload("math", 2.0, 2.5, 0.5)], [],
                      settings(), run_id="r", backend="sim")
    code = next(w for w in plan.workloads if w.workload == "code")
    assert "no rate" in code.baseline_note and not code.baseline_sizing
    assert plan.totals(0)["gpus_saved"] == 16  # math's saving alone
    assert "over the workloads the baseline can serve" in plan.headline()


def test_no_workload_to_size_is_an_error_naming_why() -> None:
    bad = WorkloadInput("chat", arrivals(3.0), "no capacity reading (replay.mode closed)", "x")
    with pytest.raises(PlanError, match=r"no workload a plan can size.*chat: no capacity"):
        build_plan([bad], [], settings(), run_id="r", backend="sim")


@pytest.mark.parametrize(("kw", "flag"), [({"headroom": 0.0}, "--headroom"),
                                          ({"headroom": -1.0}, "--headroom"),
                                          ({"growth": (1.0, 0.0)}, "--growth"),
                                          ({"growth": (float("nan"),)}, "--growth")])
def test_settings_that_are_not_positive_numbers_name_the_flag(kw: dict[str, object],
                                                              flag: str) -> None:
    source = "headroom_source" if "headroom" in kw else "growth_source"
    with pytest.raises(PlanError, match=flag):
        build_plan([workload("code", 2.0, 2.5, 0.5)], [], settings(**kw, **{source: flag}),
                   run_id="r", backend="sim")


def test_shared_needs_fewer_gpus_when_the_mixed_capacity_carries_both_workloads() -> None:
    code, math_ = workload("code", 2.0, 1.0, 0.5), workload("math", 2.0, 1.0, 0.5)
    # each workload alone: 2 req/s at 2 req/s per replica -> 2 replicas each (2.2 / 2)
    mixed_rate = (len(code.arrivals) * 2 - 1) / (code.arrivals[-1] - code.arrivals[0])
    good = SharedInput(OTHER, cap(OTHER, 1.0, 1.05, mixed_rate))  # ~4 req/s per replica
    poor = SharedInput(REC, cap(REC, 0.3, 0.32, mixed_rate))
    failed = SharedInput(BASE, "its reading failed: replica died")
    plan = build_plan([code, math_], [poor, good, failed], settings(), run_id="r",
                      backend="sim")
    assert plan.shared is not None
    row = plan.shared.rows[0]
    assert row.split_gpus == 32
    assert row.shared is not None and row.shared.config == OTHER
    assert row.shared_sizing is not None and row.shared_sizing.gpus == 16
    assert row.fewer == "shared" and "shared needs 16 fewer GPUs" in row.verdict
    assert plan.shared.options[2].why_not.startswith("its reading failed")


def test_counts_whose_ranges_overlap_are_within_noise() -> None:
    code = workload("code", 2.0, 1.0, 0.5)
    # alone: 2.2 / 2.1 -> 2 replicas (1 at the top of 2.1 .. 2.3 = 2.2/2.3 -> 1)
    wide = WorkloadInput("code", code.arrivals,
                         cap(REC, 1.05, 1.15, (len(code.arrivals) - 1) / 99.5), code.baseline)
    rate = (len(code.arrivals) - 1) / (code.arrivals[-1] - code.arrivals[0])
    shared = SharedInput(OTHER, cap(OTHER, 1.2, 1.3, rate))  # 1 replica
    plan = build_plan([wide], [shared], settings(growth=(1.0,)), run_id="r", backend="sim")
    assert plan.shared is not None
    row = plan.shared.rows[0]
    assert row.split_gpus != row.shared_sizing.gpus if row.shared_sizing else False
    assert row.fewer == "within noise" and "within noise" in row.verdict


def test_replicas_on_cpus_are_planned_in_replicas() -> None:
    plan = build_plan([workload("code", 2.0, 2.5, 0.5)], [], settings(gpus_per_replica=0),
                      run_id="r", backend="vllm")
    assert plan.totals(0)["gpus_saved"] == 0 and plan.totals(0)["replicas_saved"] == 2
    assert plan.headline().startswith("2 replicas saved: recommended configs 1 replica, "
                                      "baseline 3 replicas")


def test_split_or_shared_of_cpu_replicas_counts_replicas() -> None:
    code, math_ = workload("code", 2.0, 1.0, 0.5), workload("math", 2.0, 1.0, 0.5)
    mixed_rate = (len(code.arrivals) * 2 - 1) / (code.arrivals[-1] - code.arrivals[0])
    shared = SharedInput(OTHER, cap(OTHER, 1.0, 1.05, mixed_rate))
    plan = build_plan([code, math_], [shared], settings(gpus_per_replica=0, growth=(1.0,)),
                      run_id="r", backend="vllm")
    assert plan.shared is not None
    row = plan.shared.rows[0]
    assert (row.unit, row.split_gpus) == ("replicas", 4)
    assert row.shared_sizing is not None and row.shared_sizing.gpus == 2
    assert "shared needs 2 fewer replicas" in row.verdict
