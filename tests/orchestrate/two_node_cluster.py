"""A two-node local Ray cluster in its own process, for the tests that join a cluster.

``python two_node_cluster.py`` starts ``ray.cluster_utils.Cluster`` with two nodes of 2 CPUs and
8 logical GPUs each (room for two 1-CPU replicas a node, for one 8-GPU replica), with the
environment it was given (the tests give it token authentication, a token under ``$HOME/.ray``
and its own ``$RAY_TMPDIR``), connects to it as a driver and prints one JSON line:
``{"address": ..., "nodes": [node ids]}``. Then, for each line read on stdin:

- ``state``: one JSON line with the cluster's placement groups, actors, the resources each
  actor required (from the GCS actor table), jobs (drivers), and total and available
  resources;
- ``vllm-pool``: opens a ``vllm`` :class:`~autotune.orchestrate.ray_pool.RayPool` of the
  default policy (8 GPUs a replica) on the cluster, prints its replicas as one JSON line, and
  closes it.

End of input shuts the cluster down.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any


def _state(ray: Any) -> dict[str, Any]:
    from ray._private import state

    return {"placement_groups": ray.util.placement_group_table(),
            "actors": state.actors(), "actor_resources": _actor_resources(state),
            "jobs": state.jobs(),
            "total": ray.cluster_resources(), "available": ray.available_resources()}


def _actor_resources(state: Any) -> dict[str, dict[str, Any]]:
    """Actor id -> ``required`` (resource -> amount, as Ray names the resources of a placement
    group's bundle), read off the GCS actor table, which ``state.actors()`` leaves out."""
    from ray.core.generated import gcs_pb2

    out = {}
    for raw in state.state._connect_and_get_accessor().get_actor_table(None, None):
        a = gcs_pb2.ActorTableData.FromString(raw)
        out[a.actor_id.hex()] = {"required": dict(a.required_resources)}
    return out


def _vllm_pool() -> list[dict[str, Any]]:
    from autotune.orchestrate.ray_pool import RayPool, RaySettings
    from autotune.policy import load_policy

    pool = RayPool.open(RaySettings(kind="vllm", serve=load_policy().serve.spec(),
                                    ready_timeout_s=60))
    try:
        return pool.replicas()
    finally:
        pool.close()


def main() -> None:
    import ray
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 2, "num_gpus": 8}
    cluster = Cluster(initialize_head=True, head_node_args=node)
    try:
        cluster.add_node(**node)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level=logging.WARNING)
        nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        print(json.dumps({"address": cluster.address, "nodes": nodes}), flush=True)
        for line in sys.stdin:
            command = line.strip()
            if command == "state":
                print(json.dumps(_state(ray), default=str), flush=True)
            elif command == "vllm-pool":
                print(json.dumps(_vllm_pool(), default=str), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
