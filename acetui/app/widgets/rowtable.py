"""``RowTable``: the app's tables of runs and layers, one row at a time (a row cursor, zebra stripes)."""

from __future__ import annotations

from textual.binding import Binding
from textual.widgets import DataTable


class RowTable(DataTable):
    # DataTable's home and end move a cell or column cursor to the first or last column; with a row cursor
    # they did nothing a user could see. Here they go to the first and last row, as in a list.
    BINDINGS = [
        Binding("home", "scroll_top", "First row", show=False),
        Binding("end", "scroll_bottom", "Last row", show=False),
    ]

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
