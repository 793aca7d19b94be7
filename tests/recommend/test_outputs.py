"""The output check's comparison and rule (autotune/recommend/outputs.py) on hand-built token
streams: identical outputs, a divergence at a near-tie (the engine's numerics), a divergence
where the chosen token led by far (flagged), and the references a trial is compared with."""

from __future__ import annotations

import math

from autotune.objective import Outcome
from autotune.recommend import Scored
from autotune.recommend.outputs import check_outputs, compare_outputs, explained
from autotune.types import GreedyOutput, TrialConfig, outputs_as_dict, outputs_from_dict

TIE = 0.05


def out(tokens: list[int], margins: list[float] | None = None,
        runner_up: list[int] | None = None) -> GreedyOutput:
    margins = margins if margins is not None else [3.0] * len(tokens)
    runner_up = runner_up if runner_up is not None else [t + 1 for t in tokens]
    return GreedyOutput(tuple(tokens), tuple(margins), tuple(runner_up))


def scored(number: int, n: int, outputs: list[GreedyOutput] | None,
           baseline: bool = False) -> Scored:
    summary = {"outputs": outputs_as_dict(outputs)} if outputs is not None else {}
    return Scored(number, TrialConfig(n, False, 4, 512), Outcome(1.0, {}, summary), baseline,
                  trial_id=100 + number)


def test_identical_outputs_have_no_divergence() -> None:
    ref = [out([1, 2, 3]), out([4, 5, 6])]
    c = compare_outputs(ref, ref, name="baseline", reference_trial=0, tie_margin=TIE)
    assert (c.prompts, c.identical, c.identical_share, c.first) == (2, 2, 1.0, None)
    assert c.unexplained == ()


def test_a_near_tie_divergence_is_explained_by_numerics() -> None:
    # Position 1: the reference chose 5 over 9 by 0.01; the trial chose 9 (the runner-up).
    ref = out([4, 5, 6], margins=[3.0, 0.01, 3.0], runner_up=[7, 9, 8])
    trial = out([4, 9, 2])
    ok, margin = explained(trial, ref, 1, TIE)
    assert ok and margin == 0.01
    c = compare_outputs([out([1, 2]), trial], [out([1, 2]), ref], name="baseline",
                        reference_trial=0, tie_margin=TIE)
    assert c.identical == 1 and c.first is not None
    assert (c.first.prompt, c.first.position, c.first.explained) == (1, 1, True)
    assert c.unexplained == ()


def test_a_divergence_where_the_token_led_by_far_is_flagged() -> None:
    ref = out([4, 5, 6], margins=[3.0, 2.5, 3.0], runner_up=[7, 9, 8])
    trial = out([4, 9, 6], margins=[3.0, 2.4, 3.0], runner_up=[7, 5, 8])
    ok, margin = explained(trial, ref, 1, TIE)
    assert not ok and margin == 2.4  # the closer of the two runs' margins
    # A token that is neither run's runner-up has no margin to speak of: not a tie.
    other = out([4, 11, 6])
    assert explained(other, ref, 1, TIE) == (False, None)


def test_a_run_that_emitted_a_token_below_its_own_best_is_flagged() -> None:
    # What vLLM returns for a sampled token outside its top 2: the token, then the best other
    # one, which led it by 1.8 nats: the margin is negative.
    ref = out([32, 5], margins=[0.12, 1.0], runner_up=[448, 6])
    sampled = out([343, 5], margins=[-1.78, 1.0], runner_up=[32, 6])
    ok, margin = explained(sampled, ref, 0, TIE)
    assert not ok and margin == -1.78
    near = out([448, 5], margins=[-0.01, 1.0], runner_up=[32, 6])
    assert explained(near, ref, 0, TIE) == (True, -0.01)


def test_unknown_margins_never_explain_a_divergence() -> None:
    ref = GreedyOutput((1, 2, 3))  # the engine gave no log-probabilities
    trial = GreedyOutput((1, 3, 3))
    assert explained(trial, ref, 1, TIE) == (False, None)
    nan = out([1, 2, 3], margins=[1.0, math.nan, 1.0], runner_up=[5, 3, 5])
    assert explained(trial, nan, 1, TIE) == (False, None)


def test_first_divergence_is_the_earliest_token_then_prompt() -> None:
    ref = [out([1, 2, 3, 4]), out([1, 2, 3, 4]), out([1, 2, 3, 4])]
    trial = [out([1, 2, 3, 9]), out([1, 9, 3, 4]), out([1, 9, 9, 9])]
    c = compare_outputs(trial, ref, name="baseline", reference_trial=0, tie_margin=TIE)
    assert c.first is not None and (c.first.prompt, c.first.position) == (1, 1)
    assert c.identical == 0 and len(c.unexplained) == 3


def test_every_trial_is_compared_with_the_baseline_and_the_config_without_speculation() -> None:
    base = [out([1, 2, 3]), out([4, 5, 6])]
    trials = [
        scored(0, 3, base, baseline=True),
        scored(1, 0, base),                            # no speculation, same tokens
        scored(2, 1, [out([1, 2, 3]), out([4, 5, 7])]),  # 7: the runner-up by 3 nats
        scored(3, 2, None),                           # no tokens (a backend without them)
    ]
    checks = check_outputs(trials, TIE)
    assert set(checks) == {0, 1, 2}
    assert [c.reference for c in checks[0].comparisons] == ["no speculation"]
    assert [c.reference for c in checks[1].comparisons] == ["baseline"]
    assert [(c.reference, c.reference_trial) for c in checks[2].comparisons] == [
        ("baseline", 0), ("no speculation", 1)]
    assert not checks[0].flagged and not checks[1].flagged
    assert checks[2].flagged
    stored = checks[2].as_dict()
    assert stored["identical_share"] == 0.5 and stored["prompts"] == 2
    assert stored["first_divergence"] == {"prompt": 1, "position": 2, "explained": False,
                                          "margin": 3.0}
    assert "outputs differ from the baseline beyond the engine's numerics" in stored["reason"]


def test_outputs_survive_the_metrics_json() -> None:
    items = (out([1, 2], margins=[0.5, math.nan], runner_up=[3, -1]), GreedyOutput((7,)))
    back = outputs_from_dict(outputs_as_dict(items))
    assert back[0].tokens == (1, 2) and back[0].runner_up == (3, -1)
    assert back[0].margins[0] == 0.5 and math.isnan(back[0].margins[1])
    assert back[1] == GreedyOutput((7,))


def test_a_baseline_without_speculation_is_compared_once() -> None:
    base = [out([1, 2, 3])]
    checks = check_outputs([scored(0, 0, base, baseline=True), scored(1, 3, base)], TIE)
    assert [c.reference for c in checks[1].comparisons] == ["baseline"]
    assert checks[0].comparisons == () and checks[0].as_dict()["checked"]
