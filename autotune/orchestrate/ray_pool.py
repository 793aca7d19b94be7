"""The Ray replica pool: one actor per replica, trials in parallel, trials that survive a dead
replica (docs/ray.md).

:func:`open_pool` picks the pool for a pass: with one ``sim`` replica and no Ray address it is
the in-process :class:`~autotune.orchestrate.pool.SerialPool` and Ray is never imported;
otherwise a :class:`RayPool`. Opening a :class:`RayPool`

1. joins the cluster at ``address`` (or ``$RAY_ADDRESS``, as under ``ray job submit``), or
   starts a local Ray on loopback that :meth:`RayPool.close` shuts down again (nothing
   outlives the pass; :mod:`~autotune.orchestrate.ray_join`);
2. checks that the replicas fit (:func:`~autotune.orchestrate.placement.check_fit`: a clear
   ConfigError naming the GPUs wanted and available, at once, instead of a hang);
3. reserves one STRICT_PACK placement group per replica and starts one
   :class:`ReplicaWorker` actor in each (named ``autotune-XXXXXXXX-replica-I`` and
   ``autotune-XXXXXXXX-ray-I``: ``ray list actors`` shows which replica is which). The
   worker builds its backend inside the actor with ``create_backend(kind, serve, options,
   seed)``; for GPU replicas ``CUDA_VISIBLE_DEVICES`` is set to the GPUs Ray assigned to the
   actor.

Dispatch keeps at most one trial per replica, preferring an idle replica whose server already
serves the trial's config (each actor keeps its last server running,
:mod:`~autotune.orchestrate.servers`, so a config several workloads read starts once);
``wait`` returns whichever finishes first (``ray.wait``). When a replica's actor dies
mid-trial (killed, OOM, node lost: any Ray error other than an exception raised by the trial
itself), its trial is queued again, preferring another replica, up to ``max_retries`` times,
then returned failed with the reason and its ``attempts``. The dead replica is replaced by a
fresh actor in the same placement group, or drained (removed with its placement group) after
``drain_after`` deaths; the pass goes on with the others. When every replica is drained,
outstanding trials fail and ``capacity`` raises BackendError.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import time
import uuid
from collections import deque
from collections.abc import Hashable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from typing import Any

from autotune.backends import Backend, create_backend
from autotune.errors import AutotuneError, BackendError
from autotune.orchestrate.moments import announce_moment
from autotune.orchestrate.pacing import paced
from autotune.orchestrate.placement import (
    NodeResources,
    ReplicaShape,
    accelerator_kinds,
    check_fit,
    live_nodes,
    release,
    replica_shape,
    replicas_fit,
    reserve,
)
from autotune.orchestrate.pool import Pool, SerialPool, TrialResult, TrialTask, run_trial
from autotune.orchestrate.processes import process_running
from autotune.orchestrate.ray_join import connect, import_ray, local_cores
from autotune.orchestrate.servers import Servers
from autotune.orchestrate.signals import signals_held
from autotune.types import Progress, ServeSpec

__all__ = ["RayPool", "RaySettings", "ReplicaWorker", "cluster_to_join", "open_pool", "uses_ray"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RaySettings:
    """How a pass runs its replicas.

    ``replicas`` None means the default: for replicas that reserve GPUs as many as the
    cluster holds, else the local core count for ``sim`` and ``1`` for ``vllm`` with
    ``serve.gpus_per_replica`` 0. ``sim_reserves_gpus`` (policy ``sim.reserve_gpus``) gives each
    ``sim`` replica the GPUs of a ``vllm`` one. ``address`` None: join ``$RAY_ADDRESS`` if set,
    else start a local Ray for the pass. ``min_trial_s`` paces every trial to take at least
    that long (tests and benchmarks of the simulator).
    """

    kind: str
    serve: ServeSpec
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    replicas: int | None = None
    address: str | None = None
    cpus_per_replica: float = 1.0
    sim_reserves_gpus: bool = False
    max_retries: int = 2
    drain_after: int = 2
    ready_timeout_s: float = 120.0
    min_trial_s: float = 0.0


def _shape(s: RaySettings) -> ReplicaShape:
    return replica_shape(s.kind, s.serve, s.cpus_per_replica, s.sim_reserves_gpus)


def _replicas_without_cluster(s: RaySettings) -> int | None:
    """The replica count known before asking a cluster (None: as many as it holds)."""
    if s.replicas is not None:
        return s.replicas
    if _shape(s).gpus > 0:
        return None
    return local_cores() if s.kind == "sim" else 1


def uses_ray(s: RaySettings) -> bool:
    """False when the pass runs in this process: one CPU-only replica and no Ray address."""
    cpu_only = _shape(s).gpus == 0
    return not (s.address is None and cpu_only and _replicas_without_cluster(s) == 1)


def cluster_to_join(s: RaySettings) -> tuple[str, str] | None:
    """The cluster a pass with these settings joins, as (address, where it was given:
    ``--ray-address`` or ``$RAY_ADDRESS``); None when it starts a local Ray or runs without
    Ray (``$RAY_ADDRESS`` is read only by a pass that runs on Ray, as :func:`connect` does)."""
    if s.address:
        return s.address, "--ray-address"
    env = os.environ.get("RAY_ADDRESS")
    if env and uses_ray(s):
        return env, "$RAY_ADDRESS"
    return None


def open_pool(s: RaySettings, backend: Backend, progress: Progress | None = None) -> Pool:
    """The pool a pass runs on: a SerialPool on ``backend`` when Ray is not needed (see
    :func:`uses_ray`), else a :class:`RayPool` (whose actors build their own backends)."""
    if not uses_ray(s):
        return SerialPool(paced(backend, s.min_trial_s), progress=progress,
                          reuse=s.min_trial_s == 0)
    return RayPool.open(s)


def _short(e: BaseException | str, limit: int = 300) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _death_reason(e: BaseException) -> str:
    """A short why from a Ray actor error: its first sentence and the cause sentence, if any."""
    text = " ".join(str(e).split())
    first = text.split(". ", 1)[0].rstrip(".")
    cause = ""
    at = text.find("The actor is dead because")
    if at >= 0:
        cause = text[at:].split(". ", 1)[0].rstrip(".")
    return _short(f"{type(e).__name__}: {first}" + (f"; {cause}" if cause else ""))


def _start_failure(e: BaseException) -> str:
    """Why a replica actor did not start: a node whose Python lacks autotune (the actors import
    it by name) said so with the fix, anything else as Ray said it."""
    text = " ".join(str(e).split())
    if "No module named 'autotune'" not in text:
        return f"a replica actor failed to start: {_short(text, 1000)}"
    ip = re.search(r"\bip=([^,\s)]+)", text)
    node = f" on the node at {ip.group(1)}" if ip else ""
    return (f"a replica actor failed to start{node}: the Python that runs Ray there cannot "
            "import autotune (ModuleNotFoundError). Fix: install autotune, the driver's "
            "version, on every node of the cluster (pip install 'autotune[vllm]', or the "
            "project's image; docs/ray.md, What each node needs)")


def _with_gpus(serve: ServeSpec, gpu_ids: list[str]) -> ServeSpec:
    env = tuple((k, v) for k, v in serve.env if k != "CUDA_VISIBLE_DEVICES")
    return replace(serve, env=(*env, ("CUDA_VISIBLE_DEVICES", ",".join(gpu_ids))))


class ReplicaWorker:
    """The body of one replica actor: a backend built in the actor, one trial at a time.

    Not used directly: :class:`RayPool` wraps it with ``ray.remote``. The constructor runs in the
    actor's process, so the GPUs it sees are the ones Ray assigned to this replica.
    """

    def __init__(self, replica_id: str, kind: str, serve: ServeSpec, options: Mapping[str, Any],
                 seed: int, min_trial_s: float) -> None:
        ray = import_ray()
        gpu_ids = [str(g) for g in ray.get_gpu_ids()]
        if gpu_ids:
            serve = _with_gpus(serve, gpu_ids)
        backend = paced(create_backend(kind, serve, dict(options), seed), min_trial_s)
        self._servers = Servers(backend, reuse=min_trial_s == 0)
        self._info: dict[str, Any] = {
            "replica": replica_id,
            "node": socket.gethostname(),
            "node_ip": ray.util.get_node_ip_address(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "gpu_ids": gpu_ids,
            "cuda_visible_devices": dict(serve.env).get("CUDA_VISIBLE_DEVICES"),
        }

    def info(self) -> dict[str, Any]:
        """Where this replica runs: replica id, node, node_ip, node_id, pid, gpu_ids and the
        CUDA_VISIBLE_DEVICES its backend's servers get."""
        return dict(self._info)

    def run(self, task: TrialTask) -> TrialResult:
        """Run one trial; expected failures come back as a failed TrialResult."""
        t0 = time.monotonic()
        replica, node = self._info["replica"], self._info["node"]
        try:
            m = run_trial(self._servers, task.config, task.schedule)
        except AutotuneError as e:
            log.warning("trial %s failed on %s: %s", task.key, replica, e)
            return TrialResult(task.key, None, error=str(e), replica=replica, node=node,
                               seconds=time.monotonic() - t0)
        return TrialResult(task.key, m, replica=replica, node=node,
                           seconds=time.monotonic() - t0,
                           start_source=self._servers.last_source)

    def close(self) -> None:
        """Stop the server this replica kept running."""
        self._servers.close()


@dataclass(eq=False)
class _Slot:
    """One placement group and the actor currently serving in it."""

    index: int
    group: Any
    actor: Any = None
    info: dict[str, Any] = field(default_factory=dict)
    generation: int = 0
    deaths: int = 0
    busy: Hashable | None = None
    serving: Any = None  # the config of the server its actor kept running (None: none)

    @property
    def id(self) -> str:
        return f"ray-{self.index}" + (f".{self.generation}" if self.generation else "")

    @property
    def node(self) -> str | None:
        node = self.info.get("node")
        return str(node) if node is not None else None


@dataclass(eq=False)
class _Pending:
    task: TrialTask
    attempts: int = 0
    avoid: set[int] = field(default_factory=set)


class RayPool:
    """Trials on Ray replica actors; build it with :meth:`open` (see the module docstring)."""

    def __init__(self, settings: RaySettings, shape: ReplicaShape, groups: list[Any],
                 owns_ray: bool, nodes: Sequence[NodeResources] = (),
                 name: str = "autotune", joined: bool = False) -> None:
        self.settings = settings
        self.joined = joined  # an existing cluster: its replicas may run on other machines
        self.name = name  # of its placement groups and actors: NAME-replica-I, NAME-ray-I
        self.shape = shape
        self.owns_ray = owns_ray
        self._nodes = list(nodes)  # the cluster's live nodes when the pool opened
        self._slots = [_Slot(i, g) for i, g in enumerate(groups)]
        self._queue: deque[_Pending] = deque()
        self._inflight: dict[Any, tuple[_Slot, _Pending]] = {}
        self._failed: deque[TrialResult] = deque()
        self._drained: list[str] = []
        self._remote_cls: Any = None
        self._closed = False

    # ---------------------------------------------------------------------- lifecycle
    @classmethod
    def open(cls, s: RaySettings) -> RayPool:
        """Join or start Ray, check the fit, reserve the replicas and start their actors."""
        ray = import_ray()
        shape = _shape(s)
        wanted = _replicas_without_cluster(s)
        owns = not ray.is_initialized()
        joined = owns and bool(s.address or os.environ.get("RAY_ADDRESS"))
        groups: list[Any] = []
        pool: RayPool | None = None
        name = f"autotune-{uuid.uuid4().hex[:8]}"
        try:
            if owns:
                with signals_held():
                    connect(s.address, (wanted or 1) * shape.cpus)
                    announce_moment("pool-starting")
            nodes = live_nodes()
            if wanted is None:
                wanted = max(1, replicas_fit(shape, nodes))
            check_fit(shape, nodes, wanted)
            groups = reserve(shape, wanted, s.ready_timeout_s, name=name)
            pool = cls(s, shape, groups, owns, nodes, name, joined)
            pool._start()
        except BaseException:
            if pool is not None:
                pool.close()
            else:
                release(groups)
                if owns:
                    with signals_held():
                        ray.shutdown()
            raise
        log.info("Ray pool: %d %s replicas (%s each) on %s", len(pool._slots), s.kind,
                 shape.describe(), sorted({sl.node or "?" for sl in pool._slots}))
        return pool

    def _start(self) -> None:
        ray = import_ray()
        self._remote_cls = ray.remote(ReplicaWorker)
        for slot in self._slots:
            self._spawn(slot)
        refs = [slot.actor.info.remote() for slot in self._slots]
        try:
            infos = ray.get(refs, timeout=self.settings.ready_timeout_s)
        except ray.exceptions.GetTimeoutError as e:
            raise BackendError(
                f"{len(refs)} replica actors did not start within "
                f"{self.settings.ready_timeout_s:g} s; check that autotune is installed on "
                "every node (see docs/ray.md) and `ray status`") from e
        except ray.exceptions.RayError as e:
            raise BackendError(_start_failure(e)) from e
        for slot, info in zip(self._slots, infos, strict=True):
            slot.info = info

    def _spawn(self, slot: _Slot) -> None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        s = self.settings
        strategy = PlacementGroupSchedulingStrategy(placement_group=slot.group,
                                                    placement_group_bundle_index=0)
        slot.info = {}
        slot.actor = self._remote_cls.options(
            name=f"{self.name}-{slot.id}", num_cpus=self.shape.cpus, num_gpus=self.shape.gpus,
            max_restarts=0, max_task_retries=0, scheduling_strategy=strategy,
        ).remote(slot.id, s.kind, s.serve, dict(s.backend_options), s.seed, s.min_trial_s)

    def close(self) -> None:
        """Kill the actors, free their placement groups, shut down a Ray this pool started or
        disconnect from the cluster it joined."""
        if self._closed:
            return
        self._closed = True
        ray = import_ray()
        with signals_held():
            announce_moment("pool-stopping")
            self._stop_servers(ray)
            if self.owns_ray and not self.joined:
                # Stopping the Ray this pool started ends its actors and placement groups with
                # it, without a call to its GCS, which a signal to the whole process group
                # (`timeout`, systemd) has already stopped: such a call would hang for a minute.
                local = [int(sl.info["pid"]) for sl in self._slots if sl.info.get("pid")]
                if ray.is_initialized():
                    ray.shutdown()
                _reap(local)
            else:  # the cluster outlives the pool: free what it holds, then disconnect
                # the handles are held until the kills are sent, so that no actor is first
                # freed by its last reference going away instead
                handles = [slot.actor for slot in self._slots]
                for slot in self._slots:
                    self._kill(slot)
                release([slot.group for slot in self._slots])
                if self.owns_ray and ray.is_initialized():
                    ray.shutdown()
                del handles
        self._slots = []
        self._queue.clear()
        self._inflight.clear()
        announce_moment("recommending")

    def _stop_servers(self, ray: Any) -> None:
        """Ask every live actor to stop the server it kept (best effort: an actor that does
        not answer is killed next, and its servers die with it)."""
        with suppress(Exception):  # dead actor, gone cluster: killing it frees the rest
            refs = [slot.actor.close.remote() for slot in self._slots
                    if slot.actor is not None and slot.busy is None]
            if refs:
                ray.get(refs, timeout=self.settings.ready_timeout_s)

    # ---------------------------------------------------------------------- the Pool API
    def gpu_kind(self) -> str | None:
        """The accelerator kind Ray reports for the nodes the replicas run on
        (``accelerator_type:<kind>``); None for replicas without GPUs, for simulated ones (the
        simulator's profile is their hardware, whatever GPUs they hold), or when their nodes
        report none or several kinds."""
        if self.shape.gpus <= 0 or self.settings.kind == "sim":
            return None
        ids = {sl.info.get("node_id") for sl in self._slots}
        kinds = accelerator_kinds([n for n in self._nodes if n.node_id in ids])
        return next(iter(kinds)) if len(kinds) == 1 else None

    @property
    def capacity(self) -> int:
        if self._slots:
            return len(self._slots)
        if self._inflight or self._queue or self._failed:
            return 0  # let the driver collect what is outstanding first
        why = "; ".join(self._drained[-3:])
        raise BackendError(
            f"every replica of the pool was drained after repeated failures ({why}); check the "
            "cluster (`ray status`, the nodes' logs) and start the pass again")

    def submit(self, task: TrialTask) -> None:
        if self._closed:
            raise BackendError("submit() on a closed Ray pool")
        self._queue.append(_Pending(task))
        self._dispatch()

    def wait(self) -> TrialResult:
        ray = import_ray()
        announce_moment("trial")
        while True:
            if self._failed:
                return self._failed.popleft()
            if not self._slots and self._queue:
                self._fail_queued()
                continue
            if not self._inflight:
                if self._queue:
                    self._dispatch()
                if not self._inflight:
                    raise BackendError("wait() called with no trial submitted")
            ready, _ = ray.wait(list(self._inflight), num_returns=1)
            ref = ready[0]
            slot, pending = self._inflight.pop(ref)
            slot.busy = None
            try:
                result: TrialResult = ray.get(ref)
            except ray.exceptions.RayTaskError:
                raise  # the trial itself raised something unexpected: a bug, keep its traceback
            except ray.exceptions.RayError as e:
                failed = self._replica_died(slot, pending, e)
                self._dispatch()
                if failed is not None:
                    return failed
                continue
            if result.measurement is None:
                slot.serving = None  # a failed trial's server was stopped
            self._dispatch()
            return replace(result, attempts=pending.attempts)

    # ---------------------------------------------------------------------- inspection
    def replicas(self) -> list[dict[str, Any]]:
        """A snapshot of the live replicas: info plus slot, busy trial key and deaths."""
        return [{**slot.info, "replica": slot.id, "slot": slot.index, "busy": slot.busy,
                 "deaths": slot.deaths} for slot in self._slots]

    @property
    def drained(self) -> list[str]:
        """Why each drained replica was removed, in order."""
        return list(self._drained)

    # ---------------------------------------------------------------------- internals
    def _dispatch(self) -> None:
        idle = [slot for slot in self._slots if slot.busy is None]
        if not idle or not self._queue:
            return
        live = {slot.index for slot in self._slots}
        held: deque[_Pending] = deque()
        while self._queue and idle:
            p = self._queue.popleft()
            preferred = sorted((slot for slot in idle if slot.index not in p.avoid),
                               key=lambda sl: sl.serving != p.task.config)  # its server first
            if preferred:
                slot = preferred[0]
            elif live <= p.avoid:
                slot = idle[0]  # every live replica failed it once: any will do
            else:
                held.append(p)  # wait for a replica it has not died on
                continue
            idle.remove(slot)
            p.attempts += 1
            slot.busy = p.task.key
            slot.serving = p.task.config  # the actor's server serves it after this trial
            self._inflight[slot.actor.run.remote(p.task)] = (slot, p)
        self._queue.extendleft(reversed(held))

    def _replica_died(self, slot: _Slot, p: _Pending, e: BaseException) -> TrialResult | None:
        s = self.settings
        replica, node = slot.id, slot.node
        reason = (f"replica {replica} on {node or 'an unknown node'} died during trial "
                  f"{p.task.key} ({_death_reason(e)})")
        log.warning("%s", reason)
        slot.deaths += 1
        slot.serving = None
        self._kill(slot)
        if slot.deaths >= s.drain_after:
            self._drain(slot, f"{replica} died {slot.deaths} times")
        else:
            self._replace(slot)
        if p.attempts <= s.max_retries:
            p.avoid.add(slot.index)
            self._queue.appendleft(p)
            log.warning("retrying trial %s (attempt %d of %d)", p.task.key, p.attempts + 1,
                        s.max_retries + 1)
            return None
        return TrialResult(p.task.key, None, replica=replica, node=node, attempts=p.attempts,
                           error=(f"{reason}; gave up after {p.attempts} attempt"
                                  f"{'s' if p.attempts != 1 else ''} (policy "
                                  f"budget.max_retries={s.max_retries})"))

    def _replace(self, slot: _Slot) -> None:
        ray = import_ray()
        slot.generation += 1
        try:
            self._spawn(slot)
            slot.info = ray.get(slot.actor.info.remote(), timeout=self.settings.ready_timeout_s)
        except ray.exceptions.RayError as e:
            self._kill(slot)
            self._drain(slot, f"{slot.id} could not be restarted ({_short(e)})")
            return
        log.warning("replica slot %d restarted as %s on %s", slot.index, slot.id, slot.node)

    def _drain(self, slot: _Slot, why: str) -> None:
        log.warning("draining replica slot %d: %s; %d replicas left", slot.index, why,
                    len(self._slots) - 1)
        self._drained.append(why)
        release([slot.group])
        self._slots.remove(slot)

    def _fail_queued(self) -> None:
        why = "; ".join(self._drained[-3:]) or "no replica"
        while self._queue:
            p = self._queue.popleft()
            self._failed.append(TrialResult(
                p.task.key, None, attempts=p.attempts,
                error=f"no replica left to run this trial: every replica was drained ({why})"))

    @staticmethod
    def _kill(slot: _Slot) -> None:
        if slot.actor is None:
            return
        try:
            import_ray().kill(slot.actor, no_restart=True)
        except Exception as e:  # already dead or the cluster is gone: nothing to free
            log.debug("killing %s: %s", slot.id, e)
        slot.actor = None


def _reap(pids: list[int], timeout_s: float = 5.0) -> None:
    """Wait for the local actor processes of a stopped Ray to exit; SIGKILL the stragglers.

    After ``ray.shutdown`` the workers notice their raylet is gone and exit on their own,
    usually within a second; one blocked in a trial may not."""
    deadline = time.monotonic() + timeout_s
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [p for p in left if process_running(p)]
        if left:
            time.sleep(0.05)
    for pid in left:
        log.warning("replica process %d outlived Ray's shutdown; killing it", pid)
        with suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
