"""How the driver connects to Ray: it joins an existing cluster, or starts a local Ray that
listens on loopback only (docs/ray.md).

Joining (``--ray-address`` or ``$RAY_ADDRESS``) first checks the cluster with
:func:`check_cluster`, which the CLI also calls before anything is written:

1. ``auto`` is resolved as Ray resolves it (``$RAY_ADDRESS``, then the cluster ``ray start``
   recorded on this machine);
2. something must accept a TCP connection at the address (else one line naming the flag and
   the value, at once, instead of Ray's 40 s of retries);
3. the authentication token is read the way Ray's own clients read it (``$RAY_AUTH_TOKEN``,
   else the file ``$RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``) and token
   authentication is turned on when one is found and ``RAY_AUTH_MODE`` is unset, as
   ``ray.init(address="auto")`` does (Ray does not do it for an explicit address, so a
   cluster started with Ray's default token authentication refused autotune);
4. one call to the cluster's GCS with that token: a refused or missing token is one line
   naming where the token was looked for and the fix. Ray's C++ client writes its retries to
   the process's stderr (file descriptor 2) directly; they are kept out of the output during
   the check and logged at debug level.

A local Ray (``ray.init(address="local")``: never a cluster ``ray start`` left running on the
machine) is started with Ray's single-machine mode, in which the node's address is
127.0.0.1, so that its GCS, raylet, agents and workers listen on loopback only (Ray binds its
servers to the node's address), with token authentication on (Ray's default) and no
dashboard.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from autotune.errors import BackendError, ConfigError, DependencyError

__all__ = ["check_cluster", "connect", "import_ray", "local_cores", "token_source"]

log = logging.getLogger(__name__)

#: Ray's C++ core installs a crash handler for SIGTERM too, in this driver when it connects:
#: it prints a stack trace and aborts the process, skipping autotune's clean stop. Ray reads
#: this variable when it is imported; it is set for that import only, so the replica
#: processes Ray starts keep their crash handler.
_RAY_NO_SIGNAL_HANDLER = "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"

#: Milliseconds the driver waits, on shutdown, to flush task events to the GCS (Ray: 5000).
_RAY_FLUSH_TIMEOUT = "RAY_task_events_shutdown_flush_timeout_ms"

#: "0": Ray's single-machine mode (its default on macOS and Windows): the node's address is
#: 127.0.0.1 and Ray's servers bind to it. Read by Ray at import and by the processes it starts.
_RAY_CLUSTER_MODE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"

_RAY_TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"

#: Seconds to wait for a TCP connection to the address before calling it unreachable.
_CONNECT_TIMEOUT_S = 5.0


def import_ray() -> Any:
    """``import ray`` without Ray's crash handler for SIGTERM in this process."""
    fresh = "ray" not in sys.modules and _RAY_NO_SIGNAL_HANDLER not in os.environ
    if fresh:
        os.environ[_RAY_NO_SIGNAL_HANDLER] = "1"
    try:
        import ray
    except ImportError as e:
        raise DependencyError.missing("ray", "ray", "Running replicas on Ray") from e
    finally:
        if fresh:
            os.environ.pop(_RAY_NO_SIGNAL_HANDLER, None)
    return ray


def local_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)


def _drop_token_notice(record: logging.LogRecord) -> bool:
    """False for Ray's "Token authentication is enabled for this Ray cluster" notice."""
    return not record.getMessage().startswith("Token authentication is enabled for this Ray")


def _quiet_token_notice() -> None:
    """Ray warns that token authentication is on each time it turns it on (docs/ray.md says
    it once); the filter is added once."""
    logger = logging.getLogger(_RAY_TOKEN_LOGGER)
    if _drop_token_notice not in logger.filters:
        logger.addFilter(_drop_token_notice)


def token_source() -> str:
    """Where Ray's clients take the authentication token from, in Ray's order: the variable
    ``$RAY_AUTH_TOKEN``, else the file named by ``$RAY_AUTH_TOKEN_PATH``, else
    ``$HOME/.ray/auth_token``."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "$RAY_AUTH_TOKEN"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path:
        return f"{path} ($RAY_AUTH_TOKEN_PATH)"
    return str(Path.home() / ".ray" / "auth_token")


def _token_found() -> bool:
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return True
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    try:
        return bool(path.read_text().strip())
    except OSError:
        return False


def _use_token_like_ray_clients(where: str) -> None:
    """Turn token authentication on for this process when a token is found and
    ``RAY_AUTH_MODE`` is unset, as Ray does for ``ray.init(address="auto")``."""
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path and not os.environ.get("RAY_AUTH_TOKEN") and not _token_found():
        raise ConfigError(
            f"cannot join the Ray cluster at {where}: $RAY_AUTH_TOKEN_PATH names {path}, "
            "which is missing or empty. Fix: put the cluster's token there (`ray "
            "get-auth-token` on the head node prints it), or unset RAY_AUTH_TOKEN_PATH")
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token authentication
        return
    _quiet_token_notice()
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def _describe(address: str, source: str) -> str:
    return f"{address} ({source})" if source == "$RAY_ADDRESS" else f"{source} {address}"


def _resolve(address: str, source: str) -> str:
    """``auto`` as Ray resolves it; any other address unchanged."""
    if address != "auto":
        return address
    ray = import_ray()
    try:
        found = ray._private.services.canonicalize_bootstrap_address("auto")
    except ConnectionError as e:
        raise ConfigError(
            f"{source} auto: no Ray cluster runs on this machine (Ray found none started by "
            "`ray start`). Fix: start it with `ray start --head`, or pass the head node's "
            "HOST:PORT") from e
    if not found:
        raise ConfigError(f"{source} auto: no Ray cluster runs on this machine. Fix: start it "
                          "with `ray start --head`, or pass the head node's HOST:PORT")
    return str(found)


def _reachable(address: str, label: str, source: str) -> None:
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), _CONNECT_TIMEOUT_S):
            pass
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e) or "timed out"
        raise ConfigError(
            f"{label}: nothing answers there ({why.lower()}). Fix: pass the address of the "
            "cluster's head node (its GCS port, 6379 unless `ray start --head --port` said "
            "otherwise; `ray status` on the head node works when it is up), or "
            f"{'unset RAY_ADDRESS' if source == '$RAY_ADDRESS' else 'leave out --ray-address'}"
            " to run a local Ray") from e


@contextmanager
def _stderr_to_log() -> Iterator[None]:
    """Send file descriptor 2 (where Ray's C++ code writes) to a file while the block runs,
    then log what was written at debug level."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode(errors="replace").strip()
            if text:
                log.debug("Ray's output while checking the cluster:\n%s", text)


def _token_refused(where: str) -> ConfigError:
    mode = os.environ.get("RAY_AUTH_MODE", "").lower()
    source = token_source()
    given = "the cluster's token (`ray get-auth-token` on the head node prints it)"
    if os.environ.get("RAY_AUTH_TOKEN"):
        fix = f"set RAY_AUTH_TOKEN to {given}"
    elif os.environ.get("RAY_AUTH_TOKEN_PATH"):
        fix = f"put {given} in {os.environ['RAY_AUTH_TOKEN_PATH']}"
    else:
        fix = f"copy {given} to {source} on this machine, or set RAY_AUTH_TOKEN to it"
    if mode == "token" and _token_found():
        return ConfigError(f"cannot join the Ray cluster at {where}: it refused the "
                           f"authentication token read from {source}. Fix: {fix}")
    if mode and mode != "token":
        return ConfigError(f"cannot join the Ray cluster at {where}: it requires an "
                           f"authentication token, and RAY_AUTH_MODE={mode} here sends none. "
                           f"Fix: unset RAY_AUTH_MODE and {fix}")
    if mode != "token" and _token_found():  # a Ray that does not turn tokens on by itself
        return ConfigError(f"cannot join the Ray cluster at {where}: it requires an "
                           f"authentication token, and this Ray sends the one in {source} "
                           "only with RAY_AUTH_MODE=token. Fix: set RAY_AUTH_MODE=token")
    return ConfigError(f"cannot join the Ray cluster at {where}: it requires an authentication "
                       "token and none was found ($RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH and "
                       f"{source} are unset or empty). Fix: {fix}")


def _check_gcs(address: str, where: str) -> None:
    """One call to the cluster's GCS with this process's token (if any)."""
    ray = import_ray()
    refused = getattr(ray.exceptions, "AuthenticationError", None)  # None: Ray without tokens
    try:
        with _stderr_to_log():
            ray._raylet.GcsClient(address=address)
    except Exception as e:
        if refused is None or not isinstance(e, refused):
            raise _not_a_gcs(where, e) from e
        raise _token_refused(where) from e


def _not_a_gcs(where: str, e: Exception) -> ConfigError:
    return ConfigError(
        f"cannot join the Ray cluster at {where}: the port answers but not as a Ray cluster's "
        f"GCS ({' '.join(str(e).split())[:200]}). Fix: pass the head node's GCS address "
        "(HOST:6379 unless `ray start --head --port` said otherwise)")


def check_cluster(address: str, source: str = "--ray-address") -> str:
    """Check that a Ray cluster answers at ``address`` and accepts this machine's token;
    return the address to pass to ``ray.init``. Raises ConfigError naming ``source`` (the flag
    or ``$RAY_ADDRESS``) and the value. Turns token authentication on for this process when
    a token is found (see the module docstring)."""
    resolved = _resolve(address, source)
    where = _describe(address if resolved == address else f"{address} = {resolved}", source)
    _reachable(resolved, where, source)
    if resolved.startswith("ray://"):
        return resolved  # Ray Client: its server checks the connection itself
    _use_token_like_ray_clients(where)
    _check_gcs(resolved, where)
    return resolved


@contextmanager
def _loopback_node(ray: Any) -> Iterator[None]:
    """Ray's single-machine mode while a local Ray starts: node address 127.0.0.1 for this
    driver (Ray read the variable when it was imported: its constant is set too) and for the
    processes it starts (they inherit the variable)."""
    constants = ray._private.ray_constants
    saved_env = os.environ.get(_RAY_CLUSTER_MODE)
    saved_flag = getattr(constants, "ENABLE_RAY_CLUSTER", True)
    os.environ[_RAY_CLUSTER_MODE] = "0"
    constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = saved_flag
        if saved_env is None:
            os.environ.pop(_RAY_CLUSTER_MODE, None)
        else:
            os.environ[_RAY_CLUSTER_MODE] = saved_env


def connect(address: str | None, cpus_needed: float) -> None:
    """``ray.init``: join ``address`` or ``$RAY_ADDRESS`` (checked by :func:`check_cluster`),
    else start a local Ray on loopback with at least ``cpus_needed`` CPUs."""
    ray = import_ray()
    # On shutdown the driver flushes its task events to the GCS for up to 5 s; after a signal
    # to the whole process group the GCS is gone and the stop would wait for nothing.
    os.environ.setdefault(_RAY_FLUSH_TIMEOUT, "1000")
    joining = address or os.environ.get("RAY_ADDRESS")
    if joining:
        resolved = check_cluster(joining, "--ray-address" if address else "$RAY_ADDRESS")
        try:
            ray.init(address=resolved, logging_level=logging.WARNING)
        except Exception as e:
            raise BackendError(
                f"cannot join the Ray cluster at {joining}: {' '.join(str(e).split())[:300]}. "
                "Fix: check `ray status` on the head node; the driver needs the same Ray and "
                "Python versions as the cluster") from e
        return
    # Ray turns token authentication on for a new local cluster and warns that it did on
    # every start: keep it on, without the warning (docs/ray.md says so once).
    _quiet_token_notice()
    try:
        with _loopback_node(ray):
            ray.init(address="local", num_cpus=max(local_cores(), math.ceil(cpus_needed)),
                     include_dashboard=False, logging_level=logging.WARNING)
    except Exception as e:  # ray.init raises a bare Exception when a local node times out
        raise BackendError(
            f"cannot start a local Ray: {' '.join(str(e).split())[:300].rstrip('.')}. Fix: "
            "retry when the machine is less loaded (a local Ray's processes must start within "
            "Ray's timeout), or pass --replicas 1 to run the pass in this process without "
            "Ray") from e
