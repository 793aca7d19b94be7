"""The HTML report of a run: speedup vs window, Pareto front, calibration, search history.

``write_report(store, "report.html")`` writes one self-contained file (plotly.js inlined: it
opens from disk, offline). Plotly is imported only when a report is rendered (extra
``autotune[report]``).
"""

from __future__ import annotations

from autotune.report.data import ReportData, WorkloadReport, load_report_data, pareto_front
from autotune.report.page import ReportWritten, render_report, write_report
from autotune.report.seed import SEED_TABLE

__all__ = [
    "SEED_TABLE",
    "ReportData",
    "ReportWritten",
    "WorkloadReport",
    "load_report_data",
    "pareto_front",
    "render_report",
    "write_report",
]
