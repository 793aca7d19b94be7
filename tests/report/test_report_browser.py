"""The report drawn by a real browser: headless Chromium, offline, after the scripts ran.

Each chart must have been drawn by plotly (its SVG exists) with exactly one marker per data
point the run holds: a report whose library failed to load, or that dropped trials, fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from chromium import census, dump_dom
from report_run import FilledRun

from autotune.report import SEED_TABLE, write_report


@pytest.mark.slow
def test_chromium_draws_every_chart_with_every_point(filled: FilledRun, tmp_path: Path) -> None:
    page = write_report(filled.store, tmp_path / "report.html").path
    drawn = census(dump_dom(page))

    charts = ("speedup-vs-window-plot", "seed-table-plot", "pareto-plot", "calibration-plot",
              "history-plot")
    for plot in charts:
        assert drawn.svgs[plot] >= 1, f"{plot}: plotly drew nothing"

    measured = {w: [(p, m, b) for _, p, m, b in rows if m is not None]
                for w, rows in filled.trials.items()}
    failed = {w: sum(m is None for _, _, m, _ in rows) for w, rows in filled.trials.items()}
    workloads = len(filled.trials)
    windows = {w: {p["num_speculative_tokens"] for p, _, _ in rows}
               for w, rows in measured.items()}
    rec_window = {w: next(p["num_speculative_tokens"] for n, p, _, _ in filled.trials[w]
                          if n == filled.recommended[w]) for w in filled.trials}

    # one marker per (workload, window), and a faint one per measured trial
    assert drawn.points["speedup-vs-window-plot"] == sum(len(v) for v in windows.values()) \
        + sum(len(v) for v in measured.values())
    # two windows for every published row
    assert drawn.points["seed-table-plot"] == sum(len(r.speedup) for r in SEED_TABLE)
    # every measured trial, plus the recommended star per workload; one front line each
    assert drawn.points["pareto-plot"] == sum(len(v) for v in measured.values()) + workloads
    assert drawn.lines["pareto-plot"] == workloads
    # predicted, measured and their scatter: three markers per position of the window
    assert drawn.points["calibration-plot"] == 3 * sum(rec_window.values())
    # every trial (failed ones as crosses); one best-so-far line per workload
    assert drawn.points["history-plot"] == sum(len(v) + failed[w] for w, v in measured.items())
    assert drawn.lines["history-plot"] == workloads
