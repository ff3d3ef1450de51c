"""What the Results and Runs screens share: a live list of the store's runs, shown in a table."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual import work
from textual.color import Color
from textual.screen import Screen
from textual.widgets import DataTable
from textual.worker import get_current_worker

from acetui.app.messages import RunsListed, StoreFailed
from acetui.app.summary import STATUS_COLOR
from acetui.app.watch import watch_runs
from acetui_core.store import RunRecord


class RunListScreen(Screen):
    """A screen fed by a thread that polls the store's run list; subclasses implement ``show_runs``."""

    def on_mount(self) -> None:
        self.runs: list[RunRecord] = []
        self.app.theme_changed_signal.subscribe(self, lambda theme: self.show_runs())
        self._watch()

    @work(thread=True, exclusive=True, group="runs")
    def _watch(self) -> None:
        watch_runs(self.app.store, self.post_message, get_current_worker().cancelled_event)

    def on_runs_listed(self, message: RunsListed) -> None:
        self.runs = message.runs
        self.show_runs()

    def on_store_failed(self, message: StoreFailed) -> None:
        self.notify(message.error, severity="error", timeout=10)

    def show_runs(self) -> None:
        raise NotImplementedError

    def cursor_run(self, table: DataTable) -> RunRecord | None:
        """The run under the table's cursor (rows are keyed by run id)."""
        if table.row_count == 0:
            return None
        key = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
        return next((run for run in self.runs if run.id == key), None)


def status_text(screen: Screen, status: str) -> Text:
    """A run status in its theme colour, for table cells (which take Rich text, not Textual markup)."""
    color = Color.parse(screen.app.theme_variables[STATUS_COLOR[status]])
    return Text(status, style=Style(color=color.rich_color))


def refill(table: DataTable, rows: list[tuple[str, tuple]]) -> None:
    """Replace the table's rows by ``(key, cells)``, keeping the cursor on the same key where it remains.

    Plain strings are shown verbatim (a model path with brackets is not markup)."""
    keep = None
    if table.row_count:
        keep = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
    table.clear()
    for key, cells in rows:
        table.add_row(*(Text(c) if isinstance(c, str) else c for c in cells), key=key)
    keys = [key for key, _ in rows]
    if keep in keys:
        table.move_cursor(row=keys.index(keep), animate=False)
