"""What the plan tests share: the sample, the CLI runner, and one quick sim pass."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from autotune.cli import cli
from autotune.plan import Plan, plan_for_run
from autotune.policy import DEFAULT_POLICY_PATH
from autotune.store import Store

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "small.jsonl"
REPLAYED = 30  # replay.max_requests of the quick policy


def run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def quick_pass(tmp: Path, backend_args: tuple[str, ...] = (),
               budget: dict[str, object] | None = None) -> tuple[str, str]:
    """One quick pass over examples/small.jsonl into a database under ``tmp``: (URL, run id);
    ``budget``: policy budget keys to set besides ``trials`` (2). The grid searches (the plan
    is judged, not the search)."""
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    data["budget"]["trials"] = 2
    # the plan is judged here, not the search: the grid proposes without fitting a predictor
    data["search"]["strategy"] = "grid"
    data["budget"].update(budget or {})
    data["replay"]["max_requests"] = REPLAYED
    data["replay"]["warmup_requests"] = 4
    policy = tmp / "quick.yaml"
    policy.write_text(yaml.safe_dump(data))
    db = f"sqlite:///{tmp / 'autotune.db'}"
    code, out, err = run("start", "--traffic", SAMPLE, "--policy", policy, "--db", db,
                         "--once", "--export-dir", tmp / "exports", *backend_args)
    assert code == 0, err
    assert "plan: " in out
    store = Store.open(db)
    try:
        return db, store.runs()[0].id
    finally:
        store.close()


def stored_plan(db: str, run_id: str) -> Plan:
    """The plan of ``run_id`` made again from the database (:func:`autotune.plan.plan_for_run`)."""
    store = Store.open(db)
    try:
        return plan_for_run(store, run_id)
    finally:
        store.close()
