"""The promotion gate of the output check (docs/outputs.md, "What a flag does"), whichever
config measured fastest: :func:`autotune.recommend.recommend_workload` on a real SQLite store
holding a run's stored trials, the best of which has flagged outputs.

A pass's three trials, as the trial runner stores them (value, SLO constraints, per-request
columns, greedy outputs): the baseline without speculation serving one sequence at a time,
window 2 and window 3 batching four. Window 3 measured fastest. With outputs that are the
baseline's it is the first recommendation and is promoted and exported; with outputs of a
server that sampled (a token far below its own best one), the same trial is flagged: stored
as a candidate with the reason, not promoted, not exported, named in the pass notes and in
``autotune trials``, and ``autotune export`` refuses it unless ``--force``.
(tests/backends/vllm/test_vllm_outputs.py catches a sampling vLLM server; which of its
configs measures fastest there depends on the machine's load.)
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from autotune.cli import cli
from autotune.objective import Outcome
from autotune.policy import Policy, load_policy
from autotune.recommend import Scored, WorkloadResult, WorkloadTrials, recommend_workload
from autotune.recommend.provenance import run_provenance
from autotune.store import Store, TrialRecord
from autotune.types import GreedyOutput, Request, TrialConfig, outputs_as_dict
from autotune.ui.pass_report import pass_notes

WORKLOAD = "math"
PROMPTS, TOKENS = 4, 8
REQUESTS, OUTPUT_TOKENS = 8, 32
BASELINE = TrialConfig(0, False, 1, 512)
#: (trial number, config, seconds the trial's 8 requests took): window 3 serves fastest
TRIALS = ((0, BASELINE, 4.0), (1, TrialConfig(2, False, 4, 512), 1.6),
          (2, TrialConfig(3, False, 4, 512), 1.0))
WINNER = 2


def _policy() -> Policy:
    return load_policy(None, {
        "objective.maximize": "output_tokens_per_s",
        "objective.slo.ttft_p99_ms": 60_000, "objective.slo.itl_p99_ms": 60_000,
        "baseline": BASELINE.as_dict()})


def _greedy(prompt: int) -> GreedyOutput:
    """The baseline's greedy tokens for one prompt: every token leads its runner-up by 2 nats."""
    tokens = tuple(100 * prompt + i for i in range(TOKENS))
    return GreedyOutput(tokens, (2.0,) * TOKENS, tuple(t + 1 for t in tokens))


def _sampled(prompt: int) -> GreedyOutput:
    """A sampling server's tokens: its first token lags its own best one (the greedy token)
    by 1.5 nats, so the divergence is no near-tie."""
    greedy = _greedy(prompt)
    first = greedy.tokens[0] + 7
    return GreedyOutput((first, *greedy.tokens[1:]), (-1.5, *greedy.margins[1:]),
                        (greedy.tokens[0], *greedy.runner_up[1:]))


def _store_trials(store: Store, run_id: str, winner_sampled: bool,
                  trials: tuple[tuple[int, TrialConfig, float], ...] = TRIALS) -> list[Scored]:
    """The run's trials, stored as the trial runner stores them (docs/storage.md)."""
    scored = []
    for number, config, duration in trials:
        sampled = winner_sampled and number == WINNER
        outputs = [(_sampled if sampled else _greedy)(p) for p in range(PROMPTS)]
        e2e = duration * 4 / REQUESTS  # four at a time (one for the baseline, which took 4 s)
        per_request = {"ttft_s": [0.05] * REQUESTS, "tpot_s": [e2e / OUTPUT_TOKENS] * REQUESTS,
                       "e2e_s": [e2e] * REQUESTS, "output_tokens": [OUTPUT_TOKENS] * REQUESTS,
                       "ok": [True] * REQUESTS}
        value = REQUESTS * OUTPUT_TOKENS / duration
        constraints = {"ttft_p99_ms": 50.0 - 60_000, "itl_p99_ms": 1000 * e2e / OUTPUT_TOKENS
                       - 60_000, "failed_requests": 0.0}
        summary = {"output_tokens_per_s": value, "duration_s": duration,
                   "requests": REQUESTS, "outputs": outputs_as_dict(outputs)}
        outcome = Outcome(value, constraints, summary)
        trial_id = store.record_trial(
            run_id=run_id, workload=WORKLOAD, number=number, state="complete",
            params=config.as_dict(), is_baseline=config == BASELINE, value=value,
            feasible=outcome.feasible, metrics={**summary, "constraints": constraints},
            per_request=per_request)
        scored.append(Scored(number, config, outcome, config == BASELINE, trial_id))
    return scored


def _recommend(db: str, exports: Path, winner_sampled: bool,
               trials: tuple[tuple[int, TrialConfig, float], ...] = TRIALS) -> WorkloadResult:
    policy = _policy()
    store = Store.open(db)
    try:
        sample_id = store.record_sample(path="math.jsonl", sha256="a" * 64, size_bytes=1,
                                        requests=REQUESTS, skipped_lines=0, workloads={})
        sample = {"path": "math.jsonl", "sha256": "a" * 64, "sample_id": sample_id,
                  "size_bytes": 1, "requests": REQUESTS}
        run_id = store.create_run(backend="vllm", policy_name=policy.name,
                                  policy_sha256=policy.sha256(), policy={},
                                  sample_id=sample_id, seed=1)
        scored = _store_trials(store, run_id, winner_sampled, trials)
        requests = [Request(id=f"q{i}", prompt_tokens=40, output_tokens=OUTPUT_TOKENS)
                    for i in range(REQUESTS)]
        provenance = run_provenance(policy=policy, backend="vllm",
                                    described={"vllm_version": "test"}, sample=sample,
                                    run_id=run_id, seed=1)
        result = recommend_workload(store, policy, run_id,
                                    WorkloadTrials(WORKLOAD, requests, scored), provenance,
                                    backend="vllm", export_dir=exports, seed=1,
                                    decodes_tokens=True)
        store.set_run_status(run_id, "finished")
        return result
    finally:
        store.close()


def _stored_trials(db: str) -> list[TrialRecord]:
    store = Store.open(db)
    try:
        return store.trials()
    finally:
        store.close()


def test_the_fastest_config_with_the_baselines_outputs_is_promoted(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'autotune.db'}"
    w = _recommend(db, tmp_path / "exports", winner_sampled=False)
    rec = w.recommendation
    assert rec is not None and rec.trial_id is not None
    assert rec.config["num_speculative_tokens"] == 3 and rec.status == "active" and w.promoted
    assert not w.outputs_flagged and w.flagged == ()
    assert w.export_path is not None and w.export_path.is_file()
    exported = CliRunner().invoke(cli, ["export", "--workload", WORKLOAD, "--db", db])
    assert exported.exit_code == 0, exported.stderr
    assert json.loads(exported.stdout)["num_speculative_tokens"] == 3


def test_the_fastest_config_with_flagged_outputs_is_never_promoted(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'autotune.db'}"
    exports = tmp_path / "exports"
    w = _recommend(db, exports, winner_sampled=True)
    rec = w.recommendation
    assert rec is not None and rec.config["num_speculative_tokens"] == 3
    # the best measured config: the flag decides promotion, not which config is recommended
    assert w.best is not None and w.best.value == max(t.value or 0.0 for t in _stored_trials(db))
    assert rec.status == "candidate" and not w.promoted and w.outputs_flagged
    assert rec.reason.startswith("not promoted: outputs differ from the baseline beyond the "
                                 "engine's numerics: 0/4 identical; prompt 0 diverges at token 0")
    assert rec.reason == w.reason
    assert w.flagged == (f"#{WINNER} n=3 seqs=4 tok=512: {w.outputs and w.outputs['reason']}",)
    assert w.export_path is None and not exports.exists()
    notes = pass_notes([w])
    assert f"{WORKLOAD}: {rec.reason}" in "\n".join(notes)
    assert f"{WORKLOAD}: outputs FLAGGED, trial #{WINNER} n=3 seqs=4" in "\n".join(notes)
    store = Store.open(db)
    try:
        assert store.active_recommendation(WORKLOAD) is None
        assert rec.provenance["outputs"]["flagged"] is True
    finally:
        store.close()

    runner = CliRunner()
    listed = runner.invoke(cli, ["trials", "--db", db, "--format", "json"])
    checks = {t["number"]: t["metrics"]["output_check"] for t in json.loads(listed.stdout)}
    assert [n for n, c in checks.items() if c["flagged"]] == [WINNER]
    assert checks[1]["checked"] and checks[1]["against"][0]["identical"] == PROMPTS
    assert "FLAGGED" in runner.invoke(cli, ["trials", "--db", db]).stdout

    refused = runner.invoke(cli, ["export", "--workload", WORKLOAD, "--db", db])
    assert refused.exit_code != 0 and "is flagged" in refused.stderr, refused.stderr
    assert refused.stdout == ""
    forced = runner.invoke(cli, ["export", "--workload", WORKLOAD, "--db", db, "--force"])
    assert forced.exit_code == 0, forced.stderr
    assert json.loads(forced.stdout)["num_speculative_tokens"] == 3
    assert "whose outputs are flagged (--force)" in forced.stderr



def test_a_baseline_read_twice_is_compared_by_the_mean_of_its_readings(tmp_path: Path) -> None:
    """The best config is chosen and valued by the mean of its readings
    (:func:`~autotune.recommend.choose.combine_readings`); the baseline it is compared with is
    held to the same rule: read again (a narrow lead read twice), its speedup is against the
    mean, not its first reading."""
    again = (*TRIALS, (3, BASELINE, 2.0))  # the baseline's second reading: twice as fast
    result = _recommend(f"sqlite:///{tmp_path / 'a.db'}", tmp_path / "exports", False, again)
    rec = result.recommendation
    first, second = (REQUESTS * OUTPUT_TOKENS / d for d in (4.0, 2.0))
    winner = REQUESTS * OUTPUT_TOKENS / TRIALS[WINNER][2]
    assert rec is not None and rec.config == TRIALS[WINNER][1].as_dict()
    assert rec.baseline_value == (first + second) / 2
    assert rec.speedup_vs_baseline == winner / ((first + second) / 2)
