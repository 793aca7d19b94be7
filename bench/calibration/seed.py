"""The seed's published speedups (autotune/report/seed.py, their one definition) in the
simulator's names: which profile each model is, which profile drafter each drafter is, which
benchmark (or the average) each cell is. The calibration fits exactly these cells.

Every name the seed publishes must map here, so a row added to the published table is either
fitted or makes :func:`seed_cells` fail, never silently skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.report.seed import SEED_TABLE, SeedRow

__all__ = ["DRAFTERS", "MODELS", "SeedCell", "seed_cells", "seed_targets"]

#: Seed model name -> simulator profile.
MODELS = {"kimi-k2.6": "kimi-k2.6@8xH200-tp8", "kimi-k2.7-code": "kimi-k2.7-code@8xH200-tp8"}
#: The profiles' drafters the seed measured.
DRAFTERS = ("dspark", "eagle3-mla")
#: The seed's names -> the simulator's: model, drafter, benchmark ("avg": the mean over six).
_MODEL_KEYS = {"Kimi-K2.6": "kimi-k2.6", "Kimi-K2.7-Code": "kimi-k2.7-code"}
_DRAFTER_KEYS = {"DSpark": "dspark", "Eagle3-MLA": "eagle3-mla"}
_CELL_KEYS = {"average": "avg", "LiveCodeBench": "livecodebench",
              "SPEED-Bench Coding": "speed-bench-coding"}


@dataclass(frozen=True)
class SeedCell:
    """One published number in the simulator's names: model (a key of :data:`MODELS`),
    drafter, cell (``avg`` or a benchmark), window; and the published row it comes from."""

    model: str
    drafter: str
    cell: str
    n: int
    published: float
    row: SeedRow

    @property
    def key(self) -> str:
        return f"{self.drafter}/{self.cell}/n={self.n}"


def _cell(row: SeedRow, n: int) -> SeedCell:
    try:
        model = _MODEL_KEYS[row.target]
        drafter = _DRAFTER_KEYS[row.drafter]
        cell = _CELL_KEYS[row.benchmark]
    except KeyError as err:
        raise KeyError(f"autotune/report/seed.py publishes {row}, whose {err} has no "
                       "simulator name in bench/calibration/seed.py: map it") from None
    return SeedCell(model, drafter, cell, n, row.speedup[n], row)


def seed_cells(model: str | None = None) -> list[SeedCell]:
    """Every published number (of ``model`` when given), by model, then drafter, then cell,
    each in the order the published table first names it, then window."""
    nested: dict[str, dict[str, dict[str, list[SeedCell]]]] = {}
    for row in SEED_TABLE:
        for n in row.speedup:
            c = _cell(row, n)
            nested.setdefault(c.model, {}).setdefault(c.drafter, {}).setdefault(
                c.cell, []).append(c)
    return [c for m, drafters in nested.items() if model is None or m == model
            for cells in drafters.values() for windows in cells.values() for c in windows]


def seed_targets() -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """The published numbers as model -> drafter -> cell -> window (text) -> speedup, the shape
    :func:`bench.calibration.speedup.seed_table` reproduces."""
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for c in seed_cells():
        out.setdefault(c.model, {}).setdefault(c.drafter, {}).setdefault(
            c.cell, {})[str(c.n)] = c.published
    return out
