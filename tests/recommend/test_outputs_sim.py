"""The simulator has no tokens: a pass on it says "not checked" for every trial (trials table and
JSON, the pass notes, the recommendation's provenance, the report), flags nothing and exports as
before."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from autotune.cli import cli
from autotune.policy import DEFAULT_POLICY_PATH


def test_a_sim_pass_says_outputs_not_checked(tmp_path: Path, small_sample: Path) -> None:
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    data.update(budget={"trials": 2}, search={"strategy": "grid"},
                space={"num_speculative_tokens": [3], "max_num_seqs": [8],
                       "enable_adaptive_verification": [False],
                       "max_num_batched_tokens": [8192]})
    data["replay"].update(max_requests=40, warmup_requests=4, mode="closed", concurrency=8)
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(data))
    db = f"sqlite:///{tmp_path / 'a.db'}"
    runner = CliRunner()
    # one sim replica, in this process: no local Ray to start (the Ray pool has its own tests)
    res = runner.invoke(cli, ["start", "--traffic", str(small_sample), "--policy", str(policy),
                              "--db", db, "--once", "--replicas", "1",
                              "--export-dir", str(tmp_path / "x")])
    assert res.exit_code == 0, res.stderr
    assert "outputs not checked: the sim backend decodes no tokens" in " ".join(res.stdout.split())
    trials = json.loads(runner.invoke(cli, ["trials", "--db", db, "--format", "json"]).stdout)
    assert trials and all(t["metrics"]["output_check"] == {
        "checked": False, "flagged": False,
        "reason": "outputs not checked: the sim backend decodes no tokens"} for t in trials)
    assert all("outputs" not in t["metrics"] for t in trials)
    table = runner.invoke(cli, ["trials", "--db", db, "--wide"]).stdout
    assert table.count("not checked") == len(trials), table
    recs = json.loads(runner.invoke(cli, ["recommendations", "--db", db, "--format",
                                          "json"]).stdout)
    assert recs and all(r["provenance"]["outputs"]["checked"] is False for r in recs)
    report = tmp_path / "r.html"
    assert runner.invoke(cli, ["report", "--db", db, "-o", str(report)]).exit_code == 0
    html = report.read_text()
    assert "Outputs not checked: this run's backend decodes no tokens" in html
