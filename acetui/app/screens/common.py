"""What the screens share: the live list of the store's runs shown in a table, sortable and filterable."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual import events, getters, on
from textual.actions import SkipAction
from textual.binding import Binding
from textual.color import Color
from textual.coordinate import Coordinate
from textual.screen import Screen
from textual.widgets import DataTable, Input

from acetui.app.keyorder import keys_typed_before
from acetui.app.summary import STATUS_COLOR
from acetui.app.workbench import Workbench
from acetui_core.basics.choices import RunStatus
from acetui_core.storage.store_rows import RunRecord


@dataclass(frozen=True)
class Column:
    """A column of a run table: its title, the key its sort uses, and (where the screen draws cells from
    it) its cell."""

    title: str
    order: Callable[[RunRecord], object]
    cell: Callable[[RunRecord], str] | None = None


def missing_last(value: float | None) -> float:
    """A sort key that puts runs without the value (or with NaN, a model's overflow) after every run with one."""
    return math.inf if value is None or math.isnan(value) else value


Cell = str | Text
PADDING = 2  # a DataTable cell's padding, one column each side


@dataclass
class Fitted:
    """The columns of a run table that fit its width (indices into its columns, in order), each row's
    cells of those, and ``(title, value)`` of the columns left out because every row has that value."""

    shown: list[int]
    rows: list[tuple[str, tuple[Cell, ...]]]
    common: list[tuple[str, str]]


def fit_columns(
    titles: list[str],
    rows: Sequence[tuple[str, Sequence[Cell]]],
    width: int,
    *,
    same_first: tuple[str, ...] = (),
    optional: tuple[str, ...] = (),
    briefs: dict[str, list[str]] | None = None,
    squeeze: str | None = None,
    wrap: str | None = None,
    last: tuple[str, ...] = (),
) -> Fitted:
    """The columns of ``rows`` (``(key, cells)``) that fit ``width``. Columns that do not tell the rows apart
    go first (``same_first``, in order: left out while every row has one value), then ``optional`` ones;
    then columns with ``briefs`` (a shorter cell per row) take them; then the ``squeeze`` column's cells
    are cut at their start (a model path keeps its name); then the ``wrap`` column's (plain) cells are
    wrapped at spaces onto the lines they need (a long method label: every word of it stays, and the
    columns after it too); then, while the table is still too wide, the ``last`` columns go (in order), so
    that no title is cut at the screen's edge."""
    cells = [list(row) for _, row in rows]

    def text(cell: Cell) -> str:
        return cell.plain if isinstance(cell, Text) else cell

    widths = [
        max([cell_len(title), *(cell_len(text(row[i])) for row in cells)]) + PADDING for i, title in enumerate(titles)
    ]
    shown = list(range(len(titles)))
    common = []

    def total() -> int:
        return sum(widths[i] for i in shown)

    for title in same_first:
        index = titles.index(title)
        values = {text(row[index]) for row in cells}
        if total() > width and len(values) == 1 and len(cells) > 1:
            shown.remove(index)
            common.append((title, values.pop()))
    for title in optional:
        if total() > width and titles.index(title) in shown:
            shown.remove(titles.index(title))
    for title, brief in (briefs or {}).items():
        index = titles.index(title)
        if total() > width and index in shown:
            for row, cell in zip(cells, brief, strict=True):
                row[index] = cell
            widths[index] = max([cell_len(title), *map(cell_len, brief)]) + PADDING
    if squeeze is not None and total() > width and titles.index(squeeze) in shown:
        index = titles.index(squeeze)
        room = max(8, widths[index] - (total() - width)) - PADDING
        for row in cells:
            row[index] = _cut(text(row[index]), room)
        widths[index] = max([cell_len(titles[index]), *(cell_len(text(row[index])) for row in cells)]) + PADDING
    if wrap is not None and total() > width and titles.index(wrap) in shown:
        index = titles.index(wrap)
        words = [word for row in cells for word in text(row[index]).split()]
        room = max(widths[index] - (total() - width) - PADDING, *map(cell_len, words), cell_len(wrap))
        for row in cells:
            row[index] = "\n".join(textwrap.wrap(text(row[index]), room, break_on_hyphens=False))
        widths[index] = room + PADDING
    for title in last:
        if total() > width and titles.index(title) in shown:
            shown.remove(titles.index(title))
    return Fitted(
        shown, [(key, tuple(row[i] for i in shown)) for (key, _), row in zip(rows, cells, strict=True)], common
    )


def _cut(text: str, room: int) -> str:
    """``text`` in ``room`` columns, keeping its end: ``…M2-135M-Instruct.Q4_1.gguf``."""
    return text if cell_len(text) <= room else "…" + text[-(room - 1) :]


def exiting(screen: Screen) -> bool:
    """The app exits: a screen it was composing then has none of its widgets (Textual mounts nothing into a
    closing screen) yet still gets its Mount event, where a query would raise (a switch and a quit at once)."""
    return screen.app.return_code is not None


class RunListScreen(Screen):
    """A screen showing the app's run list (which one thread polls for every screen); subclasses
    implement ``show_runs``."""

    app = getters.app(Workbench)

    def on_mount(self) -> None:
        self.runs: list[RunRecord] = list(self.app.runs)
        if exiting(self):
            return
        self.app.theme_changed_signal.subscribe(self, lambda theme: self.show_runs())
        self.app.runs_signal.subscribe(self, self._runs_listed)
        self.show_runs()

    def _runs_listed(self, runs: list[RunRecord]) -> None:
        self.runs = runs
        self.show_runs()

    def show_runs(self) -> None:
        raise NotImplementedError

    def on_resize(self) -> None:
        self.show_runs()  # the columns that fit a narrower or wider terminal

    def table_width(self) -> int:
        """The columns a run table has for its cells (it spans the screen; its scrollbar and edges take four)."""
        return self.app.size.width - 4

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
    shown_columns: list[int] | None = None  # the columns the table shows, when not all fit (fit_columns)

    @on(events.Mount)
    def follow_the_filter(self) -> None:
        """The table follows its filter as each key edits it: a watch runs as the field's value changes,
        where the field's Changed message reached the screen only after the keys typed after it in a burst
        had acted on the old rows (``/ C-u magnitude Enter Enter`` opened a run the filter hides)."""
        if not exiting(self):
            self.watch(self.query_one(f"#{self.FILTER}", Input), "value", self.show_runs, init=False)

    async def filter_applied(self) -> None:
        """Wait until the keys typed into the filter before now are in it (and so in the table): enter or
        escape leaving it acts on the table it shows, and so do the keys after them in the burst."""
        await keys_typed_before(self.query_one(f"#{self.FILTER}", Input))

    def action_focus_filter(self) -> None:
        """``/``: the filter. Its binding is a priority one, run by the app as it reads the key, and focus
        moves at once (Widget.focus would defer it): the keys read in the same burst as ``/`` (tmux, a fast
        typist over SSH) then reach the filter, not the table, where ``s`` sorts and ``d`` deletes. The
        filter fields do not select their text on focus: what is typed after ``/`` adds to the filter."""
        field = self.query_one(f"#{self.FILTER}", Input)
        if self.focused is field:
            raise SkipAction()  # a "/" typed in the filter is text (model:org/llama)
        self.set_focus(field)

    async def action_focus_table(self) -> None:
        table = self.query_one(f"#{self.TABLE}", DataTable)
        if self.focused is table:
            raise SkipAction()  # escape on the table: the app's (it closes the keys panel or a maximised pane)
        await self.filter_applied()
        self.set_focus(table)

    async def action_leave_filter(self) -> None:
        """Enter in the filter: back to the table, filtered by every key typed before it, at once (``s`` typed
        next in the burst sorts it, ``End`` goes to its last row)."""
        if self.focused is not self.query_one(f"#{self.FILTER}", Input):
            raise SkipAction()  # enter elsewhere: the table's (open the run)
        await self.filter_applied()
        self.set_focus(self.query_one(f"#{self.TABLE}", DataTable))

    def table_run(self) -> RunRecord | None:
        """The highlighted run, for a key that leaves the screen (``o``, enter, ``u``). Those are priority
        bindings, run and awaited as the app reads the key, so the keys after it in the same burst reach the
        screen it opens (``enter l``: the Run screen's log, not a LaTeX export here). In the filter the key
        is not this screen's: text, or enter back to the table (SkipAction)."""
        if isinstance(self.focused, Input):
            raise SkipAction()
        return self.cursor_run(self.query_one(f"#{self.TABLE}", DataTable))

    async def action_open_run(self) -> None:
        run = self.table_run()
        if run is not None:
            await self.app.follow(run.id)

    @on(DataTable.RowSelected)
    async def _row_clicked(self, event: DataTable.RowSelected) -> None:
        """A click on the highlighted row opens it (enter from the keyboard never reaches the table: the screen's
        priority binding takes it)."""
        if event.data_table.id == self.TABLE and (run := self.cursor_run(event.data_table)) is not None:
            await self.app.follow(run.id)

    def sort_key(self):
        return self.COLUMNS[self.sort_column].order

    def sort_text(self) -> str:
        return f"by {self.COLUMNS[self.sort_column].title} {'↓' if self.descending else '↑'}"

    @on(DataTable.HeaderSelected)
    def _header_clicked(self, event: DataTable.HeaderSelected) -> None:
        column = event.column_index - self.LEADING
        if column < 0:
            return
        if self.shown_columns is not None:
            column = self.shown_columns[column]
        self.descending = not self.descending if column == self.sort_column else False
        self.sort_column = column
        self.show_runs()

    def action_sort(self, step: int) -> None:
        """The next (``step`` 1) or previous (-1) column the table shows: a column left out because every
        row has one value, or for want of room, sorts nothing a user can see."""
        column = self.sort_column
        for _ in self.COLUMNS:
            column = (column + step) % len(self.COLUMNS)
            if self.shown_columns is None or column in self.shown_columns:
                break
        self.sort_column = column
        self.descending = False
        self.show_runs()

    def action_reverse(self) -> None:
        self.descending = not self.descending
        self.show_runs()


def filter_keys(what: str) -> list[Binding]:
    """``/`` of a ``SortedRunListScreen``, to its filter field, and escape and enter, back to its table:
    priority bindings, run as the app reads the key (``action_focus_filter`` says why)."""
    return [
        Binding(
            "slash",
            "focus_filter",
            "Filter",
            show=False,
            priority=True,
            tooltip=f"Filter by {what} (enter or escape: back)",
        ),
        Binding(
            "escape", "focus_table", "Table", show=False, priority=True, tooltip="Back to the table from the filter"
        ),
        Binding("enter", "leave_filter", show=False, priority=True),
    ]


def open_keys(description: str, *, show: bool) -> list[Binding]:
    """``o`` and enter on a run table: the highlighted run on the Run screen. Priority bindings, run as the
    app reads the key (``SortedRunListScreen.table_run`` says why); the footer shows ``o``."""
    tooltip = "The highlighted run on the Run screen"
    return [
        Binding("o", "open_run", description, show=show, priority=True, tooltip=tooltip),
        Binding("enter", "open_run", description, show=False, priority=True, tooltip=tooltip),
    ]


def status_text(screen: Screen, status: RunStatus, damaged: bool = False) -> Text:
    """A run status in its theme colour, for table cells (which take Rich text, not Textual markup);
    ``damaged``: part of the run's record cannot be read, said as ``acetui runs`` says it."""
    color = Color.parse(screen.app.theme_variables[STATUS_COLOR[status]])
    return Text(f"{status} (damaged)" if damaged else status, style=Style(color=color.rich_color))


def refill(table: DataTable, titles: list[str], rows: list[tuple[str, tuple]]) -> None:
    """Replace the table's columns by ``titles`` (only when they changed: a narrower terminal shows fewer) and
    its rows by ``(key, cells)``, keeping the cursor on the same key where it remains.

    Plain strings are shown verbatim (a model path with brackets is not markup); a row is as tall as its
    cell of most lines (a wrapped one: ``fit_columns``)."""
    keep = None
    if table.row_count:
        keep = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
    # The cursor's run is read first: new columns empty the table, and a resize that changed the columns
    # put the cursor back on the first run (enter, d, c, k, u then acted on a run the user had not picked).
    if [str(column.label) for column in table.ordered_columns] != titles:
        table.clear(columns=True)
        table.add_columns(*titles)
    table.clear()
    for key, cells in rows:
        lines = max((len((c if isinstance(c, str) else c.plain).split("\n")) for c in cells), default=1)
        table.add_row(*(Text(c) if isinstance(c, str) else c for c in cells), key=key, height=lines)
    keys = [key for key, _ in rows]
    if keep in keys:
        table.move_cursor(row=keys.index(keep), animate=False)
