"""Monotonicity properties of the simulator (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.backends import create_backend
from autotune.types import Measurement, ReplaySchedule, Request, ServeSpec, TrialConfig

SERVE = ServeSpec(model="moonshotai/Kimi-K2.6", draft_model="novita/kimi-k2.6-dspark",
                  method="dspark", draft_block_size=8)
PROFILES = ["kimi-k2.6@8xH200-tp8", "kimi-k2.7-code@8xH200-tp8"]

probs = st.floats(min_value=0.02, max_value=0.98)


def _one(profile: str, drafter: str, n: int, request: Request, seed: int) -> Measurement:
    replica = create_backend("sim", SERVE, {"profile": profile, "drafter": drafter},
                             seed=seed).start(TrialConfig(n, False, 1, 8192))
    return replica.replay(ReplaySchedule([request], mode="closed", seed=seed))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(profile=st.sampled_from(PROFILES), drafter=st.sampled_from(["dspark", "eagle3-mla"]),
       n=st.integers(1, 8), prompt=st.integers(1, 3000), output=st.integers(1, 600),
       base=st.lists(probs, min_size=8, max_size=8),
       lift=st.lists(st.floats(min_value=0.0, max_value=0.5), min_size=8, max_size=8),
       seed=st.integers(0, 2**16))
def test_more_acceptance_never_slows_a_request_at_batch_1(
        profile: str, drafter: str, n: int, prompt: int, output: int, base: list[float],
        lift: list[float], seed: int) -> None:
    low = tuple(base)
    high = tuple(min(0.99, b + lift_k * (1 - b)) for b, lift_k in zip(base, lift, strict=True))
    lo = _one(profile, drafter, n, Request("q", prompt, output, acceptance=low), seed)
    hi = _one(profile, drafter, n, Request("q", prompt, output, acceptance=high), seed)
    assert hi.extra["steps"] <= lo.extra["steps"]
    # the KV-read term grows with the context a faster request reaches sooner: tiny slack
    assert hi.e2e_s[0] <= lo.e2e_s[0] * (1 + 1e-3)
    assert hi.output_tokens[0] == lo.output_tokens[0] == output


@settings(max_examples=60, deadline=None, derandomize=True)
@given(profile=st.sampled_from(PROFILES), drafter=st.sampled_from(["dspark", "eagle3-mla"]),
       n1=st.integers(0, 7), extra=st.integers(1, 8), prompt=st.integers(1, 3000),
       output=st.integers(1, 600), seed=st.integers(0, 2**16))
def test_wider_windows_never_help_when_acceptance_is_zero(
        profile: str, drafter: str, n1: int, extra: int, prompt: int, output: int,
        seed: int) -> None:
    n2 = min(8, n1 + extra)
    req = Request("z", prompt, output, acceptance=(0.0,) * 8)
    narrow = _one(profile, drafter, n1, req, seed)
    wide = _one(profile, drafter, n2, req, seed)
    assert wide.e2e_s[0] >= narrow.e2e_s[0]
    if wide.acceptance is not None:
        assert wide.acceptance.accepted == 0
