"""Tables that fit the terminal, every word whole: `FittedTable` (and `fitted`, which makes one of a rich Table)
narrows its columns down to their longest word and moves the columns that still do not fit into a continuation
table, the row labels repeated. Every table devicebench prints goes through here.

    COLUMNS=60 devicebench list     # every table fitted to a narrow terminal, its words whole
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text


@dataclasses.dataclass
class FittedColumn:
    """A column of a `FittedTable`: its heading, its cells, and the narrowest it may be without cutting a word."""

    heading: str
    cells: Sequence[RenderableType]  # a Sequence: a list of str is one too
    min_width: int | None = None  # None: its longest word, heading included (no_wrap: its widest cell)
    options: dict[str, Any] = dataclasses.field(default_factory=dict)  # for Table.add_column: justify, style

    def narrowest(self) -> int:
        texts = [self.heading, *self.cells]
        if self.min_width is not None:
            return self.min_width
        if self.options.get("no_wrap"):
            return max(plain_text(text).cell_len for text in texts)
        return max(longest_word(texts), _with_its_unit(self.heading))


@dataclasses.dataclass
class FittedTable:
    """A table that fits whatever prints it, every word whole: identifiers and numbers are never cut. A cell wraps
    only at its spaces (each column is at least as wide as its longest word); when the columns cannot stand side by
    side at their narrowest, the ones that do not fit follow in another table, the leading columns repeated. The
    title and the caption are paragraphs of the screen's width, wrapped between words (a rich title wraps at the
    table's). Only a word wider than the screen itself is folded."""

    title: str
    leading: list[FittedColumn]  # the labels that say which row is which: in every part
    columns: list[FittedColumn]
    table_options: dict[str, Any] = dataclasses.field(default_factory=dict)  # for Table(): box, caption...
    padding: int = 2  # columns of padding per table column: (0, 1) on each side
    edges: bool = True  # a border at both ends: one more rule than there are columns, else one fewer
    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # for Table.add_row: style, end_section

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        parts = self.parts(width)
        table_options = {
            name: value
            for name, value in self.table_options.items()
            if name not in ("caption", "caption_justify", "title", "title_justify")
        }
        for part, columns in enumerate(parts):
            if self.title:
                yield Text.from_markup(self.title + (" (continued)" if part else ""), style="table.title")
            yield self.table(columns, widths=self.widths(columns, width), options=table_options)
        caption = self.table_options.get("caption")
        if caption:
            yield Text.from_markup(caption, style="table.caption") if isinstance(caption, str) else caption

    def narrowest(self, width: int) -> dict[int, int]:
        """Each column's narrowest (by id): its longest word, the labels leaving FIGURE_ROOM beside them."""
        room = width - self.overhead(len(self.leading) + 1)
        label_room = max(LABEL_MIN_WIDTH, (room - FIGURE_ROOM) // max(1, len(self.leading)))
        floors = {id(column): min(column.narrowest(), label_room) for column in self.leading}
        labels = sum(floors.values())
        floors |= {id(column): max(1, min(column.narrowest(), room - labels)) for column in self.columns}
        return floors

    def parts(self, width: int) -> list[list[FittedColumn]]:
        """The columns of each table, in order: as many as fit at their narrowest, the leading ones in each."""
        floors = self.narrowest(width)
        parts: list[list[FittedColumn]] = []
        for column in self.columns:
            if (
                parts
                and sum(floors[id(item)] for item in [*parts[-1], column]) + self.overhead(len(parts[-1]) + 1) <= width
            ):
                parts[-1].append(column)
            else:
                parts.append([*self.leading, column])
        return parts or [list(self.leading)]

    def overhead(self, count: int) -> int:
        """Columns of `count` table columns that are not their content: padding and rules."""
        rules = 0 if self.table_options.get("box", True) is None else count + (1 if self.edges else -1)
        return count * self.padding + rules

    def widths(self, columns: list[FittedColumn], width: int) -> Sequence[int | None]:
        """Each column's width: its widest cell while all fit, else narrowed, the column with the most room to spare
        first, never below its narrowest (rich's own narrowing cuts words, and can leave a table wider than the
        screen), its heading kept on one line while others can give; below its narrowest only when even the
        narrowest do not fit (a word wider than the screen)."""
        widths = [max(plain_text(cell).cell_len for cell in [column.heading, *column.cells]) for column in columns]
        excess = sum(widths) + self.overhead(len(columns)) - width
        if excess <= 0:
            return [None] * len(columns)  # rich's own layout
        words = [self.narrowest(width)[id(column)] for column in columns]
        headings = [max(floor, plain_text(column.heading).cell_len) for floor, column in zip(words, columns)]
        for floor in (headings, words, [1] * len(columns)):  # headings whole while they can be, then words whole
            while excess > 0:
                spare, index = max((widths[index] - floor[index], index) for index in range(len(columns)))
                if spare <= 0:
                    break
                widths[index] -= 1
                excess -= 1
        return widths

    def table(
        self,
        columns: list[FittedColumn],
        *,
        widths: Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> Table:
        table = Table(padding=(0, self.padding // 2), **(options or {}))
        for column, column_width in zip(columns, widths or [None] * len(columns)):
            table.add_column(
                column.heading,
                **{
                    "overflow": "fold",
                    **column.options,
                    "width": column_width,
                    "no_wrap": column.options.get("no_wrap", False) and not column_width,
                },
            )
        for index in range(len(columns[0].cells) if columns else 0):
            table.add_row(
                *(column.cells[index] for column in columns), **(self.rows[index] if index < len(self.rows) else {})
            )
        return table


def fitted(table: Table, *, leading: int = 1) -> FittedTable:
    """`table` as a FittedTable: its first `leading` columns label the rows (repeated in a continuation); its title,
    caption, box, styles and row sections kept. Every table devicebench prints goes through here or FittedTable."""
    columns = [
        FittedColumn(
            column.header if isinstance(column.header, str) else str(column.header),
            list(column.cells),
            options={
                "justify": column.justify,
                "style": column.style,
                "header_style": column.header_style,
                "vertical": column.vertical,
                "no_wrap": column.no_wrap,
            },
        )
        for column in table.columns
    ]
    _, right, _, left = table.padding
    return FittedTable(
        str(table.title or ""),
        columns[:leading],
        columns[leading:],
        {
            "box": table.box,
            "show_header": table.show_header,
            "show_lines": table.show_lines,
            "show_edge": table.show_edge,
            "pad_edge": table.pad_edge,
            "header_style": table.header_style,
            "style": table.style,
            "caption": table.caption,
        },
        padding=left + right,
        edges=table.show_edge,
        rows=[{"style": row.style, "end_section": row.end_section} for row in table.rows],
    )


def plain_text(text: str | RenderableType) -> Text:
    """A cell as the text it shows, markup left out."""
    return text if isinstance(text, Text) else Text.from_markup(str(text))


def longest_word(texts: Iterable[RenderableType]) -> int:
    """The widest word (run of characters without a space) of `texts`, markup left out: the narrowest a column of
    them can be without cutting one."""
    return max((len(word) for text in texts for word in plain_text(text).plain.split()), default=1)


LABEL_MIN_WIDTH = 10  # a label longer than the screen allows folds, down to this width
FIGURE_ROOM = 12  # columns the labels leave for at least one figure beside them


def _with_its_unit(heading: str) -> int:
    """The width of a heading's last word together with the word before it where the last is a unit (`Warm-up s`,
    `Energy Wh`): a unit alone on a line of its own (`Warm-up` / `s`) reads as another heading. 0 for others."""
    words = Text.from_markup(heading).plain.split()
    return len(" ".join(words[-2:])) if len(words) > 1 and len(words[-1]) <= UNIT_LENGTH else 0


UNIT_LENGTH = 2  # characters of the longest unit a heading ends with: s, Wh


def label_column(heading: str, cells: list[str]) -> FittedColumn:
    return FittedColumn(heading, list(cells))
