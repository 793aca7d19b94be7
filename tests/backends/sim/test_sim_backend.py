"""The sim backend's factory, validation at start, provenance and replica lifecycle."""

from __future__ import annotations

import pytest

from autotune.backends import create_backend
from autotune.backends.sim import SIM_VERSION, known_drafters, known_profiles
from autotune.errors import BackendError, ConfigError, TrialFailed
from autotune.types import ReplaySchedule, Request, ServeSpec, TrialConfig

SERVE = ServeSpec(model="moonshotai/Kimi-K2.6", draft_model="novita/kimi-k2.6-dspark",
                  method="dspark", draft_block_size=8)


def test_known_profiles_and_drafters() -> None:
    assert {"kimi-k2.6@8xH200-tp8", "kimi-k2.7-code@8xH200-tp8", "llama-3.1-70b@4xH100-tp4",
            "llama-3.1-70b@4xH100-tp4-table", "llama768x12@vllm-cpu-1thread"} \
        <= set(known_profiles())
    assert known_drafters() == ["dspark", "eagle3", "eagle3-mla", "early-exit", "none"]


def test_unknown_profile_lists_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown sim profile 'h100'.*kimi-k2\.6@8xH200-tp8"):
        create_backend("sim", SERVE, {"profile": "h100"})


def test_unknown_drafter_lists_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown sim drafter 'medusa'.*dspark, eagle3-mla"):
        create_backend("sim", SERVE, {"drafter": "medusa"})


def test_unknown_option_is_rejected() -> None:
    with pytest.raises(ConfigError, match="profil"):
        create_backend("sim", SERVE, {"profil": "kimi-k2.6@8xH200-tp8"})


def test_describe_has_provenance() -> None:
    info = create_backend("sim", SERVE, {"profile": "kimi-k2.7-code@8xH200-tp8",
                                         "drafter": "eagle3-mla"}, seed=4).describe()
    assert info["backend"] == "sim"
    assert info["profile"] == "kimi-k2.7-code@8xH200-tp8"
    assert info["drafter"] == "eagle3-mla"
    assert info["model"] == "moonshotai/Kimi-K2.7-Code"
    assert "H200" in info["hardware"]
    assert info["simulator_version"] == SIM_VERSION


@pytest.mark.parametrize(("options", "config", "reason"), [
    ({}, TrialConfig(9, False, 8, 2048), "exceeds the drafter's block size"),
    ({"drafter": "none"}, TrialConfig(3, False, 8, 2048), "needs a drafter"),
    ({"drafter": "eagle3-mla"}, TrialConfig(3, True, 8, 2048), "DSpark-only"),
    ({}, TrialConfig(3, False, 64, 32), "must be >= max_num_seqs"),
    ({}, TrialConfig(-1, False, 8, 2048), ">= 0"),
])
def test_start_refuses_configs_vllm_would_refuse(options: dict[str, str], config: TrialConfig,
                                                 reason: str) -> None:
    backend = create_backend("sim", SERVE, options)
    with pytest.raises(TrialFailed, match=reason):
        backend.start(config)


def test_max_model_len_beyond_kv_cache_fails_the_trial() -> None:
    serve = ServeSpec(model="m", draft_model=None, method="dspark", draft_block_size=8,
                      max_model_len=5_000_000)
    with pytest.raises(TrialFailed, match="KV cache"):
        create_backend("sim", serve, {}).start(TrialConfig(3, False, 8, 2048))


def test_drafter_none_runs_without_speculation() -> None:
    replica = create_backend("sim", SERVE, {"drafter": "none"}).start(
        TrialConfig(0, False, 8, 2048))
    m = replica.replay(ReplaySchedule([Request("a", 10, 20)], mode="closed"))
    assert m.acceptance is None
    assert m.output_tokens.tolist() == [20]


def test_replay_after_stop_raises() -> None:
    replica = create_backend("sim", SERVE, {}).start(TrialConfig(3, False, 8, 2048))
    replica.stop()
    with pytest.raises(BackendError, match="stopped"):
        replica.replay(ReplaySchedule([Request("a", 10, 20)]))


def test_too_long_requests_are_rejected_like_vllm() -> None:
    serve = ServeSpec(model="m", draft_model=None, method="dspark", draft_block_size=8,
                      max_model_len=1000)
    replica = create_backend("sim", serve, {}).start(TrialConfig(3, False, 8, 2048))
    reqs = [Request("ok", 100, 50), Request("long", 900, 200), Request("ok2", 100, 60)]
    m = replica.replay(ReplaySchedule(reqs, mode="closed", concurrency=2))
    assert m.requests == 3
    assert m.ok.tolist().count(False) == 1
    assert sorted(m.output_tokens[m.ok].tolist()) == [50, 60]
    assert any("max_model_len=1000" in e for e in m.errors)
    assert m.extra["rejected_requests"] == 1
