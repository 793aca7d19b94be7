"""The report's capacity plan: GPU curves built by the plan's own rule, the chart in the page,
and a run without a plan said so."""

from __future__ import annotations

from pathlib import Path

from plan_run import stored_plan

from autotune.plan import plan_for_run, replicas_for
from autotune.policy import load_policy
from autotune.report import write_report
from autotune.report.data import load_report_data
from autotune.report.plan_series import plan_panels
from autotune.store import Store


def test_the_gpu_curves_follow_the_plans_counts(tuned: tuple[str, str]) -> None:
    plan = stored_plan(*tuned)
    panels = plan_panels(plan)
    names = [p.title for p in panels]
    assert names[:-1] == [w.workload for w in plan.planned]
    assert names[-1] == "all workloads: split or shared" and plan.shared is not None
    gpr, h = plan.settings.gpus_per_replica, plan.settings.headroom
    for panel, w in zip(panels, plan.planned, strict=False):
        assert w.rates is not None and w.recommended is not None
        assert [r for _, r in panel.planned] == [w.rates.planned_per_s * k
                                                 for k in plan.settings.growth]
        rec = next(c for c in panel.curves if c.kind == "recommended")
        assert rec.rates[-1] > max(r for _, r in panel.planned)  # past the largest growth
        assert list(rec.gpus) == sorted(rec.gpus)
        assert all(hi <= lo for lo, hi in zip(rec.gpus, rec.gpus_if_high, strict=True))
        for rate, gpus in zip(rec.rates, rec.gpus, strict=True):
            assert gpus == replicas_for(rate, w.recommended.low_per_s, h) * gpr
        assert {c.kind for c in panel.curves} == ({"recommended", "baseline"} if w.baseline
                                                  else {"recommended"})
    split = next(c for c in panels[-1].curves if c.kind == "split")
    shared = [c for c in panels[-1].curves if c.kind == "shared"]
    assert len(shared) == sum(o.capacity is not None for o in plan.shared.options)
    # at the end of the grid every workload runs at the same multiple of its rate
    factor = split.rates[-1] / plan.shared.rates.planned_per_s
    assert split.gpus[-1] == sum(
        replicas_for(w.rates.planned_per_s * factor, w.recommended.low_per_s, h) * gpr
        for w in plan.planned if w.rates is not None and w.recommended is not None)


def test_the_report_draws_the_plan(tuned: tuple[str, str], tmp_path: Path) -> None:
    db, run_id = tuned
    store = Store.open(db)
    try:
        written = write_report(store, tmp_path / "r.html", run_id)
        plan = plan_for_run(store, run_id)
    finally:
        store.close()
    html = written.path.read_text()
    assert '<section id="plan">' in html and "Capacity plan: GPUs against traffic" in html
    assert plan.headline() in html


def test_a_run_without_plan_inputs_is_reported_without_a_plan(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'a.db'}")
    try:
        policy = load_policy()
        sample = store.record_sample(path="s.jsonl", sha256="0" * 64, size_bytes=1,
                                     requests=1, skipped_lines=0, workloads={})
        run_id = store.create_run(backend="sim", policy_name=policy.name,
                                  policy_sha256=policy.sha256(),
                                  policy=policy.model_dump(mode="json"), sample_id=sample,
                                  seed=0)
        data = load_report_data(store, run_id)
    finally:
        store.close()
    assert data.plan is None and "no stored plan inputs" in data.plan_note
