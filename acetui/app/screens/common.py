"""What the screens share: the live list of the store's runs shown in a table, sortable and filterable."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual import getters, on
from textual.actions import SkipAction
from textual.binding import Binding
from textual.color import Color
from textual.coordinate import Coordinate
from textual.screen import Screen
from textual.widgets import DataTable, Input

from acetui.app.summary import STATUS_COLOR
from acetui.app.workbench import Workbench
from acetui_core.choices import RunStatus
from acetui_core.store_rows import RunRecord


class RunListScreen(Screen):
    """A screen showing the app's run list (which one thread polls for every screen); subclasses
    implement ``show_runs``."""

    app = getters.app(Workbench)

    def on_mount(self) -> None:
        self.runs: list[RunRecord] = list(self.app.runs)
        self.app.theme_changed_signal.subscribe(self, lambda theme: self.show_runs())
        self.app.runs_signal.subscribe(self, self._runs_listed)
        self.show_runs()

    def _runs_listed(self, runs: list[RunRecord]) -> None:
        self.runs = runs
        self.show_runs()

    def show_runs(self) -> None:
        raise NotImplementedError

    def cursor_run(self, table: DataTable) -> RunRecord | None:
        """The run under the table's cursor (rows are keyed by run id)."""
        if table.row_count == 0:
            return None
        key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        return next((run for run in self.runs if run.id == key), None)


class SortedRunListScreen(RunListScreen):
    """A run list whose table sorts by column: ``s``/``S`` step through the columns, ``r`` reverses, a
    header click sorts by that column (again: reverses). Subclasses set ``COLUMNS`` (each with an ``order``
    key) and ``sort_column``/``descending`` before mounting; ``LEADING`` table columns precede them.
    ``/`` focuses the filter field ``FILTER``; enter or escape there goes back to the table ``TABLE``."""

    COLUMNS: list = []
    LEADING = 0
    FILTER = ""  # the ids of the filter field and of the table
    TABLE = ""
    sort_column = 0
    descending = False

    def action_focus_filter(self) -> None:
        """``/``: the filter. Its binding is a priority one, run by the app as it reads the key, and focus
        moves at once (Widget.focus would defer it): the keys read in the same burst as ``/`` (tmux, a fast
        typist over SSH) then reach the filter, not the table, where ``s`` sorts and ``d`` deletes."""
        field = self.query_one(f"#{self.FILTER}", Input)
        if self.focused is field:
            raise SkipAction()  # a "/" typed in the filter is text (model:org/llama)
        self.set_focus(field)

    def action_focus_table(self) -> None:
        table = self.query_one(f"#{self.TABLE}", DataTable)
        if self.focused is table:
            raise SkipAction()  # escape on the table: the app's (it closes the keys panel or a maximised pane)
        self.set_focus(table)

    @on(Input.Submitted)
    def _filter_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == self.FILTER:
            self.set_focus(self.query_one(f"#{self.TABLE}", DataTable))

    def sort_key(self):
        return self.COLUMNS[self.sort_column].order

    def sort_text(self) -> str:
        return f"by {self.COLUMNS[self.sort_column].title} {'↓' if self.descending else '↑'}"

    @on(DataTable.HeaderSelected)
    def _header_clicked(self, event: DataTable.HeaderSelected) -> None:
        column = event.column_index - self.LEADING
        if column < 0:
            return
        self.descending = not self.descending if column == self.sort_column else False
        self.sort_column = column
        self.show_runs()

    def action_sort(self, step: int) -> None:
        self.sort_column = (self.sort_column + step) % len(self.COLUMNS)
        self.descending = False
        self.show_runs()

    def action_reverse(self) -> None:
        self.descending = not self.descending
        self.show_runs()


def filter_keys(what: str) -> list[Binding]:
    """``/`` and escape of a ``SortedRunListScreen``: to its filter field and back to its table. ``/`` is a
    priority binding, run as the app reads the key (``action_focus_filter`` says why)."""
    return [
        Binding(
            "slash",
            "focus_filter",
            "Filter",
            show=False,
            priority=True,
            tooltip=f"Filter by {what} (enter or escape: back)",
        ),
        Binding("escape", "focus_table", "Table", show=False, tooltip="Back to the table from the filter"),
    ]


def status_text(screen: Screen, status: RunStatus) -> Text:
    """A run status in its theme colour, for table cells (which take Rich text, not Textual markup)."""
    color = Color.parse(screen.app.theme_variables[STATUS_COLOR[status]])
    return Text(status, style=Style(color=color.rich_color))


def refill(table: DataTable, rows: list[tuple[str, tuple]]) -> None:
    """Replace the table's rows by ``(key, cells)``, keeping the cursor on the same key where it remains.

    Plain strings are shown verbatim (a model path with brackets is not markup)."""
    keep = None
    if table.row_count:
        keep = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
    table.clear()
    for key, cells in rows:
        table.add_row(*(Text(c) if isinstance(c, str) else c for c in cells), key=key)
    keys = [key for key, _ in rows]
    if keep in keys:
        table.move_cursor(row=keys.index(keep), animate=False)
