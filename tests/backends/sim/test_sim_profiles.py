"""Simulator profiles: loading by name or path, validation errors that name file and key, the
table cost law, and the drafters' cost shapes (sequential grows with the window, parallel not)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from autotune.backends import create_backend
from autotune.backends.sim import generate_requests
from autotune.backends.sim._cost import TableStepCost, cost_law
from autotune.backends.sim._profile import load_profile, profile_source
from autotune.backends.sim._table import StepTable, TableLookup
from autotune.errors import ConfigError
from autotune.types import Measurement, ReplaySchedule, ServeSpec, Slo, TrialConfig

KIMI = "kimi-k2.6@8xH200-tp8"
LLAMA = "llama-3.1-70b@4xH100-tp4"
LLAMA_TABLE = "llama-3.1-70b@4xH100-tp4-table"
SERVE = ServeSpec(model="m", draft_model="d", method="dspark", draft_block_size=8)


def _raw(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(profile_source(name).read_text(encoding="utf-8"))
    return data


def _write(tmp_path: Path, data: dict[str, Any], name: str = "mine.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _table(**change: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "engine": "test", "hardware": "none", "script": "tests", "model": {},
        "batch_tokens": [1, 4, 16], "context_tokens": [100, 1100],
        "target_step_ms": [[10.0, 12.0], [11.0, 13.0], [15.0, 17.0]],
        "draft_step_ms": [[1.0, 1.1], [1.2, 1.3], [2.0, 2.1]], "graph_buckets": None}
    return {**base, **change}


def _replay(options: dict[str, str], config: TrialConfig, serve: ServeSpec = SERVE,
            workload: str = "chat", count: int = 40) -> Measurement:
    reqs = list(generate_requests(count, workload=workload, seed=2, rate=None))
    replica = create_backend("sim", serve, options, seed=1).start(config)
    return replica.replay(ReplaySchedule(reqs, mode="closed", concurrency=1))


# -- loading by path ------------------------------------------------------------------------
def test_a_profile_file_replays_like_the_shipped_name(tmp_path: Path) -> None:
    path = _write(tmp_path, _raw(KIMI))
    config = TrialConfig(3, False, 8, 2048)
    by_name = _replay({"profile": KIMI}, config)
    by_path = _replay({"profile": str(path)}, config)
    np.testing.assert_array_equal(by_name.e2e_s, by_path.e2e_s)
    assert create_backend("sim", SERVE, {"profile": str(path)}).describe()["profile"] == "mine"


def test_a_missing_profile_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: sim profile file not found"):
        create_backend("sim", SERVE, {"profile": str(tmp_path / "nope.yaml")})


# -- validation: every error names the file and the key --------------------------------------
def _drop(data: dict[str, Any], dotted: str) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        data = data[key]
    del data[leaf]


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        data = data[key]
    data[leaf] = value


@pytest.mark.parametrize(("edit", "key", "why"), [
    (lambda d: _set(d, "cost.fixd_s", 0.01), "cost.fixd_s", "unknown key"),
    (lambda d: _set(d, "colour", "red"), "colour", "unknown key"),
    (lambda d: _set(d, "kv_cache.tokens", "many"), "kv_cache.tokens", "valid integer"),
    (lambda d: _drop(d, "cost.token_s"), "cost.token_s", "required key is missing"),
    (lambda d: _drop(d, "hardware"), "hardware", "required key is missing"),
    (lambda d: _set(d, "cost.kv_token_s", -1e-8), "cost.kv_token_s",
     "greater than or equal to 0"),
    (lambda d: _set(d, "drafters.dspark.cost.fixed_s", -0.001),
     "drafters.dspark.cost.fixed_s", "greater than or equal to 0"),
    (lambda d: _set(d, "drafters.dspark.kind", "tree"), "drafters.dspark.kind", "parallel"),
    (lambda d: _set(d, "drafters.dspark.acceptance.gsm8k.c1", 1.5),
     "drafters.dspark.acceptance.gsm8k.c1", "less than 1"),
    (lambda d: _set(d, "cost.law", "magic"), "cost", "magic"),
])
def test_bad_profiles_name_file_and_key(tmp_path: Path, edit: Any, key: str, why: str) -> None:
    data = _raw(KIMI)
    edit(data)
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        create_backend("sim", SERVE, {"profile": str(path)})
    text = str(err.value)
    assert str(path) in text
    line = next((ln for ln in text.splitlines() if ln.strip().startswith(f"{key}:")), None)
    assert line is not None, text
    assert why in line, text


def test_a_table_not_monotone_in_batch_tokens_is_refused(tmp_path: Path) -> None:
    data = _raw(LLAMA_TABLE)
    bad = _table(target_step_ms=[[10.0, 12.0], [9.0, 13.0], [15.0, 17.0]])
    (tmp_path / "t.json").write_text(json.dumps(bad), encoding="utf-8")
    data["cost"]["table"] = "t.json"
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        load_profile(str(path))
    text = str(err.value)
    assert str(path) in text and str(tmp_path / "t.json") in text
    assert "must not decrease with batch tokens" in text and "4 tokens take 9.0 ms" in text


def test_a_missing_table_file_is_named(tmp_path: Path) -> None:
    data = _raw(LLAMA_TABLE)
    data["cost"]["table"] = "absent.json"
    with pytest.raises(ConfigError, match=r"cost.*absent\.json not found"):
        load_profile(str(_write(tmp_path, data)))


def test_a_drafter_block_narrower_than_the_policy_windows_is_refused(tmp_path: Path) -> None:
    data = _raw(KIMI)
    data["drafters"]["dspark"]["block_size"] = 4
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as err:
        create_backend("sim", SERVE, {"profile": str(path)})
    assert str(path) in str(err.value)
    assert "drafters.dspark.block_size: 4" in str(err.value)
    narrow = ServeSpec(model="m", draft_model="d", method="dspark", draft_block_size=4)
    assert create_backend("sim", narrow, {"profile": str(path)}).drafter is not None


def test_a_drafter_timed_by_table_needs_a_table(tmp_path: Path) -> None:
    data = _raw(KIMI)
    data["drafters"]["dspark"]["cost"] = {"law": "table"}
    with pytest.raises(ConfigError, match=r"drafters\.dspark\.cost: law 'table' needs"):
        load_profile(str(_write(tmp_path, data)))


# -- the table law ---------------------------------------------------------------------------
def test_table_interpolates_bilinearly_between_grid_points() -> None:
    table = StepTable.model_validate(_table())
    look = TableLookup(table, table.target_step_ms)
    assert look.seconds(1, 100) == pytest.approx(0.010)
    assert look.seconds(16, 1100) == pytest.approx(0.017)
    # halfway in batch tokens (1 -> 4) and in context (100 -> 1100)
    assert look.seconds(2.5, 600) == pytest.approx(0.001 * (11.0 + 12.0) / 2)
    # beyond the grid: the last segment extended; below it: held at the first point
    assert look.seconds(28, 100) == pytest.approx(0.019)
    assert look.seconds(1, 0) == pytest.approx(0.010)


def test_graph_buckets_step_the_cost() -> None:
    table = StepTable.model_validate(_table(graph_buckets=[1, 8]))
    look = TableLookup(table, table.target_step_ms)
    costs = [float(look.seconds(b, 100)) for b in (2, 5, 8, 9)]
    assert costs[0] == costs[1] == costs[2]  # 2..8 tokens run the graph captured for 8
    assert costs[2] == pytest.approx(float(look.seconds(8.0, 100)))
    no_pad = TableLookup(StepTable.model_validate(_table()), table.target_step_ms)
    assert float(no_pad.seconds(2, 100)) < costs[0]
    assert costs[3] > costs[2]  # past the largest bucket: eager, by the batch tokens


def test_shipped_table_profile_uses_its_table() -> None:
    profile = load_profile(LLAMA_TABLE)
    drafter = profile.drafter("eagle3")
    law = cost_law(profile, drafter)
    assert isinstance(law, TableStepCost)
    table = profile.cost.table  # type: ignore[union-attr]
    assert law.target(1, 0.0, 0.0, 1024) == pytest.approx(table.target_step_ms[0][2] / 1000)


# -- drafter cost shapes ---------------------------------------------------------------------
@pytest.mark.parametrize("name", [LLAMA, LLAMA_TABLE])
def test_sequential_drafter_cost_grows_with_the_window(name: str) -> None:
    profile = load_profile(name)
    law = cost_law(profile, profile.drafter("eagle3"))
    times = [law.draft_time(n, 8, 0, 1000.0) for n in range(1, 8)]
    assert all(b > a for a, b in itertools.pairwise(times))
    assert times[-1] > 5 * times[0]  # one draft forward per drafted position


def test_parallel_drafter_cost_is_nearly_flat_in_the_window() -> None:
    profile = load_profile(KIMI)
    law = cost_law(profile, profile.drafter("dspark"))
    one, seven = law.draft_time(1, 8, 0), law.draft_time(7, 8, 0)
    assert seven < 1.5 * one  # one forward over the whole block


def test_sequential_drafting_shows_in_the_replayed_step_time() -> None:
    serve = ServeSpec(model="m", draft_model="d", method="eagle3", draft_block_size=8)
    steps = {n: _replay({"profile": LLAMA, "drafter": "eagle3"}, TrialConfig(n, False, 1, 2048),
                        serve).extra["mean_step_ms"] for n in (1, 7)}
    # 6 more draft forwards of ~0.3 ms each, plus 6 more verified tokens
    assert steps[7] - steps[1] > 6 * 0.3
    m = _replay({"profile": LLAMA, "drafter": "eagle3"}, TrialConfig(5, False, 1, 2048), serve)
    assert m.summary(Slo())["output_tokens_per_s"] > 0


# -- autotune sim profiles -------------------------------------------------------------------
def test_sim_profiles_lists_every_shipped_profile() -> None:
    from click.testing import CliRunner

    from autotune.backends.sim import known_profiles
    from autotune.cli import cli

    runner = CliRunner()
    table = runner.invoke(cli, ["sim", "profiles"])
    assert table.exit_code == 0, table.output
    assert all(len(line) <= 100 for line in table.output.splitlines())
    for name in known_profiles():
        assert name in table.output
    assert "eagle3 (sequential)" in table.output and "dspark (parallel)" in table.output
    as_json = runner.invoke(cli, ["sim", "profiles", "--format", "json"])
    rows = {row["name"]: row for row in json.loads(as_json.output)}
    assert set(rows) == set(known_profiles())
    llama = rows[LLAMA_TABLE]
    assert llama["cost_law"] == "table" and llama["table"].endswith(".json")
    assert (llama["gpu"], llama["gpu_count"], llama["tensor_parallel_size"]) == ("H100", 4, 4)
    assert llama["drafters"] == [{"name": "eagle3", "kind": "sequential",
                                  "model": load_profile(LLAMA_TABLE).drafters["eagle3"].model}]
    assert rows[KIMI]["cost_law"] == "analytic"
