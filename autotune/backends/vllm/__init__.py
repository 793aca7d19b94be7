"""The real-server backend: vLLM OpenAI servers launched per trial, or attached.

``create_vllm_backend(serve, options, seed)`` builds a :class:`VllmBackend` (registered as kind
``vllm``).
Options (all optional; see ``docs/vllm-backend.md``): ``endpoint`` (attach mode),
``startup_timeout_s``, ``request_timeout_s``, ``log_dir``, ``host``, ``stop_grace_s``,
``health_interval_s``, ``metrics``, ``port_retries``.

No server outlives its owner: a replica stops its server on ``stop()``; every launched server
is also listed until stopped, and :func:`stop_all_servers` / :func:`reap_servers_on_signals`
stop whatever is left when the program exits or is interrupted. httpx and prometheus-client
(the ``[vllm]`` extra) are imported only when a backend starts or scrapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.backends.vllm._backend import VllmBackend, VllmReplica
from autotune.backends.vllm._options import VllmOptions, normalise_endpoint, parse_options
from autotune.backends.vllm._process import reap_servers_on_signals, stop_all_servers
from autotune.backends.vllm._prompts import SyntheticPromptWarning
from autotune.types import ServeSpec

__all__ = [
    "SyntheticPromptWarning",
    "VllmBackend",
    "VllmOptions",
    "VllmReplica",
    "create_vllm_backend",
    "normalise_endpoint",
    "reap_servers_on_signals",
    "stop_all_servers",
]


def create_vllm_backend(serve: ServeSpec, options: Mapping[str, Any],
                        seed: int = 0) -> VllmBackend:
    """The ``vllm`` backend for ``serve`` with validated ``options`` (ConfigError if invalid)."""
    return VllmBackend(serve, parse_options(options), seed)
