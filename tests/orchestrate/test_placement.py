"""Replica shapes and the fit check, without a cluster; pool choice and pacing without Ray."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.backends import create_backend
from autotune.errors import ConfigError
from autotune.orchestrate import pacing
from autotune.orchestrate.pacing import PacedBackend, paced
from autotune.orchestrate.placement import (
    NodeResources,
    check_fit,
    replica_shape,
    replicas_fit,
)
from autotune.orchestrate.pool import SerialPool, TrialTask
from autotune.orchestrate.ray_pool import RaySettings, open_pool, uses_ray
from autotune.policy import load_policy
from autotune.traffic.load import load_sample
from autotune.types import ServeSpec, TrialConfig


def _serve(gpus: int = 8) -> ServeSpec:
    return replace(load_policy().serve.spec(), gpus_per_replica=gpus)


def _node(gpus: float, cpus: float, name: str = "n") -> NodeResources:
    return NodeResources(node_id=name, address=name, resources={"GPU": gpus, "CPU": cpus})


def test_vllm_replica_is_one_gpu_bundle_and_sim_one_cpu() -> None:
    assert replica_shape("vllm", _serve(8), 2).bundle() == {"GPU": 8.0, "CPU": 2.0}
    assert replica_shape("sim", _serve(8)).bundle() == {"CPU": 1.0}
    assert replica_shape("vllm", _serve(0)).bundle() == {"CPU": 1.0}


def test_a_sim_replica_told_to_reserve_gpus_takes_a_vllm_replica_s_bundle() -> None:
    for gpus in (8, 4):
        sim = replica_shape("sim", _serve(gpus), sim_reserves_gpus=True)
        assert sim.bundle() == replica_shape("vllm", _serve(gpus)).bundle()
    assert replica_shape("sim", _serve(0), sim_reserves_gpus=True).bundle() == {"CPU": 1.0}
    # two sim replicas would share a node of 2 CPUs; with 8 GPUs each, one per 8-GPU node
    nodes = [_node(8, 2, "a"), _node(8, 2, "b")]
    assert replicas_fit(replica_shape("sim", _serve(8)), nodes) == 4
    assert replicas_fit(replica_shape("sim", _serve(8), sim_reserves_gpus=True), nodes) == 2


def test_a_sim_replica_too_big_for_any_node_names_the_policy_key_to_turn_off() -> None:
    shape = replica_shape("sim", _serve(8), sim_reserves_gpus=True)
    with pytest.raises(ConfigError) as e:
        check_fit(shape, [NodeResources("c", "c", {"CPU": 2.0})], 1)
    msg = str(e.value)
    assert msg.startswith("one sim replica needs 8 GPUs and 1 CPU on a single node (policy "
                          "serve.gpus_per_replica: 8, sim.reserve_gpus: true)")
    assert msg.endswith("or set sim.reserve_gpus: false to simulate without reserving GPUs")


def test_replicas_fit_within_one_node_each() -> None:
    shape = replica_shape("vllm", _serve(8))
    # 12 GPUs on each of two nodes: 24 in total, yet only one 8-GPU replica per node.
    assert replicas_fit(shape, [_node(12, 64, "a"), _node(12, 64, "b")]) == 2
    assert replicas_fit(shape, [_node(16, 64)]) == 2
    assert replicas_fit(shape, [_node(16, 1)]) == 1  # CPUs bound it too
    assert replicas_fit(shape, [_node(4, 64)]) == 0


def test_third_replica_does_not_fit_names_gpus_wanted_and_available() -> None:
    shape = replica_shape("vllm", _serve(8))
    check_fit(shape, [_node(16, 2)], 2)
    with pytest.raises(ConfigError) as e:
        check_fit(shape, [_node(16, 2)], 3)
    msg = str(e.value)
    assert "24 GPUs" in msg and "16 GPUs" in msg and "at most 2" in msg
    assert "--replicas 2" in msg


def test_node_smaller_than_one_replica_says_so() -> None:
    shape = replica_shape("vllm", _serve(8))
    with pytest.raises(ConfigError) as e:
        check_fit(shape, [_node(4, 32, "a"), _node(4, 32, "b")], 1)
    msg = str(e.value)
    assert "8 GPUs" in msg and "no node has that" in msg
    assert "largest node has 4 GPUs" in msg and "8 GPUs and 64 CPUs on 2 nodes" in msg
    assert "serve.gpus_per_replica" in msg
    with pytest.raises(ConfigError, match="0 GPUs"):
        check_fit(shape, [NodeResources("c", "c", {"CPU": 8.0})], 1)


def test_one_sim_replica_without_address_runs_in_process(small_sample: Path) -> None:
    policy = load_policy()
    serve = policy.serve.spec()
    one = RaySettings(kind="sim", serve=serve, replicas=1)
    assert not uses_ray(one)
    assert uses_ray(replace(one, replicas=2))
    assert uses_ray(replace(one, address="auto"))
    assert uses_ray(RaySettings(kind="vllm", serve=serve, replicas=1))  # GPUs come from Ray
    assert not uses_ray(RaySettings(kind="vllm", serve=_serve(0), replicas=1))
    assert uses_ray(replace(one, sim_reserves_gpus=True))  # GPUs come from Ray
    assert not uses_ray(replace(one, serve=_serve(0), sim_reserves_gpus=True))
    backend = create_backend("sim", serve, policy.sim.model_dump(), 0)
    pool = open_pool(replace(one, min_trial_s=0.3), backend)
    assert isinstance(pool, SerialPool)
    sample = load_sample(small_sample)
    schedule = policy.replay.schedule(sample.requests[:30], seed=0)
    t0 = time.monotonic()
    pool.submit(TrialTask("k", TrialConfig(3, False, 32, 8192), schedule))
    result = pool.wait()
    assert result.measurement is not None and result.error is None
    assert time.monotonic() - t0 >= 0.3  # the pacing reached the serial pool's backend


class _Clock:
    """A monotonic clock that moves only when told to or when slept on (records the sleeps)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_pacing_is_one_floor_per_trial_and_keeps_the_measurement(
        small_sample: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = load_policy()
    backend = create_backend("sim", policy.serve.spec(), policy.sim.model_dump(), 0)
    assert paced(backend, 0) is backend
    slow = paced(backend, 1.0)
    assert isinstance(slow, PacedBackend) and slow.kind == "sim"
    assert slow.describe()["paced_min_trial_s"] == 1.0
    schedule = policy.replay.schedule(load_sample(small_sample).requests[:30], seed=1)
    config = TrialConfig(4, False, 32, 8192)
    plain = backend.start(config).replay(schedule)
    clock = _Clock()
    monkeypatch.setattr(pacing, "time", clock)  # the pacing's clock, not the simulator's
    replica = slow.start(config)
    m = replica.replay(schedule)
    clock.now += 0.25  # as if each replay took a quarter of a second
    m2 = replica.replay(schedule)  # several replays in one trial: one floor for the trial
    clock.now += 0.25
    assert clock.sleeps == []  # a replay never waits
    replica.stop()
    assert clock.sleeps == [0.5]  # the rest of the trial's one second
    replica.stop()  # idempotent, no second wait
    assert clock.sleeps == [0.5]
    late = slow.start(config)
    clock.now += 1.5  # a trial longer than the floor
    late.stop()
    assert clock.sleeps == [0.5]
    assert m2.output_tokens.tolist() == m.output_tokens.tolist()
    assert m.output_tokens.tolist() == plain.output_tokens.tolist()
    assert m.e2e_s.tolist() == plain.e2e_s.tolist()
    with pytest.raises(ConfigError):
        PacedBackend(backend, -1)
