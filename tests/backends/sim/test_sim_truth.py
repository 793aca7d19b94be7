"""Hidden acceptance truth, the head's miscalibration, the generator, and the ITL pool."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.backends.sim import LENGTHS, generate_requests
from autotune.backends.sim._profile import load_profile
from autotune.backends.sim._stats import ThinnedPool
from autotune.backends.sim._truth import HeadMap, build_truth, request_keys, sigmoid
from autotune.errors import ConfigError

PROFILE = "kimi-k2.6@8xH200-tp8"


def _truth_of(requests: list, seed: int = 0, block: int = 8):  # type: ignore[no-untyped-def]
    dr = load_profile(PROFILE).drafters["dspark"]
    head_map = HeadMap.build(dr.head, block)
    return build_truth(dr, head_map, block, [r.workload for r in requests],
                       [r.acceptance for r in requests],
                       request_keys([r.id for r in requests], seed))


def test_generator_is_deterministic_and_lazy() -> None:
    a = list(generate_requests(50, workload="gsm8k", seed=4, rate=2.0))
    b = list(generate_requests(50, workload="gsm8k", seed=4, rate=2.0))
    c = list(generate_requests(50, workload="gsm8k", seed=5, rate=2.0))
    assert a == b and a != c
    it = generate_requests(10**9, seed=1)
    assert next(it).id == "chat-1-0"  # lazily: a billion requests are never built


def test_generator_fields() -> None:
    reqs = list(generate_requests(2000, workload="humaneval", seed=2, rate=5.0, block=7))
    arrivals = [r.arrival_s or 0.0 for r in reqs]
    assert arrivals == sorted(arrivals) and reqs[0].arrival_s is not None
    rate = len(reqs) / arrivals[-1]
    assert 4.5 < rate < 5.5
    assert all(r.acceptance is not None and len(r.acceptance) == 7 for r in reqs)
    assert all(0.0 <= c <= 1.0 for r in reqs for c in r.acceptance or ())
    prompts = np.array([r.prompt_tokens for r in reqs])
    assert abs(np.median(prompts) / LENGTHS["humaneval"].prompt_median - 1) < 0.1
    assert all(r.output_tokens >= 1 for r in reqs)
    closed = list(generate_requests(5, seed=2, acceptance=False))
    assert all(r.arrival_s is None and r.acceptance is None for r in closed)


def test_generator_overrides_and_errors() -> None:
    reqs = list(generate_requests(3, prompt_tokens=[5, 6, 7], output_tokens=[1, 2, 3],
                                  arrivals=[0.0, 1.0, 2.5], id_prefix="x"))
    assert [(r.id, r.prompt_tokens, r.output_tokens, r.arrival_s) for r in reqs] == [
        ("x0", 5, 1, 0.0), ("x1", 6, 2, 1.0), ("x2", 7, 3, 2.5)]
    with pytest.raises(ConfigError, match="rate"):
        list(generate_requests(3, rate=0.0))
    with pytest.raises(ConfigError, match="prompt_tokens has 1 values"):
        list(generate_requests(3, prompt_tokens=[5]))
    with pytest.raises(ConfigError, match="unknown sim drafter"):
        list(generate_requests(3, drafter="medusa"))


def test_predictions_are_miscalibrated_not_the_truth() -> None:
    """Raw ECE of the generated predictions against realised acceptance is a few percent."""
    reqs = list(generate_requests(4000, workload="chat", seed=7))
    truth = _truth_of(reqs, seed=7)
    pred = np.array([r.acceptance for r in reqs])
    rng = np.random.default_rng(0)
    z = rng.standard_normal((len(reqs), 64)) * truth.step_sd[:, None]
    # the realised conditional acceptance rate of each request and position, over steps
    real = sigmoid(truth.true[:, :, None] + z[:, None, :]).mean(axis=2)
    assert not np.allclose(pred, np.round(real, 3), atol=0.01)
    bins = np.clip((pred * 10).astype(int), 0, 9).ravel()
    p, r = pred.ravel(), real.ravel()
    ece = sum(abs(p[bins == b].mean() - r[bins == b].mean()) * np.mean(bins == b)
              for b in range(10) if np.any(bins == b))
    assert 0.02 <= ece <= 0.10, ece
    corr = np.corrcoef(p, r)[0, 1]
    assert corr > 0.6  # informative, though miscalibrated


def test_replay_truth_follows_the_prediction() -> None:
    """For a user's sample, higher predictions mean higher truth (monotone hidden map)."""
    from autotune.types import Request

    low = [Request(f"r{i}", 10, 10, workload="chat", acceptance=(0.3,) * 8) for i in range(200)]
    high = [Request(f"r{i}", 10, 10, workload="chat", acceptance=(0.8,) * 8) for i in range(200)]
    tl, th = _truth_of(low), _truth_of(high)
    assert np.all(th.true > tl.true)
    np.testing.assert_allclose(th.head, np.log(0.8 / 0.2), rtol=1e-9)
    assert np.std(tl.true[:, 0]) > 0.1  # the hidden map adds per-request noise


def test_same_request_same_truth_across_chunks_and_trials() -> None:
    reqs = list(generate_requests(30, workload="aime", seed=1, acceptance=False))
    a = _truth_of(reqs, seed=5)
    b = _truth_of(reqs[10:], seed=5)
    np.testing.assert_array_equal(a.true[10:], b.true)
    c = _truth_of(reqs, seed=6)
    assert not np.array_equal(a.true, c.true)


def test_short_predictions_are_extended_along_the_prior() -> None:
    from autotune.types import Request

    req = [Request("a", 10, 10, workload="livecodebench", acceptance=(0.9, 0.8))]
    t = _truth_of(req)
    assert t.head.shape == (1, 8)
    assert np.all(np.diff(t.head[0, 1:]) < 0)  # the livecodebench prior decays


def test_workload_priors_by_name_alias_and_keyword() -> None:
    dr = load_profile(PROFILE).drafters["dspark"]
    assert dr.prior_for("gsm8k")[0] == "gsm8k"
    assert dr.prior_for("LCB")[0] == "livecodebench"
    assert dr.prior_for("team-math-tutor")[0] == "math500"
    assert dr.prior_for(None)[0] == "default"
    assert dr.prior_for("unheard-of")[0] == "default"


def test_thinned_pool_is_uniform_and_bounded() -> None:
    pool = ThinnedPool(1000, np.random.default_rng(0))
    for start in range(0, 100_000, 37):
        pool.extend(np.arange(start, min(start + 37, 100_000), dtype=np.float64))
    out = pool.array()
    assert out.size == 1000 and pool.sampled
    assert len(set(out.tolist())) == 1000
    # uniform over the stream: each decile holds about a tenth
    counts = np.histogram(out, bins=10, range=(0, 100_000))[0]
    assert counts.min() > 60 and counts.max() < 140
    small = ThinnedPool(1000, np.random.default_rng(0))
    small.extend(np.arange(10.0))
    assert small.array().tolist() == list(np.arange(10.0)) and not small.sampled
