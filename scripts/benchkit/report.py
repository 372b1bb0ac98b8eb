"""A benchmark's report: titled tables of rows, verdict lines, and the raw data, printed with
rich or written as JSON (NaN, meaning "no samples", as null)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

Row = Sequence[object]


@dataclass
class Section:
    """One table of a report: a title, column names and rows."""

    title: str
    columns: Sequence[str]
    rows: Sequence[Row] = field(default_factory=list)


@dataclass
class Report:
    """What one benchmark found: tables, verdict lines, and raw data for --json."""

    name: str
    sections: list[Section] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def render(self, console: Console) -> None:
        """Print the tables and notes with rich."""
        for section in self.sections:
            table = Table(title=f"{self.name}: {section.title}", title_justify="left")
            for column in section.columns:
                table.add_column(
                    column, justify="left" if column == section.columns[0] else "right"
                )
            for row in section.rows:
                table.add_row(*(cell(value) for value in row))
            console.print(table)
        for note in self.notes:
            console.print(f"- {note}", highlight=False)

    def as_json(self) -> dict[str, Any]:
        """The report as plain, JSON-safe data."""
        data: dict[str, Any] = json_safe(
            {
                "name": self.name,
                "tables": [
                    {
                        "title": s.title,
                        "columns": list(s.columns),
                        "rows": [list(r) for r in s.rows],
                    }
                    for s in self.sections
                ],
                "notes": self.notes,
                "data": self.data,
            }
        )
        return data


def cell(value: object) -> str:
    """A table cell: floats with sensible precision, ints with thousands separators, "-" for
    nan (no samples)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if math.isnan(value):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def met(ok: bool) -> str:
    """A verdict word."""
    return "met" if ok else "NOT met"


def json_safe(value: Any) -> Any:
    """value with every NaN and infinity replaced by None, so that it is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value
