"""The policy's plan section: defaults, and bad values named by their key."""

from __future__ import annotations

import pytest

from autotune.errors import ConfigError
from autotune.plan import plan_settings
from autotune.policy import load_policy


def test_the_defaults_are_the_documented_ones() -> None:
    policy = load_policy()
    s = plan_settings(policy)
    assert (s.headroom, s.growth, s.peak_window_s) == (0.1, (1.0, 2.0, 4.0), None)
    assert s.gpus_per_replica == policy.serve.gpus_per_replica
    given = plan_settings(policy, headroom=0.3, growth=[3.0], peak_window_s=60.0)
    assert (given.headroom, given.growth, given.peak_window_s) == (0.3, (3.0,), 60.0)
    assert (given.headroom_source, given.growth_source, given.window_source) == (
        "--headroom", "--growth", "--peak-window")


@pytest.mark.parametrize(("key", "value"), [("plan.headroom", 0), ("plan.headroom", -0.5),
                                            ("plan.growth", [1, -2]), ("plan.growth", []),
                                            ("plan.peak_window", "soon")])
def test_bad_plan_keys_are_named(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_policy(overrides={key: value})


def test_hardware_count_is_the_gpus_of_a_replica_when_given() -> None:
    policy = load_policy(overrides={"hardware.count": 4})
    assert plan_settings(policy).gpus_per_replica == 4
