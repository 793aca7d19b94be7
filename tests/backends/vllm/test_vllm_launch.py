"""The server command line, its environment, and reading why a server died."""

from __future__ import annotations

import json
import sys

import pytest

from autotune.backends.vllm._launch import (
    failure_reason,
    port_in_use,
    server_argv,
    server_env,
)
from autotune.types import ServeSpec, TrialConfig

SERVE = ServeSpec(model="org/target", draft_model="org/draft", method="dspark",
                  draft_block_size=8, tensor_parallel_size=8, max_model_len=20000,
                  extra_args=("--trust-remote-code", "--max-num-seqs", "7"),
                  env=(("VLLM_CPU_KVCACHE_SPACE", "1"), ("DO_NOT_TRACK", "0")))


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_argv_carries_serve_section_and_trial_config() -> None:
    argv = server_argv(SERVE, TrialConfig(5, True, 64, 4096), host="127.0.0.1", port=8123,
                       seed=11)
    assert argv[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    assert _flag(argv, "--model") == "org/target"
    assert _flag(argv, "--host") == "127.0.0.1" and _flag(argv, "--port") == "8123"
    assert _flag(argv, "--tensor-parallel-size") == "8"
    assert _flag(argv, "--max-model-len") == "20000"
    assert _flag(argv, "--max-num-batched-tokens") == "4096"
    assert _flag(argv, "--seed") == "11"
    spec = json.loads(_flag(argv, "--speculative-config"))
    assert spec == {"method": "dspark", "model": "org/draft", "num_speculative_tokens": 5,
                    "enable_adaptive_verification": True}
    # extra_args come last, verbatim, so the policy can override a generated flag
    assert argv[-3:] == ["--trust-remote-code", "--max-num-seqs", "7"]
    assert argv.index("--max-num-seqs") < len(argv) - 2


def test_no_drafter_means_no_speculative_config() -> None:
    argv = server_argv(SERVE, TrialConfig(0, False, 8, 2048), host="::1", port=1, seed=0)
    assert "--speculative-config" not in argv
    assert _flag(argv, "--max-num-seqs") == "8"


def test_command_override_and_python_placeholder() -> None:
    serve = ServeSpec(model="m", draft_model=None, method="ngram", draft_block_size=4,
                      command=("{python}", "-m", "vllm.entrypoints.cli.main", "serve"))
    argv = server_argv(serve, TrialConfig(2, False, 1, 64), host="h", port=2, seed=0)
    assert argv[:4] == [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"]
    assert json.loads(_flag(argv, "--speculative-config")) == {
        "method": "ngram", "num_speculative_tokens": 2}


def test_env_defaults_then_policy_env() -> None:
    env = server_env(SERVE, base={"PATH": "/bin"})
    assert env["PATH"] == "/bin"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert env["DO_NOT_TRACK"] == "0"  # the policy wins over the default
    assert env["VLLM_NO_USAGE_STATS"] == "1" and env["PYTHONUNBUFFERED"] == "1"


@pytest.mark.parametrize("tail, code, expected", [
    ("usage: api_server.py [-h]\napi_server.py: error: unrecognized arguments: --bogus 3\n", 2,
     "exit code 2: error: unrecognized arguments: --bogus 3"),
    ("Traceback (most recent call last):\n  File x\nhuggingface_hub.errors.HFValidationError: "
     "Repo id must be in the form 'repo_name'\n", 1,
     "exit code 1: HFValidationError: Repo id must be in the form 'repo_name'"),
    ("INFO loading\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n", 1,
     "exit code 1: OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"),
    ("INFO loading weights\n", -9, "killed by signal 9 (SIGKILL: out of memory?)"),
    ("", -15, "killed by signal 15"),
])
def test_failure_reason(tail: str, code: int, expected: str) -> None:
    assert failure_reason(tail, code) == expected


def test_port_in_use() -> None:
    assert port_in_use("OSError: [Errno 98] Address already in use")
    assert not port_in_use("error: unrecognized arguments")
