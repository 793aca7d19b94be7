"""Replica backends, selected by a string kind from one registry.

``sim`` (the embedded simulator, default) and ``vllm`` (real ``vllm serve`` replicas) register
here. A backend module is imported only when its kind is asked for, so heavy dependencies stay
lazy. Adding a backend is one entry in ``_REGISTRY`` pointing at a factory
``(serve: ServeSpec, options: Mapping[str, Any], seed: int) -> Backend`` (named
``create_<kind>_backend``).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from autotune.backends.base import Backend, GreedyDecoder, Replica, decodes_tokens
from autotune.errors import ConfigError
from autotune.types import ServeSpec

__all__ = ["Backend", "GreedyDecoder", "Replica", "available_backends", "create_backend",
           "decodes_tokens"]

#: kind -> "module:factory" (imported lazily).
_REGISTRY: dict[str, str] = {
    "sim": "autotune.backends.sim:create_sim_backend",
    "vllm": "autotune.backends.vllm:create_vllm_backend",
}


def available_backends() -> list[str]:
    return sorted(_REGISTRY)


def create_backend(
    kind: str, serve: ServeSpec, options: Mapping[str, Any] | None = None, seed: int = 0
) -> Backend:
    """Build the backend registered as ``kind``; unknown kinds list the registered ones."""
    target = _REGISTRY.get(kind)
    if target is None:
        raise ConfigError(
            f"unknown backend {kind!r}; registered backends: {', '.join(available_backends())}"
        )
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    factory = getattr(module, attr)
    backend: Backend = factory(serve, dict(options or {}), seed)
    return backend
