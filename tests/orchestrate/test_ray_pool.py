"""The Ray replica pool on the session's local cluster (2 CPUs, 16 logical GPUs).

A replica is killed while it is held at the ``replaying`` moment of a trial (``tests/holds``),
so it dies in the middle of that trial whatever the machine's speed.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from holds import Holds

from autotune.errors import BackendError, ConfigError
from autotune.orchestrate import Reporter, TuneOptions, tune
from autotune.orchestrate.placement import NodeResources, accelerator_kinds
from autotune.orchestrate.pool import TrialTask
from autotune.orchestrate.ray_pool import RayPool, RaySettings
from autotune.policy import Policy, load_policy
from autotune.search import Suggestion
from autotune.store import Store
from autotune.traffic.load import load_sample
from autotune.types import ReplaySchedule, TrialConfig

pytestmark = pytest.mark.ray


def _sim_settings(policy: Policy, **kw: Any) -> RaySettings:
    base = RaySettings(kind="sim", serve=policy.serve.spec(),
                       backend_options=policy.sim.model_dump(), ready_timeout_s=60)
    return replace(base, **kw)


def _schedule(policy: Policy, sample: Path, n: int = 30) -> ReplaySchedule:
    return policy.replay.schedule(load_sample(sample).requests[:n], seed=0)


def _replica_of(pool: RayPool, pid: int) -> dict[str, Any]:
    """The live replica whose actor runs as process ``pid`` (its id, busy trial key, ...)."""
    (replica,) = [r for r in pool.replicas() if r["pid"] == pid]
    return replica


def _kill_held(pool: RayPool, holds: Holds) -> dict[str, Any]:
    """Wait until a replica of ``pool`` is held, SIGKILL its process; the replica it was."""
    held = holds.wait(timeout_s=120)
    victim = _replica_of(pool, held.pid)
    os.kill(held.pid, signal.SIGKILL)
    return victim


def test_accelerator_kinds_are_read_off_ray_s_node_resources() -> None:
    def node(i: int, **resources: float) -> NodeResources:
        return NodeResources(f"n{i}", "10.0.0.1", {"CPU": 8.0, **resources})

    h100 = node(0, GPU=8.0, **{"accelerator_type:H100": 1.0})
    mi300 = node(1, GPU=8.0, **{"accelerator_type:AMD-Instinct-MI300X-OAM": 1.0})
    assert accelerator_kinds([h100]) == {"H100"}
    assert accelerator_kinds([h100, mi300]) == {"H100", "AMD-Instinct-MI300X-OAM"}
    assert accelerator_kinds([node(2)]) == set()


def test_vllm_replicas_packed_one_per_gpu_bundle(ray_cluster: Any) -> None:
    policy = load_policy()  # serve.gpus_per_replica: 8
    settings = RaySettings(kind="vllm", serve=policy.serve.spec(), ready_timeout_s=60)
    pool = RayPool.open(settings)  # default: as many as the cluster holds
    try:
        replicas = pool.replicas()
        assert len(replicas) == pool.capacity == 2
        gpu_sets = [set(r["gpu_ids"]) for r in replicas]
        assert all(len(g) == 8 for g in gpu_sets)
        assert not gpu_sets[0] & gpu_sets[1]  # each replica has its own 8 GPUs
        for r in replicas:  # the vLLM servers it launches see exactly those GPUs
            assert set(r["cuda_visible_devices"].split(",")) == set(r["gpu_ids"])
        # the kind Ray reports for their node is what a guided search takes as the hardware
        assert pool.gpu_kind() == "H100"

        groups = set(ray_cluster.util.placement_group_table())
        with pytest.raises(ConfigError) as e:
            RayPool.open(replace(settings, replicas=3))
        # refused before reserving anything (not after waiting for GPUs that cannot come)
        assert set(ray_cluster.util.placement_group_table()) == groups
        msg = str(e.value)
        assert "24 GPUs" in msg and "16 GPUs" in msg and "at most 2" in msg

        # The GPUs exist but both replicas hold them: a fourth waits, then says what is free.
        with pytest.raises(BackendError, match="only 0 GPUs and 0 CPUs are free"):
            RayPool.open(replace(settings, replicas=1, ready_timeout_s=2))

        with pytest.raises(ConfigError, match="no node has that"):
            RayPool.open(replace(settings, serve=replace(settings.serve,
                                                         gpus_per_replica=32)))
    finally:
        pool.close()
    assert ray_cluster.is_initialized()  # the pool did not own the session's Ray


def test_sim_replicas_told_to_reserve_gpus_hold_them_but_simulate_their_profile(
        ray_cluster: Any) -> None:
    pool = RayPool.open(_sim_settings(load_policy(), sim_reserves_gpus=True))
    try:
        gpu_sets = [set(r["gpu_ids"]) for r in pool.replicas()]
        assert len(gpu_sets) == 2  # as many 8-GPU replicas as the 16 GPUs hold
        assert all(len(g) == 8 for g in gpu_sets) and not gpu_sets[0] & gpu_sets[1]
        assert pool.gpu_kind() is None  # the H100s are held, not what the search assumes
    finally:
        pool.close()


@pytest.mark.slow
def test_two_sim_replicas_share_one_run(ray_cluster: Any, small_sample: Path,
                                        db_url: str, tmp_path: Path) -> None:
    policy = load_policy(overrides={"budget.trials": 4, "search.strategy": "grid"})
    store = Store.open(db_url)
    options = TuneOptions(traffic=small_sample, policy=policy, workloads=["code"],
                          replicas=2, export_dir=tmp_path / "exports")
    result = tune(options, store)  # the default pool: Ray, joining the running cluster
    assert result.status == "finished"
    trials = store.trials(result.run_id)
    assert len(trials) == 4
    assert all(t.state == "complete" for t in trials)
    assert {t.replica for t in trials} == {"ray-0", "ray-1"}
    assert all(t.node for t in trials)
    assert ray_cluster.is_initialized()


class _KillOnce(Reporter):
    """Kills the process of the first replica held at ``replaying`` (from a thread, while the
    pass goes on) and records each trial's error."""

    def __init__(self, holds: Holds) -> None:
        self.holds = holds
        self.killed: dict[str, Any] = {}
        self.failure: BaseException | None = None
        self.errors: list[str | None] = []

    def watch(self, pool: RayPool) -> None:
        threading.Thread(target=self._kill, args=(pool,), daemon=True).start()

    def _kill(self, pool: RayPool) -> None:
        try:
            self.killed.update(_kill_held(pool, self.holds))
        except BaseException as e:  # said by the test, not lost in this thread
            self.failure = e

    def trial_finished(self, workload: str, s: Suggestion, outcome: object,
                       error: str | None) -> None:
        self.errors.append(error)


@pytest.mark.slow
def test_killed_replica_trial_is_retried_and_run_completes(
        ray_cluster: Any, replica_holds: Holds, small_sample: Path, db_url: str,
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    policy = load_policy(overrides={"budget.trials": 4, "budget.max_retries": 2,
                                    "search.strategy": "grid"})
    reporter = _KillOnce(replica_holds)
    replica_holds.hold_at("replaying")

    def make_pool(backend: object, rep: Reporter) -> RayPool:
        pool = RayPool.open(_sim_settings(policy, replicas=2))
        reporter.watch(pool)
        return pool

    store = Store.open(db_url)
    options = TuneOptions(traffic=small_sample, policy=policy, workloads=["code"],
                          export_dir=tmp_path / "exports")
    with caplog.at_level(logging.WARNING, logger="autotune.orchestrate.ray_pool"):
        result = tune(options, store, reporter, pool_factory=make_pool)
    for rec in caplog.records:
        print(rec.getMessage())
    assert reporter.failure is None, reporter.failure
    assert result.status == "finished"
    trials = store.trials(result.run_id)
    for t in trials:
        print(f"trial {t.workload}#{t.number}: {t.state} on {t.replica} "
              f"({t.node}), attempts {t.attempts}")
    print(f"run {result.run_id}: {store.run(result.run_id).status}")
    assert len(trials) == 4 and all(t.state == "complete" for t in trials)
    assert reporter.errors == [None] * 4
    killed = reporter.killed
    retried = [t for t in trials if (t.workload, t.number) == killed["busy"]]
    assert len(retried) == 1 and retried[0].attempts == 2
    assert retried[0].replica != killed["replica"]  # ran again on another replica
    assert all(t.attempts == 1 for t in trials if t not in retried)
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert f"replica {killed['replica']} on" in messages and "died during trial" in messages
    assert "restarted as" in messages  # the dead replica was replaced, not lost
    assert "retrying trial" in messages


@pytest.mark.slow
def test_retries_spent_fail_the_trial_and_dead_replicas_drain(
        ray_cluster: Any, replica_holds: Holds, small_sample: Path) -> None:
    policy = load_policy()
    schedule = _schedule(policy, small_sample)
    replica_holds.hold_at("replaying")
    pool = RayPool.open(_sim_settings(policy, replicas=2, max_retries=0, drain_after=1))
    try:
        pool.submit(TrialTask("a", TrialConfig(2, False, 32, 8192), schedule))
        pool.submit(TrialTask("b", TrialConfig(3, False, 32, 8192), schedule))
        victim = _kill_held(pool, replica_holds)  # the replica running a or b
        lost_key, kept_key = (victim["busy"], ({"a", "b"} - {victim["busy"]}).pop())
        results = {r.key: r for r in (pool.wait(), pool.wait())}
        lost, kept = results[lost_key], results[kept_key]
        assert lost.measurement is None and lost.attempts == 1
        assert lost.error is not None and f"replica {victim['replica']}" in lost.error
        assert "died during trial" in lost.error and "max_retries=0" in lost.error
        assert kept.error is None and kept.measurement is not None
        assert pool.capacity == 1 and len(pool.drained) == 1  # drained, the run goes on

        replica_holds.hold_at("replaying")  # b is done: the next replay held is c's
        pool.submit(TrialTask("c", TrialConfig(4, False, 32, 8192), schedule))
        last = _kill_held(pool, replica_holds)
        assert (last["replica"], last["busy"]) == (kept.replica, "c")
        c = pool.wait()
        assert c.measurement is None and c.error is not None and "died" in c.error
        with pytest.raises(BackendError, match="every replica of the pool was drained"):
            _ = pool.capacity
    finally:
        pool.close()


def test_a_replica_serves_the_next_trial_of_its_config_without_a_new_start(
        ray_cluster: Any, small_sample: Path) -> None:
    from autotune.cost import START
    from autotune.orchestrate.servers import REUSED

    policy = load_policy()
    pool = RayPool.open(_sim_settings(policy, replicas=1))
    config, other = TrialConfig(3, False, 32, 4096), TrialConfig(5, False, 64, 8192)
    try:
        results = []
        for key, c in ((1, config), (2, config), (3, other)):
            pool.submit(TrialTask(key, c, _schedule(policy, small_sample)))
            results.append(pool.wait())
        charged = [r.measurement.extra[START] if r.measurement else None for r in results]
        assert charged[0] is not None and charged[0] > 0  # the first trial started a server
        assert charged[1] == 0.0 and results[1].start_source == REUSED  # the same config
        assert charged[2] == charged[0] and results[2].start_source != REUSED  # a new one
    finally:
        pool.close()
    assert not pool.replicas()
