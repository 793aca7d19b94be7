"""Feasibility: a best config that cannot serve the sample's own rate within the SLO is said
out loud, with the bound it misses and what would fix it."""

from __future__ import annotations

from typing import Any

from autotune.objective import Outcome
from autotune.policy import Policy, policy_from_mapping
from autotune.recommend import Scored, judge_feasibility
from autotune.types import TrialConfig

BEST = TrialConfig(7, False, 1, 16384)


def policy(**replay: Any) -> Policy:
    return policy_from_mapping({
        "name": "t", "serve": {"model": "m", "draft_model": "d"},
        "space": {"num_speculative_tokens": [3, 7], "max_num_seqs": [1, 8],
                  "max_num_batched_tokens": [8192, 16384]},
        "objective": {"slo": {"ttft_p99_ms": 3000, "itl_p99_ms": 60}},
        "replay": replay})


def scored(summary: dict[str, Any], feasible: bool = True) -> Scored:
    constraints = {"ttft_p99_ms": -1.0 if feasible else 5.0, "failed_requests": 0.0}
    return Scored(3, BEST, Outcome(0.075, constraints, summary))


def test_capacity_below_the_sample_rate_is_infeasible_and_says_why() -> None:
    best = scored({"load_scale": 0.03125, "capacity_met_slo": 1.0,
                   "target_ttft_p99_ms": 45210.0, "target_itl_p99_ms": 38.0,
                   "target_failed_requests": 0.0})
    verdict = judge_feasibility(policy(), best)
    assert not verdict.feasible
    assert verdict.capacity == 0.03125 and verdict.replicas_needed == 32
    text = verdict.reason
    assert "reaches capacity 0.0312× the sample's rate (needs 1×)" in text
    assert "p99 TTFT 45,210 ms > 3,000 ms" in text and "ITL" not in text.split("feasible")[1]
    assert "32 replicas at this capacity each" in text
    assert "an SLO of p99 TTFT ≤ 45,210 ms" in text
    # the best config uses the largest max_num_batched_tokens of the space, not max_num_seqs
    assert "widen space.max_num_batched_tokens above 16384" in text
    assert "max_num_seqs above" not in text


def test_a_replica_that_fell_behind_at_the_sample_rate_says_so() -> None:
    # its p99s at the sample's rate are within bounds: the queue grew over the sample instead
    best = scored({"load_scale": 0.52, "capacity_met_slo": 1.0,
                   "target_ttft_p99_ms": 2400.0, "target_itl_p99_ms": 42.0,
                   "target_failed_requests": 0.0, "target_kept_up": 0.476})
    verdict = judge_feasibility(policy(), best)
    assert not verdict.feasible and verdict.replicas_needed == 2
    assert "fell behind the arrivals, keeping up with at most 48% of the rate" in verdict.reason
    assert "p99s over the bounds" not in verdict.reason and "an SLO of" not in verdict.reason


def test_capacity_at_the_sample_rate_is_feasible() -> None:
    best = scored({"load_scale": 1.41, "capacity_met_slo": 1.0})
    verdict = judge_feasibility(policy(), best)
    assert verdict.feasible and verdict.reason == "" and verdict.capacity == 1.41


def test_the_target_is_the_policys_time_scale() -> None:
    best = scored({"load_scale": 1.41, "capacity_met_slo": 1.0,
                   "target_ttft_p99_ms": 2000.0, "target_itl_p99_ms": 75.0})
    verdict = judge_feasibility(policy(time_scale=2.0), best)
    assert not verdict.feasible and verdict.target == 2.0
    assert "needs 2×" in verdict.reason and "p99 ITL 75 ms > 60 ms" in verdict.reason
    assert verdict.replicas_needed == 2


def test_no_rate_meeting_the_slo_says_so() -> None:
    best = scored({"load_scale": 0.015625, "capacity_met_slo": 0.0,
                   "target_ttft_p99_ms": 90000.0, "target_itl_p99_ms": 30.0,
                   "target_failed_requests": 3.0}, feasible=False)
    verdict = judge_feasibility(policy(), best)
    assert not verdict.feasible and verdict.replicas_needed is None
    assert "meets the SLO at no rate down to 0.0156× the sample's" in verdict.reason
    assert "3 request(s) failed" in verdict.reason


def test_a_window_too_short_for_the_lifetimes_says_the_capacity_is_unread() -> None:
    # One CPU core: requests live ~83 s, and at 1/64 of the rate a reading's window held 3
    # requests arriving over 33 s. Its p99s are within the bounds and it kept up: the SLO is
    # not shown out of reach, the window is too short to read a rate.
    summary = {"load_scale": 0.015625, "capacity_met_slo": 0.0, "capacity_sustained": 0.0,
               "kept_up": 1.0, "e2e_p50_ms": 83100.0, "duration_s": 105.7,
               "capacity_window_s": 32.9, "target_ttft_p99_ms": 90000.0,
               "target_itl_p99_ms": 30.0}
    verdict = judge_feasibility(policy(), scored(summary))
    assert not verdict.feasible and verdict.replicas_needed is None
    text = verdict.reason
    assert text.startswith("infeasible: best config n=7 seqs=1 tok=16384 meets the SLO at no "
                           "sustained rate down to 0.0156× the sample's")
    assert "its requests live 83.1 s" in text and "spanned 32.9 s of arrivals" in text
    assert "set replay.window_s to 333 s or more" in text  # 4 lifetimes
    # the drain, when longer than the median E2E, is the lifetime
    drained = judge_feasibility(policy(), scored({**summary, "duration_s": 232.9})).reason
    assert "its requests live 200 s" in drained and "to 800 s or more" in drained
    # a reading that missed a bound, failed requests or fell behind is not a window's fault
    for other in (scored(summary, feasible=False), scored({**summary, "kept_up": 0.5}),
                  scored({**summary, "capacity_sustained": 1.0})):
        assert "replay.window_s" not in judge_feasibility(policy(), other).reason


def test_an_itl_tail_missed_even_at_the_slowest_rate_asks_for_shorter_steps() -> None:
    # the Azure code trace: long prompts' prefill chunks stretch steps even on an idle replica
    best = scored({"load_scale": 0.015625, "capacity_met_slo": 0.0, "itl_p99_ms": 105.0,
                   "ttft_p99_ms": 311.0, "target_ttft_p99_ms": 4900.0,
                   "target_itl_p99_ms": 237.0}, feasible=False)
    text = judge_feasibility(policy(), best).reason
    assert "p99 ITL misses (105 ms) even at the slowest rate tried" in text
    assert "smaller max_num_batched_tokens" in text
    assert "widen" not in text  # a bigger token budget makes the steps longer, not shorter


def test_closed_loop_feasibility_is_the_slo_at_the_concurrency() -> None:
    ok = scored({"ttft_p99_ms": 100.0, "itl_p99_ms": 20.0})
    assert judge_feasibility(policy(mode="closed", concurrency=8), ok).feasible
    bad = scored({"ttft_p99_ms": 100.0, "itl_p99_ms": 80.0}, feasible=False)
    verdict = judge_feasibility(policy(mode="closed", concurrency=8), bad)
    assert not verdict.feasible
    assert "at concurrency 8" in verdict.reason and "p99 ITL 80 ms > 60 ms" in verdict.reason
    assert "an SLO of p99 ITL ≤ 80 ms" in verdict.reason
