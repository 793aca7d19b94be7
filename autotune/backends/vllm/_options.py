"""The ``vllm`` backend's options (the mapping given to ``create_backend("vllm", ...)``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from autotune.errors import ConfigError

__all__ = ["VllmOptions", "parse_options"]


@dataclass(frozen=True, slots=True)
class VllmOptions:
    """How the backend launches, reaches and stops servers.

    ``endpoint`` switches to attach mode: the server at that URL is measured as it is (it is never
    restarted or stopped, so a trial's config is not applied to it). Otherwise every trial
    launches its own server on ``host`` and a free port, logs to ``log_dir`` (default: a fresh
    temporary directory per backend), waits ``startup_timeout_s`` for ``/health``, and on stop
    sends SIGTERM to its process group and SIGKILL after ``stop_grace_s``. A request that takes
    longer than ``request_timeout_s`` fails. ``metrics`` turns the ``/metrics`` scrape off.
    """

    endpoint: str | None = None
    startup_timeout_s: float = 1800.0
    request_timeout_s: float = 600.0
    log_dir: Path | None = None
    host: str = "127.0.0.1"
    stop_grace_s: float = 30.0
    health_interval_s: float = 0.5
    metrics: bool = True
    port_retries: int = 2

    @property
    def attach(self) -> bool:
        return self.endpoint is not None


_DOCS = {
    "endpoint": "URL of an already running vLLM server (attach mode), e.g. http://10.0.0.5:8000",
    "startup_timeout_s": "seconds to wait for /health after launch",
    "request_timeout_s": "seconds one request may take before it counts as failed",
    "log_dir": "directory for server logs",
    "host": "address servers bind to (default 127.0.0.1)",
    "stop_grace_s": "seconds between SIGTERM and SIGKILL when stopping a server",
    "health_interval_s": "seconds between /health polls during startup",
    "metrics": "scrape /metrics for speculative-decoding acceptance (true/false)",
    "port_retries": "relaunches on a new port when the chosen one was taken meanwhile",
}


def _positive(name: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"vllm backend option {name}={value!r}: expected a number of seconds, "
                          f"e.g. {name}=60") from e
    if not math.isfinite(number) or number <= 0:
        raise ConfigError(f"vllm backend option {name}={value!r}: must be a positive number of "
                          "seconds")
    return number


def _endpoint(value: Any) -> str:
    text = str(value).strip().rstrip("/")
    if text.endswith("/v1"):
        text = text[: -len("/v1")]
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"vllm backend option endpoint={value!r}: expected an http(s) URL of a "
                          "vLLM OpenAI server, e.g. http://127.0.0.1:8000")
    return text


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"vllm backend option {name}={value!r}: expected true or false")


def parse_options(options: Mapping[str, Any]) -> VllmOptions:
    """Validate ``options``; unknown keys raise :class:`ConfigError` listing the known ones."""
    known = {f.name for f in fields(VllmOptions)}
    unknown = sorted(set(options) - known)
    if unknown:
        listing = "; ".join(f"{k}: {_DOCS[k]}" for k in sorted(known))
        raise ConfigError(f"unknown vllm backend option(s) {', '.join(unknown)}; "
                          f"known options: {listing}")
    values: dict[str, Any] = {}
    for key, value in options.items():
        if value is None:
            continue
        if key == "endpoint":
            values[key] = _endpoint(value)
        elif key in ("startup_timeout_s", "request_timeout_s", "stop_grace_s",
                     "health_interval_s"):
            values[key] = _positive(key, value)
        elif key == "log_dir":
            values[key] = Path(value).expanduser()
        elif key == "host":
            host = str(value).strip()
            if not host:
                raise ConfigError("vllm backend option host='': give an address, e.g. 127.0.0.1")
            values[key] = host
        elif key == "metrics":
            values[key] = _bool(key, value)
        elif key == "port_retries":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"vllm backend option port_retries={value!r}: expected an "
                                  "integer >= 0")
            values[key] = value
    return VllmOptions(**values)
