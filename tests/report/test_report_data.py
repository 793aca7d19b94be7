"""The series the report draws, checked against the run the test wrote into the store."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from report_run import ITL_SLO_MS, TTFT_SLO_MS, FilledRun, fill_run

from autotune.errors import StoreError
from autotune.report import load_report_data, pareto_front
from autotune.report.data import TrialPoint
from autotune.store import Store


def _point(number: int, tok_s: float, itl: float) -> TrialPoint:
    return TrialPoint(id=number, number=number, state="complete", baseline=False, params={},
                      value=tok_s, feasible=True, throughput=tok_s, itl_p99_ms=itl,
                      ttft_p99_ms=None)


def _dominates(a: TrialPoint, b: TrialPoint) -> bool:
    assert a.throughput is not None and b.throughput is not None
    assert a.itl_p99_ms is not None and b.itl_p99_ms is not None
    return (a.throughput >= b.throughput and a.itl_p99_ms <= b.itl_p99_ms
            and (a.throughput > b.throughput or a.itl_p99_ms < b.itl_p99_ms))


@settings(deadline=None)  # hypothesis' default 200 ms per example is a wall-clock bound
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 50)), max_size=30))
def test_pareto_front_is_exactly_the_non_dominated_points(pairs: list[tuple[int, int]]) -> None:
    points = [_point(i, float(tok), float(itl)) for i, (tok, itl) in enumerate(pairs)]
    front = pareto_front(points)
    keys = {(p.throughput, p.itl_p99_ms) for p in front}
    assert len(keys) == len(front)  # one point per distinct (throughput, itl)
    for p in points:
        dominated = any(_dominates(q, p) for q in points)
        assert ((p.throughput, p.itl_p99_ms) in keys) == (not dominated)
    assert [p.itl_p99_ms for p in front] == sorted(p.itl_p99_ms for p in front)


def test_pareto_front_ignores_failed_and_unmeasured_trials() -> None:
    good = _point(0, 10.0, 20.0)
    failed = TrialPoint(id=1, number=1, state="failed", baseline=False, params={}, value=None,
                        feasible=None, throughput=None, itl_p99_ms=None, ttft_p99_ms=None)
    no_itl = _point(2, 99.0, 1.0)
    no_itl = TrialPoint(**{**no_itl.__dict__, "itl_p99_ms": None})
    assert pareto_front([good, failed, no_itl]) == [good]


def test_loads_the_newest_finished_run_with_every_trial(filled: FilledRun) -> None:
    data = load_report_data(filled.store)
    assert data.run.id == filled.run_id
    assert data.objective == "goodput"
    assert [w.name for w in data.workloads] == sorted(filled.trials)
    for w in data.workloads:
        expected = filled.trials[w.name]
        assert sorted(t.number for t in w.trials) == sorted(n for n, *_ in expected)
        assert len(w.failed) == sum(m is None for _, _, m, _ in expected)
        assert w.itl_slo_ms == pytest.approx(ITL_SLO_MS)
        assert w.ttft_slo_ms == pytest.approx(TTFT_SLO_MS)
        assert w.recommended is not None and w.recommended.number == filled.recommended[w.name]
        assert w.baseline is not None and w.baseline.number == 0


def test_window_points_are_the_best_feasible_trial_per_window(filled: FilledRun) -> None:
    data = load_report_data(filled.store)
    for w in data.workloads:
        rows = [(p, m) for _, p, m, _ in filled.trials[w.name] if m is not None]
        base = next(m for _, _, m, b in filled.trials[w.name] if b)
        assert base is not None
        by_window = {pt.window: pt for pt in w.by_window()}
        assert set(by_window) == {p["num_speculative_tokens"] for p, _ in rows}
        for n, pt in by_window.items():
            at_n = [m for p, m in rows if p["num_speculative_tokens"] == n]
            ok = [m for m in at_n if all(v <= 0 for v in m["constraints"].values())]
            best = max(m["goodput"] for m in (ok or at_n))
            assert pt.feasible == bool(ok)
            assert pt.value == pytest.approx(best)
            assert pt.speedup == pytest.approx(best / base["goodput"])
        relative = sorted(r for _, r in w.relative())
        assert relative == pytest.approx(sorted(m["goodput"] / base["goodput"] for _, m in rows))


def test_history_keeps_the_running_best_feasible_value(filled: FilledRun) -> None:
    data = load_report_data(filled.store)
    for w in data.workloads:
        hist = w.history()
        assert [h.number for h in hist] == sorted(n for n, *_ in filled.trials[w.name])
        best = None
        for h in hist:
            if h.value is not None and h.feasible:
                best = h.value if best is None else max(best, h.value)
            assert h.best_so_far == best
        # the recommendation is the best feasible trial, so the history ends on its value
        assert w.recommended is not None and hist[-1].best_so_far == w.recommended.value


def test_calibration_pairs_predicted_and_measured_positions(filled: FilledRun) -> None:
    data = load_report_data(filled.store)
    for w in data.workloads:
        cal = w.calibration()
        assert cal is not None and w.recommended is not None
        assert cal.positions == w.recommended.window
        # the fixture's head is overconfident at every position: error is the mean gap
        gaps = [p - m for p, m in zip(cal.predicted, cal.measured, strict=True)]
        assert all(g > 0 for g in gaps)
        assert cal.mean_abs_error == pytest.approx(sum(gaps) / len(gaps))


def test_run_selection(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'r.db'}")
    with pytest.raises(StoreError, match=r"no finished run.*autotune start"):
        load_report_data(store)
    old = fill_run(store, sha="1" * 64)
    running = fill_run(store, sha="2" * 64, status="running")
    with pytest.raises(StoreError, match="no run 'nope'"):
        load_report_data(store, "nope")
    assert load_report_data(store).run.id == old.run_id  # the running one is skipped
    assert load_report_data(store, running.run_id).run.status == "running"
    newer = fill_run(store, sha="3" * 64, workloads={"rag": 0.6})
    data = load_report_data(store)
    assert data.run.id == newer.run_id
    assert [w.name for w in data.workloads] == ["rag"]  # only this run's trials and recs
    assert [r.workload for r in data.recommendations] == ["rag"]


def test_each_workload_shows_its_runs_newest_calibration_fit(filled: FilledRun) -> None:
    from autotune.report.figures import calibration_chart

    store = filled.store
    names = sorted(filled.trials)
    other = fill_run(store, sha="c" * 64).run_id  # a later run's fit must not leak in
    store.record_calibration(workload=names[0], run_id=filled.run_id, method="temperature",
                             params={"t": [1.2]}, ece_before=0.05, ece_after=0.02)
    store.record_calibration(workload=names[0], run_id=filled.run_id, method="isotonic",
                             params={}, ece_before=0.0312, ece_after=0.0033)
    store.record_calibration(workload=names[1], run_id=other, method="temperature",
                             params={}, ece_before=0.9, ece_after=0.8)
    assert [c.method for c in store.calibrations(run_id=filled.run_id)] == \
        ["isotonic", "temperature"]
    data = load_report_data(store, filled.run_id)
    fits = {w.name: w.fit for w in data.workloads}
    first = fits[names[0]]
    assert first is not None
    assert (first.method, first.ece_before, first.ece_after) == \
        ("isotonic", 0.0312, 0.0033)
    assert fits[names[1]] is None
    caption = calibration_chart(data).caption
    assert f"{names[0]} isotonic, ECE 0.0312 before, 0.0033 after" in caption
    assert "0.9" not in caption
