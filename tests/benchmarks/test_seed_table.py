"""The seed's published table is defined once (autotune/report/seed.py); its two users agree on
it: the cells the simulator's calibration fits (bench/calibration/seed.py) are exactly the points
the report plots, with the same numbers, and each names a profile, drafter and benchmark the
simulator has."""

from __future__ import annotations

from autotune.backends.sim import BENCHMARKS, load_profile
from autotune.report.figures import seed_chart
from bench.calibration.seed import MODELS, seed_cells, seed_targets


def _plotted() -> dict[tuple[str, str, str, int], float]:
    """(target, drafter, benchmark, window) -> speedup of every point of the report's chart."""
    figure = seed_chart().figure
    titles = [a.text for a in figure.layout.annotations]  # one subplot per benchmark
    out = {}
    for trace in figure.data:
        column = int(trace.xaxis.removeprefix("x") or 1)
        target, drafter = trace.name.split(" + ")
        for n, value in zip(trace.x, trace.y, strict=True):
            out[(target, drafter, titles[column - 1], int(n))] = float(value)
    return out


def test_the_calibration_fits_exactly_the_points_the_report_plots() -> None:
    fitted = {(c.row.target, c.row.drafter, c.row.benchmark, c.n): c.published
              for c in seed_cells()}
    assert len(fitted) == len(seed_cells())  # no published number is fitted twice
    assert fitted == _plotted()


def test_every_fitted_cell_names_what_the_simulator_has() -> None:
    for c in seed_cells():
        profile = load_profile(MODELS[c.model])
        assert c.drafter in profile.drafters, c
        assert c.cell == "avg" or c.cell in BENCHMARKS, c
        assert c.cell == "avg" or c.cell in profile.drafters[c.drafter].priors, c
    # the reproduction's shape holds the same numbers
    assert {(m, d, cell, int(n)): v for m, ds in seed_targets().items()
            for d, cells in ds.items() for cell, ws in cells.items()
            for n, v in ws.items()} == {(c.model, c.drafter, c.cell, c.n): c.published
                                        for c in seed_cells()}
