"""A capacity's units on a pass over a bursty sample: the rate a replica sustained (s × the
rate of the slice its reading replayed) is read from the arrivals, and the plan sizes replicas
against the planned rate with the time-scale s (one replica serves s × the planned rate),
not with the sustained rate, which would count fewer replicas than a reading supports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from plan_run import run, stored_plan

from autotune.orchestrate.capacity_window import busiest_slice
from autotune.plan import replicas_for
from autotune.policy import DEFAULT_POLICY_PATH
from autotune.store import Store

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample.jsonl"
WINDOW_S = 20.0  # replay.window_s: a reading replays 20 replica seconds of arrivals
BURST, LULL = 0.25, 2.5  # seconds between arrivals: 40 requests at 4/s, then 40 at 0.4/s


@pytest.fixture(scope="module")
def bursty(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A quick sim pass over 80 chat requests of examples/sample.jsonl re-timed into a burst
    and a lull: (database URL, run id)."""
    tmp = tmp_path_factory.mktemp("bursty")
    rows = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    chat = [r for r in rows if r["workload"] == "chat"][:80]
    for i, r in enumerate(chat):
        r["arrival_s"] = round(BURST * min(i, 40) + LULL * max(i - 40, 0), 4)
    sample = tmp / "bursty.jsonl"
    sample.write_text("".join(json.dumps(r) + "\n" for r in chat))
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    data["budget"]["trials"] = 2
    data["search"]["strategy"] = "grid"  # the plan is judged here, not the search
    data["replay"].update(max_requests=80, warmup_requests=0, window_s=WINDOW_S)
    policy = tmp / "bursty.yaml"
    policy.write_text(yaml.safe_dump(data))
    db = f"sqlite:///{tmp / 'autotune.db'}"
    # one sim replica, in this process: no local Ray to start (the plan is judged, not the pool)
    code, _, err = run("start", "--traffic", sample, "--policy", policy, "--db", db, "--once",
                       "--replicas", "1", "--export-dir", tmp / "exports")
    assert code == 0, err
    store = Store.open(db)
    try:
        return db, store.runs()[0].id
    finally:
        store.close()


def _slice_rate(arrivals: list[float], length: float) -> float:
    """Requests/s of the busiest slice of ``length`` sample seconds (the replay's own rule)."""
    i, j = busiest_slice(arrivals, length)
    return (j - i - 1) / (arrivals[j - 1] - arrivals[i])


def test_the_plan_counts_replicas_at_the_rate_sustained_on_a_bursty_sample(
        bursty: tuple[str, str]) -> None:
    db, run_id = bursty
    plan = stored_plan(db, run_id)
    store = Store.open(db)
    try:
        stored = store.plan(run_id)
        trials = {t.id: t for t in store.trials(run_id)}
    finally:
        store.close()
    assert stored is not None
    arrivals = sorted(stored.inputs["arrivals"]["chat"])
    (w,) = plan.workloads
    c = w.recommended
    assert w.rates is not None and c is not None and c.trial_id is not None
    trial = trials[c.trial_id]
    scale = trial.metrics["load_scale"]
    # the kept reading replayed the busiest slice of window × scale sample seconds (twice the
    # window when an undecided verdict was read again): its rate, read from the arrivals alone
    assert c.unit == "sustained" and c.sustained_per_s is not None
    assert any(c.sustained_per_s == pytest.approx(
        scale * _slice_rate(arrivals, k * WINDOW_S * scale), rel=1e-3) for k in (1, 2))
    # bursty: the slice is much denser than the sample's mean (the rate planned for)
    assert c.slice_rate_ratio is not None and c.slice_rate_ratio > 1.5
    assert c.sample_rate_per_s == pytest.approx(w.rates.mean_per_s)
    # against the planned rate a replica serves scale × that rate: the count is the time-scale's
    s = plan.settings
    counts = [z.replicas for z in w.recommended_sizing]
    assert counts == [replicas_for(k, scale, s.headroom) for k in s.growth]
    # the sustained req/s against the planned mean would count fewer replicas, each then
    # serving a time-scale of the sample that a reading saw miss the SLO
    naive = [replicas_for(w.rates.planned_per_s * k, c.sustained_per_s, s.headroom)
             for k in s.growth]
    assert all(a <= b for a, b in zip(naive, counts, strict=True))
    missed = trial.metrics["capacity_high_scale"]
    assert any(k / n >= missed for k, n in zip(s.growth, naive, strict=True)), (naive, missed)


def test_the_plan_json_names_each_capacitys_unit(bursty: tuple[str, str]) -> None:
    db, run_id = bursty
    code, out, err = run("plan", "--run", run_id, "--db", db, "--format", "json")
    assert code == 0, err
    rec = json.loads(out)["workloads"][0]["recommended"]
    assert rec["capacity_unit"] == "sustained" and rec["slice_rate_ratio"] > 1
    code, out, _ = run("plan", "--run", run_id, "--db", db)
    assert code == 0 and "req/s of the planned traffic one replica serves" in out
