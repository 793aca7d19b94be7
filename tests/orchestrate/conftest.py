"""One local Ray cluster for the whole session, with logical GPUs declared on a CPU machine."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

#: What the session cluster declares: 2 CPUs (the CI machine) and two 8-GPU replicas' worth,
#: of the kind Ray names in a GPU node's resources.
CLUSTER_CPUS = 2
CLUSTER_GPUS = 16
CLUSTER_ACCELERATOR = "H100"


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """``ray.init(num_cpus=2, num_gpus=16)`` (H100s) once; shut down at the end of the
    session."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=CLUSTER_CPUS, num_gpus=CLUSTER_GPUS,
                 resources={f"accelerator_type:{CLUSTER_ACCELERATOR}": 1.0},
                 include_dashboard=False, logging_level=logging.WARNING)
    yield ray
    if started:
        ray.shutdown()
