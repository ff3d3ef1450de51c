"""Tables as plain text: each cell padded to its column's widest, left-aligned or, for numbers,
right-aligned. ``acetui runs`` and ``acetui overlap``, the verdict report and the Markdown export lay
out their columns here."""

from __future__ import annotations

from collections.abc import Container, Sequence


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
    return "\n".join("  ".join(line).rstrip() for line in aligned([header, *rows], right))
