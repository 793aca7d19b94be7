"""The derived step-time tables and the held-out L40S world: each shipped roofline table is what
its recipe in bench/calibration/roofline_table.py writes, and the L40S profile's acceptance gives
back the published acceptance lengths it was converted from."""

from __future__ import annotations

import json

import pytest

from autotune.backends import create_backend
from autotune.backends.sim import generate_requests
from autotune.types import ReplaySchedule, ServeSpec, TrialConfig
from bench.calibration.roofline_table import RECIPES, TABLES

L40S = "llama-3.1-8b@1xL40S-table"


def test_every_shipped_roofline_table_is_what_its_recipe_writes() -> None:
    shipped = sorted(p.name for p in TABLES.glob("*-roofline.json"))
    assert shipped == sorted(r.out.name for r in RECIPES.values())
    for recipe in RECIPES.values():
        on_disk = json.loads(recipe.out.read_text(encoding="utf-8"))
        assert on_disk == json.loads(json.dumps(recipe.table())), recipe.name


def test_a_single_gpu_recipe_has_no_all_reduce_and_a_weight_read_floor() -> None:
    recipe = RECIPES["llama-3.1-8b@1xL40S"]
    one = recipe.forward_s(recipe.model.target, 1, 128)
    # 16.06 GB at 80% of 864 GB/s, plus the 1.5 ms step overhead; the KV read is negligible
    assert one == pytest.approx(16.06e9 / (0.8 * 864e9) + 1.5e-3, rel=0.01)
    # 2048 tokens of 128 keys: compute-bound, 2 x 8.03 GFLOP per token at 60% of 362 TFLOP/s
    assert recipe.forward_s(recipe.model.target, 2048, 128) > 2048 * 2 * 8.03e9 / (0.6 * 362e12)


@pytest.mark.parametrize(("workload", "published"),
                         [("mt-bench", 2.77), ("humaneval", 3.49), ("gsm8k", 3.34)])
def test_the_l40s_world_accepts_as_the_published_eagle3_head(workload: str,
                                                             published: float) -> None:
    """At window 7, one request at a time, requests without predictions (the workload's prior)
    are accepted at the chain-drafting acceptance length the profile was converted from."""
    serve = ServeSpec(model="meta-llama/Llama-3.1-8B-Instruct",
                      draft_model="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", method="eagle3",
                      draft_block_size=8)
    reqs = list(generate_requests(150, workload=workload, seed=3, acceptance=False,
                                  output_tokens=[256] * 150))
    replica = create_backend("sim", serve, {"profile": L40S, "drafter": "eagle3"},
                             seed=5).start(TrialConfig(7, False, 1, 8192))
    m = replica.replay(ReplaySchedule(reqs, mode="closed", concurrency=1))
    assert m.acceptance is not None
    assert m.acceptance.mean_accepted_length == pytest.approx(published, rel=0.04)
