"""The regret benchmark's oracle says how far its own readings let a regret be trusted."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture
def regret(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location("regret", BENCH / "regret.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "regret", module)
    spec.loader.exec_module(module)
    return module


def test_regret_carries_the_standard_error_of_the_oracles_readings(regret: ModuleType) -> None:
    def read(*values: float) -> list[object]:
        return [regret.Reading(v, True, {}, {}) for v in values]

    table = regret.Table({"best": read(1.0, 1.0, 1.0, 1.0), "noisy": read(0.7, 0.9),
                          "once": read(0.95), "steady": read(0.8, 0.8)})
    assert table.oracle() == ("best", 1.0)
    assert table.regret("noisy") == pytest.approx(0.2)
    # the ratio 0.8 × the relative standard error of its mean, sqrt(0.02 / 2) / 0.8
    assert table.regret_se("noisy") == pytest.approx(0.1, rel=1e-9)
    assert table.regret_se("steady") == 0.0      # readings that agree leave no doubt
    assert table.regret_se("best") == 0.0
    assert table.regret_se("once") is None       # one reading has no spread to read
    assert table.regret_se(None) is None
