"""The backend's attach mode end to end against the scripted server (no vLLM needed):
health and model discovery, replay, acceptance from /metrics deltas, and failures."""

from __future__ import annotations

import logging
import threading

import pytest
from fake_openai import K, running_fake

from autotune.backends import Replica, create_backend
from autotune.backends.vllm import SyntheticPromptWarning
from autotune.errors import BackendError, TrialFailed
from autotune.types import ReplaySchedule, Request, ServeSpec, TrialConfig

SERVE = ServeSpec(model="ignored", draft_model=None, method="ngram", draft_block_size=4)
CONFIG = TrialConfig(2, False, 4, 512)


def _requests(n: int, script: str = "gap=0.01") -> list[Request]:
    return [Request(id=f"a{i}", prompt_tokens=5, output_tokens=6, prompt=script,
                    arrival_s=0.02 * i) for i in range(n)]


def test_attach_replays_and_measures_acceptance(caplog: pytest.LogCaptureFixture) -> None:
    with running_fake(accepted=1) as fake:
        backend = create_backend("vllm", SERVE, {"endpoint": fake.url + "/v1/"}, seed=0)
        with caplog.at_level(logging.WARNING):
            replica = backend.start(CONFIG)
        assert "only what that server was started with" in caplog.text
        assert isinstance(replica, Replica) and replica.config == CONFIG
        try:
            m = replica.replay(ReplaySchedule(_requests(5), warmup_requests=1))
        finally:
            replica.stop()
        replica.stop()
        assert m.requests == 4 and m.ok.all() and (m.output_tokens == 6).all()
        assert {b["model"] for _, b in fake.arrivals} == {"fake-model"}
        acc = m.acceptance
        assert acc is not None
        # the fake counts one K-token draft with 1 accepted per chunk after the first: 5 x 5
        assert (acc.drafts, acc.draft_tokens, acc.accepted) == (25, 25 * K, 25)
        assert acc.per_position == (1.0, 0.0)
        assert backend.describe()["vllm_version"] == "0.0.fake"
        with pytest.raises(BackendError, match="was stopped"):
            replica.replay(ReplaySchedule(_requests(1)))


def test_synthetic_prompts_use_the_servers_tokenizer() -> None:
    with running_fake() as fake:
        replica = create_backend("vllm", SERVE, {"endpoint": fake.url}, seed=0).start(CONFIG)
        reqs = [Request(id="s", prompt_tokens=9, output_tokens=2, arrival_s=0.0)]
        try:
            with pytest.warns(SyntheticPromptWarning, match="1 of 1 requests"):
                m = replica.replay(ReplaySchedule(reqs))
        finally:
            replica.stop()
        prompt = fake.arrivals[0][1]["prompt"]
        assert len(prompt) == 9 and set(prompt) <= {11, 12, 13, 14, 15}
        assert m.extra["synthetic_prompt_requests"] == 1.0


def test_metrics_off_means_no_acceptance() -> None:
    with running_fake() as fake:
        replica = create_backend("vllm", SERVE, {"endpoint": fake.url, "metrics": False}
                                 ).start(CONFIG)
        try:
            m = replica.replay(ReplaySchedule(_requests(2)))
        finally:
            replica.stop()
        assert m.acceptance is None and m.ok.all()


def test_unreachable_endpoint_is_a_failed_trial() -> None:
    with running_fake() as fake:
        url = fake.url
    backend = create_backend("vllm", SERVE, {"endpoint": url}, seed=0)
    with pytest.raises(TrialFailed, match="cannot reach the attached vLLM server"):
        backend.start(CONFIG)


def test_server_gone_mid_replay_is_a_failed_trial() -> None:
    with running_fake() as fake:
        replica = create_backend("vllm", SERVE, {"endpoint": fake.url, "metrics": False,
                                                 "request_timeout_s": 5}).start(CONFIG)
        # the server goes away after the attach and before the replay sends anything
        threading.Thread(target=fake.shutdown, daemon=True).start()
        fake.server_close()
        try:
            with pytest.raises(TrialFailed, match="stopped answering"):
                replica.replay(ReplaySchedule(_requests(3)))
        finally:
            replica.stop()
