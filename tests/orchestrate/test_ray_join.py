"""`autotune start --ray-address` on an existing cluster with Ray's token authentication.

The cluster is two local Ray nodes of 2 CPUs and 8 logical GPUs each, run by
``two_node_cluster.py`` in its own process with ``RAY_AUTH_MODE=token`` and a token in its
``$HOME/.ray/auth_token``. autotune runs as a real subprocess with that ``$HOME`` and no
``RAY_AUTH_MODE``: it must find the token where Ray's own clients look.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.errors import ConfigError
from autotune.orchestrate.ray_join import connect
from autotune.policy import DEFAULT_POLICY_PATH, load_policy
from autotune.store import Store

pytestmark = [pytest.mark.ray, pytest.mark.slow]

HELPER = Path(__file__).with_name("two_node_cluster.py")


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without Ray's address and authentication settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    env.update(extra)
    return env


@dataclass
class TwoNodes:
    proc: subprocess.Popen[str]
    address: str
    nodes: list[str]
    home: Path  # $HOME/.ray/auth_token holds the cluster's token
    ray_tmp: Path

    def ask(self, command: str) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def env(self, **extra: str) -> dict[str, str]:
        """autotune's environment: the cluster's $HOME (so its token file), nothing else."""
        return _clean_env(HOME=str(self.home), RAY_TMPDIR=str(self.ray_tmp), **extra)


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoNodes]:
    home = tmp_path_factory.mktemp("home")
    (home / ".ray").mkdir()
    (home / ".ray" / "auth_token").write_text(secrets.token_hex(32))
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths
    log = tmp_path_factory.mktemp("cluster") / "stderr.log"
    env = _clean_env(HOME=str(home), RAY_AUTH_MODE="token", RAY_TMPDIR=str(ray_tmp))
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, str(HELPER)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first, f"the cluster did not start: {log.read_text()[-3000:]}"
        started = json.loads(first)
        yield TwoNodes(proc, started["address"], started["nodes"], home, ray_tmp)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _start(argv_tail: list[str], small_sample: Path, tmp_path: Path, env: Mapping[str, str]
           ) -> tuple[int, int, str]:
    """Run ``autotune start --once`` with a database under ``tmp_path``: (pid, exit, stderr)."""
    argv = [sys.executable, "-m", "autotune.cli", "start", "--traffic", str(small_sample),
            "--once", "--db", f"sqlite:///{tmp_path / 'autotune.db'}",
            "--export-dir", str(tmp_path / "exports"), *argv_tail]
    with subprocess.Popen(argv, env=dict(env), cwd=tmp_path, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True) as proc:
        _, err = proc.communicate(timeout=540)
    return proc.pid, proc.returncode, err


def _released(two: TwoNodes, pool: str) -> dict[str, Any]:
    """The cluster's state once every resource is free again (Ray's raylets report freed
    resources asynchronously; a generous give-up: what is still held then stays held)."""
    deadline = time.monotonic() + 30
    state = two.ask("state")
    while time.monotonic() < deadline and any(
            state["available"].get(k, 0.0) < v for k, v in state["total"].items()
            if k in ("CPU", "GPU")):
        time.sleep(0.2)
        state = two.ask("state")
    groups = [g for g in state["placement_groups"].values() if g["name"].startswith(pool)]
    assert groups and all(g["state"] == "REMOVED" for g in groups), groups
    for kind in ("CPU", "GPU"):
        assert state["available"].get(kind) == state["total"][kind], (kind, state["available"])
    return state


def _policy_reserving_gpus(tmp_path: Path) -> Path:
    """The default policy with ``sim.reserve_gpus: true``: sim replicas of 8 GPUs each. It
    searches with the grid: the placement is judged, not the search (the grid proposes
    without fitting a predictor)."""
    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    data.setdefault("sim", {})["reserve_gpus"] = True
    data["search"] = {"strategy": "grid"}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_pass_joins_two_nodes_with_the_token_ray_clients_read(
        two_nodes: TwoNodes, small_sample: Path, tmp_path: Path) -> None:
    """Placed as a real pass: 8 GPUs a replica, so as many replicas as nodes (the default
    --replicas), one a node, though each node has the CPUs for two 1-CPU sim replicas."""
    gpus = load_policy().serve.gpus_per_replica
    assert gpus == 8
    pid, code, err = _start(["--ray-address", two_nodes.address, "--budget-trials", "2",
                             "--policy", str(_policy_reserving_gpus(tmp_path))],
                            small_sample, tmp_path, two_nodes.env())
    assert code == 0, err[-3000:]
    assert "InvalidAuthToken" not in err and "gcs_client" not in err
    trials = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}").trials()
    assert trials and all(t.state == "complete" for t in trials)
    assert all(t.node == socket.gethostname() for t in trials)
    by_replica = {t.replica for t in trials}
    assert by_replica == {"ray-0", "ray-1"}  # both replicas ran trials

    state = two_nodes.ask("state")
    (job,) = [j for j in state["jobs"] if int(j["DriverPid"]) == pid]  # one connection
    assert job["IsDead"]
    actors = [a for a in state["actors"].values()
              if a["ActorClassName"] == "ReplicaWorker" and a["JobID"] == job["JobID"]]
    # replica actors are named POOL-ray-I after their pool and replica
    replica_node = {"ray-" + a["Name"].rsplit("-ray-", 1)[1]: a["Address"]["NodeID"]
                    for a in actors}
    assert set(replica_node) == by_replica
    assert sorted(replica_node.values()) == sorted(two_nodes.nodes)  # one replica per node
    pool = actors[0]["Name"].rsplit("-ray-", 1)[0]
    groups = {g["name"]: g for g in state["placement_groups"].values()
              if g["name"].startswith(pool + "-")}
    assert sorted(groups) == [f"{pool}-replica-0", f"{pool}-replica-1"]
    for g in groups.values():  # each replica reserved the policy's GPUs, on one node
        assert g["strategy"] == "STRICT_PACK"
        assert g["bundles"] == {"0": {"GPU": gpus, "CPU": 1.0}}
    held = []  # and each replica actor required them, from its own placement group's bundle
    for a in actors:
        required = state["actor_resources"][a["ActorID"]]["required"]
        (group_id,) = {k.rsplit("_", 1)[1] for k in required if k.startswith("GPU_group_0_")}
        assert required[f"GPU_group_0_{group_id}"] == gpus, required
        assert required[f"CPU_group_0_{group_id}"] == 1.0, required
        held.append(group_id)
    assert sorted(held) == sorted(g["placement_group_id"] for g in groups.values())
    for a in actors:  # the driver stayed connected from before the first to after the last
        assert a["State"] == "DEAD"
        # freed by the pool (killed, or its last handle dropped), not by its job's end
        assert any(f"reason: {why}" in a["DeathCause"] for why in ("RAY_KILL", "REF_DELETED")), \
            a["DeathCause"]
        assert job["StartTime"] <= a["StartTime"] and a["EndTime"] <= job["EndTime"]
    released = _released(two_nodes, pool)
    held_after = [g["name"] for g in released["placement_groups"].values()
                  if g["name"].startswith(pool) and g["state"] != "REMOVED"]
    node_of = {n: f"node-{i}" for i, n in enumerate(two_nodes.nodes)}
    print(f"\nplacement: replicas per node {_count(node_of[n] for n in replica_node.values())}; "
          f"trials per node {_count(node_of[replica_node[t.replica]] for t in trials)}; "
          f"placement groups {len(groups)} reserved, {len(held_after)} left")


def _count(items: Iterator[str]) -> dict[str, int]:
    return dict(sorted(Counter(items).items()))


def test_vllm_replicas_take_eight_gpus_on_each_node(two_nodes: TwoNodes) -> None:
    replicas = two_nodes.ask("vllm-pool")  # the default policy: serve.gpus_per_replica 8
    assert len(replicas) == 2
    assert sorted(r["node_id"] for r in replicas) == sorted(two_nodes.nodes)
    assert all(len(r["gpu_ids"]) == 8 for r in replicas)
    _released(two_nodes, "autotune-")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("case", ["no token", "wrong token", "nothing there"])
def test_a_cluster_that_cannot_be_joined_is_one_line_and_nothing_written(
        two_nodes: TwoNodes, small_sample: Path, tmp_path: Path, case: str) -> None:
    address = two_nodes.address
    env = two_nodes.env()
    if case == "no token":
        env["HOME"] = str(tmp_path)  # no .ray/auth_token there
    elif case == "wrong token":
        env["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    else:
        address = f"127.0.0.1:{_free_port()}"
    _, code, err = _start(["--ray-address", address], small_sample, tmp_path, env)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
    line = lines[0]
    assert f"--ray-address {address}" in line and "Fix: " in line
    if case == "no token":
        assert f"none was found ($RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH and {tmp_path}" in line
    elif case == "wrong token":
        assert "refused the authentication token read from $RAY_AUTH_TOKEN" in line
    else:
        assert "nothing answers there" in line
    assert not (tmp_path / "autotune.db").exists()
    assert not (tmp_path / "exports").exists()


def test_an_address_from_the_environment_is_named_as_such(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{_free_port()}")  # as `ray job submit` sets
    monkeypatch.setenv("RAY_task_events_shutdown_flush_timeout_ms", "1000")  # connect's default
    with pytest.raises(ConfigError, match=r"^127\.0\.0\.1:\d+ \(\$RAY_ADDRESS\): nothing "
                       r"answers there .* or unset RAY_ADDRESS to run a local Ray$"):
        connect(None, 1)


def test_a_ray_address_from_the_environment_is_checked_before_anything_is_written(
        monkeypatch: pytest.MonkeyPatch, small_sample: Path, tmp_path: Path) -> None:
    """``$RAY_ADDRESS`` (as ``ray job submit`` sets it) is the cluster a pass on Ray joins: one
    where nothing answers stops ``start`` before the database is created, as --ray-address
    does; a pass that runs without Ray (one sim replica) does not read it."""
    from click.testing import CliRunner

    from autotune.cli import cli

    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{_free_port()}")
    db_file, exports = tmp_path / "autotune.db", tmp_path / "exports"
    argv = ["start", "--traffic", str(small_sample), "--once", "--budget-trials", "1",
            "--db", f"sqlite:///{db_file}", "--export-dir", str(exports)]
    res = CliRunner().invoke(cli, [*argv, "--replicas", "2"])
    assert res.exit_code == 2 and res.stdout == ""
    (line,) = res.stderr.splitlines()
    assert line.startswith(f"error: {os.environ['RAY_ADDRESS']} ($RAY_ADDRESS): nothing "
                           "answers there") and line.endswith("or unset RAY_ADDRESS to run a "
                                                              "local Ray"), line
    assert not db_file.exists() and not exports.exists()

    res = CliRunner().invoke(cli, [*argv, "--replicas", "1"])
    assert res.exit_code == 0, res.stderr
    runs = Store.open(f"sqlite:///{db_file}").runs()
    assert [r.status for r in runs] == ["finished"]
