"""Where output goes and how wide it is: tables and JSON on stdout, progress and notes on
stderr, at most 100 columns when not on a terminal (CI logs, files, pipes)."""

from __future__ import annotations

import json
import math
import sys
import textwrap
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["WIDTH", "err", "fmt_num", "note", "out", "print_json", "print_table"]

#: Width of output that does not go to a terminal; every table is designed to fit it.
WIDTH = 100

# No markup: the text printed holds workload labels, paths and error messages from the user's
# files, in which "[/x]" would be taken for a closing tag (and end the command in a
# MarkupError). Colour goes through rich's Text instead.
# Messages are not wrapped (soft wrap: a path or an error stays one line to copy); tables are
# drawn to the width, and a table's notes are wrapped on purpose (note()).
out = Console(width=None if sys.stdout.isatty() else WIDTH, highlight=False, markup=False,
              soft_wrap=True)
#: For ``--wide``: as wide as the table needs.
_unbounded = Console(width=10_000, highlight=False, markup=False)
err = Console(stderr=True, width=None if sys.stderr.isatty() else WIDTH, highlight=False,
              markup=False, soft_wrap=True)


def print_json(rows: Any) -> None:
    """JSON on stdout; records print in their one JSON form (``to_json``).

    A list prints one element per line (``grep``-able, and encoded by json's C encoder: 10,000
    trials in ~0.3 s where an indented dump takes ~1.5 s); anything else is indented.
    """
    if isinstance(rows, list):
        body = ",\n".join(json.dumps(row, default=_json_form) for row in rows)
        sys.stdout.write(f"[\n{body}\n]\n" if rows else "[]\n")
    else:
        sys.stdout.write(json.dumps(rows, indent=2, default=_json_form) + "\n")


def _json_form(value: Any) -> Any:
    to_json = getattr(value, "to_json", None)
    return to_json() if callable(to_json) else str(value)


def print_table(table: Table, notes: Iterable[str] = (), *, wide: bool = False) -> None:
    """A table on stdout, then its notes (reasons too long for a cell), wrapped; ``wide``
    tables take the width they need."""
    (_unbounded if wide else out).print(table)
    for line in notes:
        out.print(note(line))


def note(text: str, indent: str = "  ") -> str:
    """``text`` wrapped to the output width, continuation lines indented."""
    width = (out.width or WIDTH) - 1
    return textwrap.fill(text, width=width, subsequent_indent=indent,
                         break_on_hyphens=False)


def fmt_num(v: Any, digits: int = 3) -> str:
    """A number for a table cell: 3 significant digits, thousands separated, ``-`` for none."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)
