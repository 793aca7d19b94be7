"""The ``vllm`` backend's options (the mapping given to ``create_backend("vllm", ...)``).

A pydantic model like the policy (``extra="forbid"``): an unknown key is an error that lists
the known ones, a bad value an error naming the option, the value and what is expected.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from autotune.errors import ConfigError
from autotune.redact import RedactingFilter, redact_text, redact_url

__all__ = ["EndpointAccess", "VllmOptions", "normalise_endpoint", "parse_options",
           "quiet_request_urls"]

_REQUEST_URLS = RedactingFilter()


def quiet_request_urls() -> None:
    """httpx logs each request's URL (at INFO), query included: filter the credentials of an
    endpoint's query out of its log records, in every process that builds a client."""
    logger = logging.getLogger("httpx")
    if _REQUEST_URLS not in logger.filters:
        logger.addFilter(_REQUEST_URLS)


@dataclass(frozen=True)
class EndpointAccess:
    """A server URL split where it enters the client: ``url`` carries no credential (what
    requests are built on and messages name), ``auth`` (basic auth, from the URL's
    ``user:password@``) and ``params`` (its query, e.g. ``api_key``) go with every request the
    client sends, and only there (``autotune.redact``)."""

    url: str
    auth: tuple[str, str] | None = None
    params: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, endpoint: str) -> EndpointAccess:
        parts = urlsplit(endpoint)
        host = parts.hostname or ""
        netloc = (f"[{host}]" if ":" in host else host) + (
            f":{parts.port}" if parts.port is not None else "")
        auth = ((unquote(parts.username or ""), unquote(parts.password or ""))
                if "@" in parts.netloc else None)
        params = tuple(parse_qsl(parts.query, keep_blank_values=True))
        return cls(urlunsplit((parts.scheme, netloc, parts.path, "", "")), auth, params)

    def __repr__(self) -> str:  # never the credentials, whoever prints it
        return f"EndpointAccess({self.url!r}, auth={'***' if self.auth else None})"


def normalise_endpoint(value: str) -> str:
    """An attach-mode server URL without a trailing ``/v1`` (or ``/``) and fragment; raises
    ValueError saying what is expected (never repeating the URL: it may hold credentials)."""
    parts = urlsplit(value.strip())
    expected = "expected an http(s) URL of a vLLM OpenAI server, e.g. http://127.0.0.1:8000"
    try:
        parts.port  # noqa: B018 (raises for a port that is not a number)
    except ValueError:
        raise ValueError(f"its port is not a number; {expected}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(expected)
    path = parts.path.rstrip("/").removesuffix("/v1")
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


class VllmOptions(BaseModel):
    """How the backend launches, reaches and stops servers.

    ``endpoint`` switches to attach mode: the server at that URL is measured as it is (it is
    never restarted or stopped, so a trial's config is not applied to it). Otherwise every trial
    launches its own server on ``host`` and a free port, logs to ``log_dir`` (default: a fresh
    temporary directory per backend), waits ``startup_timeout_s`` for ``/health``, and on stop
    sends SIGTERM to its process group and SIGKILL after ``stop_grace_s``. A request that takes
    longer than ``request_timeout_s`` fails. ``metrics`` turns the ``/metrics`` scrape off.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str | None = Field(
        default=None, description="URL of an already running vLLM server (attach mode), e.g. "
                                  "http://10.0.0.5:8000")
    startup_timeout_s: float = Field(default=1800.0,
                                     description="seconds to wait for /health after launch")
    request_timeout_s: float = Field(
        default=600.0, description="seconds one request may take before it counts as failed")
    log_dir: Path | None = Field(default=None, description="directory for server logs")
    host: str = Field(default="127.0.0.1",
                      description="address servers bind to (default 127.0.0.1)")
    stop_grace_s: float = Field(
        default=30.0, description="seconds between SIGTERM and SIGKILL when stopping a server")
    health_interval_s: float = Field(
        default=0.5, description="seconds between /health polls during startup")
    metrics: bool = Field(
        default=True,
        description="scrape /metrics for speculative-decoding acceptance (true/false)")
    port_retries: int = Field(
        default=2, ge=0, strict=True,
        description="relaunches on a new port when the chosen one was taken meanwhile")
    unfaithful_windows: tuple[int, ...] = Field(
        default=(),
        description="test only: trials whose num_speculative_tokens is listed sample "
                    "(temperature 1) in the output check instead of decoding greedily, a "
                    "stand-in for a drafter path that changes outputs (docs/outputs.md)")

    @property
    def attach(self) -> bool:
        return self.endpoint is not None

    def access(self) -> EndpointAccess | None:
        """The endpoint split into its URL and the credentials the client sends, or None."""
        return EndpointAccess.of(self.endpoint) if self.endpoint is not None else None

    def shown_endpoint(self) -> str | None:
        """The endpoint as records and messages show it (credentials as ``***``)."""
        return redact_url(self.endpoint) if self.endpoint is not None else None

    def __repr_args__(self) -> Any:  # pydantic's repr: never the endpoint's credentials
        for key, value in super().__repr_args__():
            yield key, (self.shown_endpoint() if key == "endpoint" else value)

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        return normalise_endpoint(value) if value is not None else None

    @field_validator("startup_timeout_s", "request_timeout_s", "stop_grace_s",
                     "health_interval_s")
    @classmethod
    def _seconds(cls, value: float) -> float:
        if not math.isfinite(value) or value <= 0:
            raise ValueError("must be a positive number of seconds")
        return value

    @field_validator("log_dir")
    @classmethod
    def _expand(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("give an address, e.g. 127.0.0.1")
        return value.strip()


def parse_options(options: Mapping[str, Any]) -> VllmOptions:
    """Validate ``options`` (None values mean "the default"); errors are
    :class:`ConfigError` naming the option and the value."""
    given = {k: v for k, v in options.items() if v is not None}
    try:
        return VllmOptions.model_validate(given)
    except ValidationError as e:
        fields = VllmOptions.model_fields
        problems = []
        for err in e.errors():
            key = str(err["loc"][0]) if err["loc"] else "?"
            if err["type"] == "extra_forbidden":
                listing = "; ".join(f"{k}: {f.description}" for k, f in sorted(fields.items()))
                problems.append(f"unknown vllm backend option {key}; known options: {listing}")
            else:
                msg = str(err["msg"]).removeprefix("Value error, ")
                problems.append(f"vllm backend option {key}={given.get(key)!r}: {msg}")
        raise ConfigError(redact_text("; ".join(problems))) from None
