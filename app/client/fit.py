"""Tables that fit the terminal: a cell is never broken inside a word or an id, nor between a
number and the words beside it ("ran 0.5 s", "GPU 0", "1 → 3"), and no column is squeezed to
nothing.

Left to itself, Rich squeezes every column of a table wider than the terminal: at 80 columns a
UUID came out in three pieces, and the last column of a table could shrink to an empty strip.
fitted_table decides instead. It sizes each column to its widest cell and tries, in this order,
until the table fits:

    1. each list cell on one line ("a 1, b 2");
    2. each list cell one item a line;
    3. the wrapped columns (free text) narrower, their lines broken between words, but never
       below WRAP_MIN nor below their longest word;
    4. the ids of the columns that allow it cut to their first characters and "…" (--json has
       them whole);
    5. as far as 4 again, without the optional columns, the rightmost first, until it fits.

Only a terminal too narrow even for what step 5 leaves hands the folding to Rich.
"""

from __future__ import annotations

import re
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
#: The narrowest a wrapped column is made (unless all its text is narrower): a few words a line.
WRAP_MIN = 16
#: Where a wrapped line may break: at a space with no digit beside it, and no "→", "~" or "≤" (a
#: number keeps its unit, its label and its change: "ran 0.5 s", "GPU 0", "none → 5", "~40 s",
#: "running ≤ 2").
BREAK = re.compile(r"(?<![\d→≤]) (?![\d→~≤])")
#: The steps 1 to 4 as (lists stacked, wrapped columns narrowed, ids cut).
STEPS = ((False, False, False), (True, False, False), (True, True, False), (True, True, True))


@dataclass(frozen=True)
class Column:
    """One column: its header and footer, how it aligns, whether it may be left out, whether
    its text may take several lines (wrap), and the characters of an id kept when it must be
    cut (short; 0: never cut)."""

    header: str
    justify: JustifyMethod = "left"
    footer: str = ""
    optional: bool = False
    wrap: bool = False
    short: int = 0


def fitted_table(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int) -> Table:
    """A table of these rows in at most width columns of the terminal, if it can be done."""
    kept = list(range(len(columns)))
    optional = [i for i in reversed(kept) if columns[i].optional]
    while True:
        for stacked, narrow, cut in STEPS:
            cells = [[_text(columns[i], row[i], stacked, cut) for i in kept] for row in rows]
            shown = [columns[i] for i in kept]
            widths = _widths(shown, cells, width if narrow else None)
            if sum(widths) + GAP * (len(widths) - 1) <= width:
                return _build(shown, cells, widths)
        if not optional:
            return _build(shown, cells, None)  # too narrow even so: Rich folds what it must
        kept.remove(optional.pop(0))


def _text(column: Column, cell: Cell, stacked: bool, cut: bool) -> Text:
    if isinstance(cell, list):
        return Text(("\n" if stacked else ", ").join(cell) or "-")
    if isinstance(cell, Text):
        return cell
    if cut and column.short and cell_len(cell) > column.short + 1:
        cell = cell[: column.short] + "…"
    return Text(cell)


def _widths(columns: list[Column], cells: list[list[Text]], width: int | None) -> list[int]:
    """Each column's width: its widest line, footer or header word (a header may take two
    lines). Given a width, the wrapped columns give up what the others need, the widest first,
    down to their least."""
    widths, least = [], []
    for i, column in enumerate(columns):
        lines = [line for row in cells for line in row[i].plain.splitlines()]
        words = [*column.header.split(), column.footer]
        widest = max([*map(cell_len, [*words, *lines]), 1])
        widths.append(widest)
        units = [unit for line in lines for unit in BREAK.split(line)]
        floor = max([*map(cell_len, [*words, *units]), min(WRAP_MIN, widest)])
        least.append(floor if column.wrap else widest)
    if width is not None:
        excess = sum(widths) + GAP * (len(widths) - 1) - width
        while excess > 0:
            room = [i for i in range(len(widths)) if widths[i] > least[i]]
            if not room:
                break
            widest = max(room, key=lambda i: widths[i])
            widths[widest] -= 1
            excess -= 1
    return widths


def _wrapped(text: Text, width: int) -> Text:
    """The cell's lines broken where BREAK allows, to fit width; a plain cell only (a styled
    one is a short word, and Rich keeps its style)."""
    if text.spans or text.style or max(map(cell_len, text.plain.splitlines()), default=0) <= width:
        return text
    lines = []
    for line in text.plain.splitlines():
        current = ""
        for unit in BREAK.split(line):
            if current and cell_len(current) + 1 + cell_len(unit) > width:
                lines.append(current)
                current = unit
            else:
                current = f"{current} {unit}" if current else unit
        lines.append(current)
    return Text("\n".join(lines))


def _build(columns: list[Column], cells: list[list[Text]], widths: list[int] | None) -> Table:
    footer = any(column.footer for column in columns)
    table = Table(box=box.SIMPLE, show_edge=False, show_footer=footer, pad_edge=False)
    for i, column in enumerate(columns):
        table.add_column(
            column.header,
            justify=column.justify,
            footer=column.footer,
            width=None if widths is None else widths[i],
            overflow="fold",
        )
    for row in cells:
        table.add_row(*(row if widths is None else map(_wrapped, row, widths)))
    return table
