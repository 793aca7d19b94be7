"""The lineage of a workload's recommendations, as ``recommendations --history`` shows it.

One row per recommendation, newest first: its status, when it was created, promoted and
retired (and by which), the config, the objective with its confidence interval, the gain over
the recommendation it was compared with, the run, and why it is where it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.store.records import RecommendationRecord, iso
from autotune.ui.tables import new_table

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["LINEAGE_COLUMNS", "lineage_rows", "lineage_table"]

LINEAGE_COLUMNS = ("#", "workload", "status", "created (UTC)", "retired (UTC)", "config",
                   "value (95% CI)", "gain (95% CI)", "run", "reason")


def _config(c: Mapping[str, Any]) -> str:
    av = " av" if c.get("enable_adaptive_verification") else ""
    return (f"n={c.get('num_speculative_tokens')}{av} seqs={c.get('max_num_seqs')} "
            f"tok={c.get('max_num_batched_tokens')}")


def _value(r: RecommendationRecord) -> str:
    text = f"{r.value:.4g}"
    if r.value_ci:
        low, high = r.value_ci
        text += f" [{low:.4g}, {high:.4g}]"
    return text


def _gain(r: RecommendationRecord) -> str:
    if r.gain is None:
        return "-"
    text = f"{r.gain:+.1%}"
    if r.gain_ci:
        low, high = r.gain_ci
        text += f" [{low:+.1%}, {high:+.1%}]"
    return f"{text} vs #{r.compared_with}" if r.compared_with else text


def _when(when: str | None) -> str:
    """``2026-11-29T15:42:07+00:00`` → ``2026-11-29 15:42:07`` (times are stored in UTC)."""
    return when.replace("T", " ").removesuffix("+00:00") if when else "-"


def _retired(r: RecommendationRecord) -> str:
    if not r.retired_at:
        return "-"
    by = f" by #{r.retired_by}" if r.retired_by else ""
    return f"{_when(iso(r.retired_at))}{by}"


def lineage_rows(recs: Sequence[RecommendationRecord]) -> list[tuple[str, ...]]:
    """Rows of :data:`LINEAGE_COLUMNS` for recommendations (``Store.recommendations``)."""
    return [(str(r.id), r.workload, r.status, _when(iso(r.created_at)), _retired(r),
             _config(r.config), _value(r), _gain(r), r.run, r.reason)
            for r in recs]


#: The columns the history shows without --wide (the rest go to the notes below it).
_NARROW = ("#", "workload", "status", "created (UTC)", "config", "value (95% CI)",
           "gain (95% CI)")


def lineage_table(recs: Sequence[RecommendationRecord], *,
                  wide: bool = False) -> tuple[Table, list[str]]:
    """The history table and its notes (when each was retired, and why it is where it is)."""
    columns = LINEAGE_COLUMNS if wide else _NARROW
    table = new_table(*columns, title="recommendation history (newest first)",
                      numeric=("#",), fold=("workload", "config", "value (95% CI)",
                                            "gain (95% CI)", "reason", "run"))
    notes = []
    for row in lineage_rows(recs):
        cells = dict(zip(LINEAGE_COLUMNS, row, strict=True))
        table.add_row(*(cells[c] for c in columns))
        if not wide:
            retired = cells["retired (UTC)"]
            retired_note = f"retired {retired}; " if retired != "-" else ""
            notes.append(f"#{cells['#']} {cells['workload']} ({cells['status']}, run "
                         f"{cells['run']}): {retired_note}{cells['reason']}")
    return table, notes
