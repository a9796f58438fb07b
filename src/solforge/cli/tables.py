"""Tables that stay readable in an 80-column terminal.

No vertical rules (they cost three characters a column), a column that holds no value at all is
left out, text columns fold where they must, and numbers are never cut: their unit goes in the
header once (see solforge.humanize.time_unit), so each cell is a short plain number.
"""

from __future__ import annotations

from rich import box
from rich.markup import escape
from rich.table import Table

EMPTY = "-"
MIN_TEXT = 12  # a text column is never squeezed narrower than this (unless all its text is)


def compact_table(title: str, columns: dict[str, list[str]], text: set[str],
                  keep: set[str] = frozenset()) -> Table:
    """A table of `columns` (header -> cells, all the same length). Columns named in `text` are
    left-aligned and fold; the others are right-aligned numbers kept whole. A column whose
    every cell is EMPTY is dropped unless it is text or named in `keep`. Cells are plain text
    (markup is escaped)."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)
    kept = [name for name, cells in columns.items()
            if name in text or name in keep or any(cell != EMPTY for cell in cells)]
    for name in kept:
        is_text = name in text
        longest = max((len(cell) for cell in columns[name]), default=0)
        # A number keeps its whole width (its header may wrap at a space); text folds.
        table.add_column(name, justify="left" if is_text else "right", overflow="fold",
                         min_width=min(max(longest, len(name)), MIN_TEXT) if is_text
                         else longest)
    for row in zip(*(columns[name] for name in kept)):
        table.add_row(*(escape(cell) for cell in row))
    return table
