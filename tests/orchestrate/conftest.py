"""One local Ray cluster for the whole session, with logical GPUs declared on a CPU machine,
whose replica processes a test can hold at a moment of their trials (``tests/holds``)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest
from holds import Holds

#: What the session cluster declares: 2 CPUs (the CI machine) and two 8-GPU replicas' worth,
#: of the kind Ray names in a GPU node's resources.
CLUSTER_CPUS = 2
CLUSTER_GPUS = 16
CLUSTER_ACCELERATOR = "H100"


@pytest.fixture(scope="session")
def cluster_holds(tmp_path_factory: pytest.TempPathFactory) -> Holds:
    """The holds every process of the session cluster is started with."""
    return Holds(tmp_path_factory.mktemp("replica-holds"))


@pytest.fixture(scope="session")
def ray_cluster(cluster_holds: Holds) -> Iterator[Any]:
    """``ray.init(num_cpus=2, num_gpus=16)`` (H100s) once; shut down at the end of the
    session. The processes Ray starts inherit this process's environment at ``ray.init``: it
    carries :func:`cluster_holds`'s variables for that call only."""
    import ray

    started = not ray.is_initialized()
    if started:
        saved = dict(os.environ)
        os.environ.update(cluster_holds.env(saved))
        try:
            ray.init(num_cpus=CLUSTER_CPUS, num_gpus=CLUSTER_GPUS,
                     resources={f"accelerator_type:{CLUSTER_ACCELERATOR}": 1.0},
                     include_dashboard=False, logging_level=logging.WARNING)
        finally:
            os.environ.clear()
            os.environ.update(saved)
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture
def replica_holds(ray_cluster: Any, cluster_holds: Holds) -> Iterator[Holds]:
    """Holds on the session cluster's replica processes, cleared after the test."""
    cluster_holds.clear()
    yield cluster_holds
    cluster_holds.clear()
