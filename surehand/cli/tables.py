"""Tables that fit the terminal without cutting an id.

An id is what a user copies into the next command (``surehand show TASK-…``), so an id column is
never wrapped or cut. Everything else gives way first, at render time (the width is the
terminal's, or ``COLUMNS``): text columns (a subject) wrap, and optional columns are shown only
while they fit, the most useful first. Shown columns keep their order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

Cell = str | Text  # a str is rich markup


@dataclass(frozen=True)
class Column:
    """A column: ``whole`` values are never wrapped or cut (ids, codes, numbers); the others
    wrap, at least ``minimum`` wide, and keep ``room`` while optional columns are added.
    ``rank``: None for a column always shown, else its place among the optional ones (1 is
    added first)."""

    header: str
    whole: bool = True
    rank: int | None = None
    minimum: int = 10
    room: int = 20


class FittedTable:
    """A rich renderable: the table of ``rows`` under ``columns`` as wide as the console
    allows, keeping every whole column whole (see the module's docstring)."""

    def __init__(self, title: str, columns: Sequence[Column], rows: Sequence[Sequence[Cell]]):
        self.title, self.columns, self.rows = title, list(columns), [list(row) for row in rows]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table(options.max_width)

    def table(self, width: int) -> Table:
        """The rich Table for a terminal ``width`` columns wide."""
        shown = self.chosen(width)
        table = Table(title=self.title)
        for index in shown:
            column = self.columns[index]
            if column.whole:
                table.add_column(column.header, no_wrap=True, min_width=self.natural(index))
            else:
                table.add_column(column.header, overflow="fold", min_width=column.minimum)
        for row in self.rows:
            table.add_row(*(row[index] for index in shown))
        return table

    def chosen(self, width: int) -> list[int]:
        """Indexes of the columns shown at ``width``: the always-shown ones (text ones only if
        they fit at their minimum), then the optional ones by rank while every text column
        keeps its room."""
        always = [i for i, column in enumerate(self.columns) if column.rank is None]
        shown = [i for i in always if self.columns[i].whole]
        shown += [i for i in always if not self.columns[i].whole and self._fits(shown, i, width)]
        optional = sorted(
            (i for i, column in enumerate(self.columns) if column.rank is not None),
            key=lambda i: self.columns[i].rank or 0,
        )
        for index in optional:
            if self._fits(shown, index, width, roomy=True):
                shown.append(index)
        return sorted(shown)

    def _fits(self, shown: list[int], index: int, width: int, *, roomy: bool = False) -> bool:
        wanted = [*shown, index]
        needed = sum(self._width(i, roomy) for i in wanted)
        return needed + 3 * len(wanted) + 1 <= width  # padding 1+1 and a border each, + edge

    def _width(self, index: int, roomy: bool) -> int:
        column = self.columns[index]
        if column.whole:
            return self.natural(index)
        return min(self.natural(index), column.room if roomy else column.minimum)

    def natural(self, index: int) -> int:
        """The width of column ``index`` with nothing wrapped (its header's at least)."""
        cells = [_text(row[index]).cell_len for row in self.rows]
        return max([Text(self.columns[index].header).cell_len, *cells])


def _text(cell: Cell) -> Text:
    return cell if isinstance(cell, Text) else Text.from_markup(cell)
