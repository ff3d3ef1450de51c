"""Tables as plain text: each cell padded to its column's widest, left-aligned or, for numbers,
right-aligned. ``acetui runs`` and ``acetui overlap``, the verdict report and the Markdown export lay
out their columns here."""

from __future__ import annotations

import textwrap
from collections.abc import Container, Sequence

GAP = "  "


def aligned(lines: Sequence[Sequence[object]], right: Container[int] = ()) -> list[list[str]]:
    """Every cell as text padded to its column's width: left-aligned, or right-aligned in the columns
    whose index is in ``right``. Every line has a cell per column."""
    cells = [[str(cell) for cell in line] for line in lines]
    widths = [max(len(line[i]) for line in cells) for i in range(len(cells[0]))]
    return [
        [cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(line, widths, strict=True))]
        for line in cells
    ]


def text_table(header: Sequence[str], rows: Sequence[Sequence[object]], right: Container[int] = ()) -> str:
    """A header and its rows in columns two spaces apart, no space at the end of a line."""
    return "\n".join(line for row in table_rows(header, rows, right) for line in row)


def table_rows(
    header: Sequence[str],
    rows: Sequence[Sequence[object]],
    right: Container[int] = (),
    width: int | None = None,
    fold: Sequence[int] = (),
) -> list[list[str]]:
    """The text lines of the header and of each row, as ``text_table`` lays them out. Given a ``width``
    the table is wider than, the cells of the ``fold`` columns (long names) wrap over several lines, the
    widest column first, so that a terminal of that width shows each row whole rather than breaking every
    line at its edge."""
    cells = [[str(cell) for cell in line] for line in [header, *rows]]
    widths = _fitted(cells, width, fold)
    parts = [[_wrapped(cell, widths[i]) if i in fold else [cell] for i, cell in enumerate(line)] for line in cells]
    depths = [max(len(part) for part in line) for line in parts]
    flat = [
        [part[k] if k < len(part) else "" for part in line]
        for line, depth in zip(parts, depths, strict=True)
        for k in range(depth)
    ]
    text = iter(GAP.join(line).rstrip() for line in aligned(flat, right))
    return [[next(text) for _ in range(depth)] for depth in depths]


def _wrapped(cell: str, width: int) -> list[str]:
    """A cell's lines at most ``width`` long, broken between words, and inside a word (a file's name)
    only where it is longer than the column; never at a hyphen, which would split ``CosP+VarP-16``."""
    return textwrap.wrap(cell, width, break_on_hyphens=False) or [""]


def _fitted(cells: list[list[str]], width: int | None, fold: Sequence[int]) -> list[int]:
    """The columns' widths, the ``fold`` columns narrowed one character at a time, the widest first,
    until the table fits ``width``. A folded column keeps its header's width and its longest word up to
    12 characters (a method's name whole), below which a name reads as noise."""
    widths = [max(len(line[i]) for line in cells) for i in range(len(cells[0]))]
    if width is None:
        return widths
    longest_word = {i: max(len(word) for line in cells for word in line[i].split() or [""]) for i in fold}
    floor = {i: max(len(cells[0][i]), min(12, longest_word[i])) for i in fold}
    excess = sum(widths) + len(GAP) * (len(widths) - 1) - width
    while excess > 0 and (shrinkable := [i for i in fold if widths[i] > floor[i]]):
        widths[max(shrinkable, key=lambda i: widths[i])] -= 1
        excess -= 1
    return widths
