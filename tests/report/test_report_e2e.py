"""The report of a real tuning pass (simulator backend, in process) drawn by Chromium.

Guards the contract between what the tuning pass stores (trial metrics, the recommendation's
acceptance provenance) and what the report reads: a renamed metric would leave a chart empty.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from chromium import census, dump_dom

from autotune.orchestrate import SerialPool, TuneOptions, tune
from autotune.policy import load_policy
from autotune.report import load_report_data, write_report
from autotune.store import Store


@pytest.mark.slow
def test_report_of_a_real_sim_pass(small_sample: Path, tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'e2e.db'}")
    # the report is judged here, not the search: the grid proposes without fitting a predictor
    policy = load_policy(None, {"budget.trials": 3, "search.strategy": "grid"})

    def serial(backend: Any, _rep: Any) -> SerialPool:
        return SerialPool(backend)

    result = tune(TuneOptions(traffic=small_sample, policy=policy, export_dir=tmp_path / "x"),
                  store, pool_factory=serial)

    data = load_report_data(store)
    assert data.run.id == result.run_id
    assert data.objective == policy.objective.maximize
    assert sorted(w.name for w in data.workloads) == sorted(r.workload for r in result.workloads)
    for w in data.workloads:
        assert w.recommended is not None, w.name
        assert w.baseline is not None, w.name
        assert w.itl_slo_ms == pytest.approx(policy.objective.slo.itl_p99_ms)
        assert w.ttft_slo_ms == pytest.approx(policy.objective.slo.ttft_p99_ms)
        assert all(t.throughput is not None and t.itl_p99_ms is not None for t in w.measured)
        cal = w.calibration()
        assert cal is not None and cal.positions == w.recommended.window, w.name
        assert w.by_window() and w.pareto()

    drawn = census(dump_dom(write_report(store, tmp_path / "report.html").path))
    measured = sum(len(w.measured) for w in data.workloads)
    assert drawn.points["pareto-plot"] == measured + len(data.workloads)
    assert drawn.points["calibration-plot"] == 3 * sum(
        w.recommended.window or 0 for w in data.workloads if w.recommended)
    assert drawn.points["history-plot"] == sum(len(w.trials) for w in data.workloads)
