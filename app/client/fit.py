"""Tables that fit the terminal: a cell is never broken in the middle of a word.

Left to itself, Rich squeezes every column of a table wider than the terminal, and at 80 columns
a description or a list of counters comes out a few letters a line. fitted_table decides
instead, in this order, and sizes each column to its widest cell:

    1. every column, each list cell on one line ("a 1, b 2");
    2. every column, each list cell one item a line;
    3. as 2, without the optional columns, the rightmost first, until it fits.

Only a terminal too narrow for the required columns leaves the folding to Rich.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.cells import cell_len
from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

Cell = str | Text | list[str]
#: What stands between two columns: the box's divider and a space of padding on either side.
GAP = 3


@dataclass(frozen=True)
class Column:
    """One column: its header and footer, how it aligns, and whether it may be left out."""

    header: str
    justify: JustifyMethod = "left"
    footer: str = ""
    optional: bool = False


def fitted_table(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int) -> Table:
    """A table of these rows in at most width columns of the terminal, if it can be done."""
    kept = list(range(len(columns)))
    for stacked in (False, True):
        cells = [[_text(cell, stacked) for cell in row] for row in rows]
        widths = [_width(column, [row[i] for row in cells]) for i, column in enumerate(columns)]
        if stacked:
            for i in reversed(kept):
                if _total(widths, kept) <= width:
                    break
                if columns[i].optional:
                    kept.remove(i)
        if _total(widths, kept) <= width:
            return _build(columns, cells, kept, widths)
    return _build(columns, cells, kept, None)  # too narrow even so: Rich folds what it must


def _text(cell: Cell, stacked: bool) -> Text:
    if isinstance(cell, list):
        return Text(("\n" if stacked else ", ").join(cell) or "-")
    return cell if isinstance(cell, Text) else Text(cell)


def _width(column: Column, cells: list[Text]) -> int:
    """The column's width: its widest cell line, footer, or header word (a header may take two
    lines, broken between words)."""
    words = [cell_len(word) for word in column.header.split()]
    lines = [cell_len(line) for cell in cells for line in cell.plain.splitlines()]
    return max([*words, cell_len(column.footer), *lines, 1])


def _total(widths: list[int], kept: list[int]) -> int:
    return sum(widths[i] for i in kept) + GAP * (len(kept) - 1)


def _build(
    columns: Sequence[Column], cells: list[list[Text]], kept: list[int], widths: list[int] | None
) -> Table:
    footer = any(column.footer for column in columns)
    table = Table(box=box.SIMPLE, show_edge=False, show_footer=footer, pad_edge=False)
    for i in kept:
        column = columns[i]
        table.add_column(
            column.header,
            justify=column.justify,
            footer=column.footer,
            width=None if widths is None else widths[i],
            overflow="fold",
        )
    for row in cells:
        table.add_row(*(row[i] for i in kept))
    return table
