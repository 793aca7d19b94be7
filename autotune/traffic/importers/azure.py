"""Azure LLM inference trace CSV (Azure/AzurePublicDataset, 2023 and 2024 releases).

Columns ``TIMESTAMP`` (wall clock ``YYYY-MM-DD HH:MM:SS.fffffff``, 7 fractional digits, UTC),
``ContextTokens`` and ``GeneratedTokens``, in any order after a header line; extra columns are
ignored. One request a row.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from autotune.traffic.importers.base import Importer, LineParser, Row, describe

__all__ = ["IMPORTER", "AzureParser", "parse_azure_timestamp"]

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?$")


def _show(cell: str) -> str:
    """A CSV cell for an error message: quoted, and cut when long."""
    return repr(cell) if len(cell) <= 60 else repr(cell[:57] + "...")


def parse_azure_timestamp(text: str) -> float:
    """Epoch seconds of an Azure trace timestamp, keeping all (up to 9) fractional digits."""
    m = _STAMP.match(text.strip())
    if m is None:
        raise ValueError("must look like 2023-11-16 18:15:46.6805900, got "
                         f"{_show(text.strip())}")
    whole = datetime.strptime(m.group(1).replace("T", " "), "%Y-%m-%d %H:%M:%S")
    frac = m.group(2) or ""
    return whole.replace(tzinfo=UTC).timestamp() + (int(frac) / 10 ** len(frac) if frac else 0.0)


class AzureParser(LineParser):
    """Reads the header on the first non-blank line, then one request per row."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.index: dict[str, int] | None = None
        self.width = 0

    def parse(self, text: str, line: int) -> Row | None:
        cells = [c.strip().strip('"') for c in text.rstrip("\r\n").split(",")]
        if self.index is None:
            missing = [c for c in COLUMNS if c not in cells]
            if missing:
                got = describe(", ".join(cells))
                raise self.fail(line, None,
                                f"header lacks column(s) {', '.join(missing)} (got {got}); an "
                                "Azure LLM trace CSV starts with "
                                "TIMESTAMP,ContextTokens,GeneratedTokens")
            self.index = {c: cells.index(c) for c in COLUMNS}
            self.width = len(cells)
            return None
        if len(cells) != self.width:
            raise self.fail(line, None, f"has {len(cells)} columns, the header has {self.width}")
        stamp, context, generated = (cells[self.index[c]] for c in COLUMNS)
        try:
            time_s = parse_azure_timestamp(stamp)
        except ValueError as e:
            raise self.fail(line, "TIMESTAMP", str(e)) from None
        return Row(
            line=line,
            time_s=time_s,
            prompt_tokens=self._cell_count(context, line, "ContextTokens"),
            output_tokens=self._cell_count(generated, line, "GeneratedTokens"),
        )

    def _cell_count(self, cell: str, line: int, fld: str) -> int:
        try:
            value = int(cell)
        except ValueError:
            raise self.fail(line, fld,
                            f"must be an integer token count, got {_show(cell)}") from None
        return self.count(value, line, fld, output=fld == "GeneratedTokens")


IMPORTER = Importer(
    name="azure",
    summary="Azure LLM inference trace CSV: TIMESTAMP, ContextTokens, GeneratedTokens",
    parser=AzureParser,
)
