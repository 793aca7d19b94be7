"""Terminal rendering: progress while a pass runs, and the tables commands print.

Progress and notes go to stderr; tables and JSON go to stdout, so ``--format json`` output can
be piped. Tables fit 100 columns (``--wide`` adds columns). Imported lazily by the CLI (rich
costs start-up time).
"""

from __future__ import annotations

from typing import Any

from autotune.ui.console import err, note, out, print_json, print_table
from autotune.ui.pass_report import print_pass, print_status, result_table
from autotune.ui.tables import inspect_table, recommendations_table, runs_table, trials_table

__all__ = ["RichReporter", "err", "inspect_table", "note", "out", "print_json", "print_pass",
           "print_status", "print_table", "recommendations_table", "result_table",
           "runs_table", "trials_table"]


def __getattr__(name: str) -> Any:
    # the progress reporter plugs into the pass (autotune.orchestrate, Optuna, numpy...):
    # imported only by the commands that run one, so read-only commands start fast
    if name == "RichReporter":
        from autotune.ui.progress import RichReporter
        return RichReporter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
