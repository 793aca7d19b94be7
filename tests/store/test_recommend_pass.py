"""A tuning pass's recommendation: provenance, the significance rule, and the lineage shown."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from autotune.cli import cli
from autotune.orchestrate import TuneOptions, tune
from autotune.policy import Policy, load_policy
from autotune.store import Store
from autotune.ui.lineage import LINEAGE_COLUMNS, lineage_rows


def policy(k: int, seqs: int, trials: int = 1) -> Policy:
    """A one-config space (plus the same baseline): each pass measures exactly that config,
    closed loop at concurrency 8, so the passes differ only by what they are given."""
    config = {"num_speculative_tokens": k, "enable_adaptive_verification": False,
              "max_num_seqs": seqs, "max_num_batched_tokens": 8192}
    return load_policy(None, {
        "budget.trials": trials, "replay.max_requests": 60, "replay.warmup_requests": 4,
        "replay.mode": "closed", "replay.concurrency": 8,
        "objective.maximize": "output_tokens_per_s",
        "objective.slo.ttft_p99_ms": 100_000, "objective.slo.itl_p99_ms": 1_000,
        "space.num_speculative_tokens": [k], "space.max_num_seqs": [seqs],
        "space.enable_adaptive_verification": [False], "space.max_num_batched_tokens": [8192],
        "baseline": config})


def one_pass(store: Store, sample: Path, tmp_path: Path, pol: Policy) -> dict[str, Any]:
    result = tune(TuneOptions(traffic=sample, policy=pol, seed=1, workloads=["chat"],
                              export_dir=tmp_path / "exports", resume=False, replicas=1), store)
    (w,) = result.workloads
    assert w.recommendation is not None
    assert w.promoted == (w.recommendation.status == "active")
    return w.recommendation.to_json()  # checked in the JSON form the CLI prints


def test_recommendations_promote_only_significant_gains(db_url: str, small_sample: Path,
                                                        tmp_path: Path) -> None:
    store = Store.open(db_url)
    slow = policy(1, 1)
    first = one_pass(store, small_sample, tmp_path, slow)
    assert first["status"] == "active"
    assert first["reason"].startswith("first recommendation")
    low, high = first["value_ci"]
    assert low < first["value"] < high

    # Provenance (docs/storage.md), checked against the inputs rather than the code's own output.
    data = small_sample.read_bytes()
    assert first["traffic"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert first["traffic"]["size_bytes"] == len(data)
    assert first["policy"] == {"name": slow.name, "sha256": slow.sha256()}
    assert (first["model"], first["draft_model"]) == (slow.serve.model, slow.serve.draft_model)
    assert first["backend"] == "sim" and "vllm_version" in first
    assert first["profile"] == slow.sim.profile and first["hardware"]
    acc = first["acceptance"]
    assert len(acc["predicted_per_position"]) == len(acc["measured_per_position"]) == 1
    assert first["run"] == first["provenance"]["run"]
    assert datetime.fromisoformat(first["created_at"]).tzinfo is not None

    again = one_pass(store, small_sample, tmp_path, slow)  # the same config, measured again
    assert again["status"] == "candidate" and again["compared_with"] == first["id"]
    assert again["gain"] == pytest.approx(0.0, abs=1e-9)
    assert again["gain_ci"][0] < 0 < again["gain_ci"][1]
    assert "not significant" in again["reason"]
    active = store.active_recommendation("chat")
    assert active is not None and active.id == first["id"]

    faster = one_pass(store, small_sample, tmp_path, policy(5, 8))
    assert faster["status"] == "active" and "significant, promoted" in faster["reason"]
    assert faster["gain_ci"][0] > 0 and faster["compared_with"] == first["id"]
    retired = store.recommendation(first["id"]).to_json()
    assert retired["status"] == "retired" and retired["retired_by"] == faster["id"]

    result = CliRunner().invoke(cli, ["recommendations", "--workload", "chat", "--history",
                                      "--db", db_url, "--format", "json"])
    assert result.exit_code == 0, result.stderr
    hist = json.loads(result.stdout)
    assert [(r["id"], r["status"]) for r in hist] == [
        (faster["id"], "active"), (again["id"], "candidate"), (first["id"], "retired")]
    table = CliRunner().invoke(cli, ["recommendations", "--workload", "chat", "--history",
                                     "--db", db_url])
    assert table.exit_code == 0 and "created (UTC)" in table.stdout
    assert f"#{first['id']} chat (retired, run " in " ".join(table.stdout.split())
    wide = CliRunner().invoke(cli, ["recommendations", "--workload", "chat", "--history",
                                    "--db", db_url, "--wide"])
    assert wide.exit_code == 0 and "retired (UTC)" in wide.stdout
    rows = {row[0]: dict(zip(LINEAGE_COLUMNS, row, strict=True))
            for row in lineage_rows(store.recommendations("chat", history=True))}
    assert rows[str(first["id"])]["retired (UTC)"].endswith(f"by #{faster['id']}")
    assert rows[str(again["id"])]["gain (95% CI)"].endswith(f"vs #{first['id']}")

    export = CliRunner().invoke(cli, ["export", "--workload", "chat", "--format", "schedule",
                                      "--db", db_url])
    assert export.exit_code == 0
    assert json.loads(export.stdout)["num_speculative_tokens"] == 5
    assert "no per-batch-size schedule" in export.stderr


def test_the_active_config_is_re_measured_on_the_new_traffic(db_url: str, small_sample: Path,
                                                              tmp_path: Path) -> None:
    """A later pass measures the active config again, on its own traffic, and the new best is
    judged against that measurement (not against one made on other traffic)."""
    store = Store.open(db_url)
    first = one_pass(store, small_sample, tmp_path, policy(1, 1))
    faster = one_pass(store, small_sample, tmp_path, policy(5, 8, trials=2))
    trials = store.trials(faster["run"], "chat")
    again = [t for t in trials if t.metrics.get("role") == "incumbent"]
    assert len(again) == 1
    assert again[0].params == first["config"] and again[0].state == "complete"
    assert faster["compared_with"] == first["id"] and faster["status"] == "active"
