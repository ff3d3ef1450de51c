"""Runs: every run in the store with its status, progress, perplexity and duration, newest first (as
``acetui runs`` lists them), filtered by status, model or method and sorted by any column; open (live when
it runs), re-run or duplicate into the New run form, cancel, force-kill one that ignores cancel, delete."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.markup import escape
from textual.widgets import DataTable, Footer, Header, Input, Static

from acetui.app import summary
from acetui.app.confirm import ConfirmScreen
from acetui.app.screens.common import (
    Column,
    SortedRunListScreen,
    filter_keys,
    fit_columns,
    missing_last,
    open_keys,
    refill,
    status_text,
)
from acetui.app.screens.new_run import rerun
from acetui.app.summary import STATUS_COLOR
from acetui.app.widgets.rowtable import RowTable
from acetui.app.widgets.textfield import TextField
from acetui_core.basics.errors import UserError
from acetui_core.run.config import model_name
from acetui_core.storage.store_rows import RunRecord
from acetui_core.storage.store_schema import STATUSES

BAR_WIDTH = 6


def progress(run: RunRecord) -> Text:
    """Layers done: a bar while the run is active, the count after (it reads without colour too)."""
    count = f"{run.layers_done}/{run.num_layers}" if run.num_layers else str(run.layers_done)
    if not run.active or not run.num_layers:
        return Text(count)
    filled = round(BAR_WIDTH * min(run.layers_done / run.num_layers, 1))
    return Text.assemble(("█" * filled, "bold"), ("░" * (BAR_WIDTH - filled), "dim"), " ", count)


def duration(run: RunRecord) -> str:
    """How long the run took, or has taken so far."""
    return summary.fmt_seconds(summary.elapsed_seconds(run, summary.clock()))


COLUMNS = [
    Column("Run", lambda r: r.id),
    Column("Status", lambda r: STATUSES.index(r.status) if r.status in STATUSES else len(STATUSES)),
    Column("Method", lambda r: r.label),
    Column("Sparsity", summary.sparsity_order),
    Column("Layers", lambda r: r.layers_done),
    Column("PPL", lambda r: missing_last(r.ppl)),
    Column("Took", lambda r: missing_last(summary.elapsed_seconds(r, summary.clock()))),
    Column("Model", lambda r: model_name(r.config.model)),
    Column("Created", lambda r: (r.created, r.id)),
]
NEWEST_FIRST = (len(COLUMNS) - 1, True)  # the order runs are listed in everywhere (the CLI's too)


def matches(run: RunRecord, words: list[str]) -> bool:
    """Whether every word of a filter is in the run's status, model or method (``status:``, ``model:``
    or ``method:`` before a word looks in that one only)."""
    where = {
        "status": run.status,
        "model": run.config.model.lower(),
        "method": f"{run.config.method} {run.label}".lower(),
    }
    for word in words:
        field, colon, text = word.partition(":")
        if not (colon and field in where):
            field, text = "", word
        if not any(text in place for place in ([where[field]] if field else where.values())):
            return False
    return True


class RunsScreen(SortedRunListScreen):
    AUTO_FOCUS = "#runs"
    COLUMNS = COLUMNS
    FILTER, TABLE = "runs-filter", "runs"
    BINDINGS = [
        *open_keys("Open", show=True),
        Binding("c", "cancel_run", "Cancel", tooltip="Stop the highlighted run at its next check (asks first)"),
        Binding(
            "k",
            "kill_run",
            "Kill",
            tooltip="End the highlighted run's process now, once a cancel was asked and ignored (asks first)",
        ),
        Binding("d", "delete_run", "Delete", tooltip="Remove the highlighted ended run from the store (asks first)"),
        Binding(
            "u",
            "rerun",
            "Re-run",
            priority=True,  # it leaves the screen: SortedRunListScreen.table_run says why
            tooltip="New run filled with the highlighted run's settings (ctrl+r starts it; change a field to vary it)",
        ),
        Binding("s", "sort(1)", "Sort", tooltip="Sort by the next column (header clicks too)"),
        Binding("S", "sort(-1)", "Sort back", show=False, tooltip="Sort by the previous column"),
        Binding("r", "reverse", "Reverse sort", show=False, tooltip="Reverse the order"),
        *filter_keys("status, model or method"),
    ]

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="runs-bar"):
            yield TextField(
                placeholder="/ filter: status, model or method words",  # the key first: a narrow field cuts the end
                id="runs-filter",
                compact=True,
                select_on_focus=False,
            )
            yield Static("", id="runs-info")
        yield RowTable(id="runs")
        yield Static("", id="run-detail")
        yield Footer(show_command_palette=False, compact=True)

    def on_mount(self) -> None:
        self.sort_column, self.descending = NEWEST_FIRST
        super().on_mount()

    def filtered_runs(self) -> list[RunRecord]:
        """The runs the filter lets through, in the chosen order."""
        words = self.query_one("#runs-filter", Input).value.lower().split()
        runs = [r for r in self.runs if matches(r, words)]
        return sorted(runs, key=self.sort_key(), reverse=self.descending)

    def show_runs(self) -> None:
        shown = self.filtered_runs()
        rows = [
            (
                r.id,
                (
                    r.id,
                    status_text(self, r.status, damaged=bool(r.damaged)),
                    r.label,
                    r.config.target,
                    progress(r),
                    summary.ppl_text(r),
                    duration(r),
                    model_name(r.config.model),
                    summary.fmt_time(r.created, "%m-%d %H:%M"),
                ),
            )
            for r in shown
        ]
        # At 80 columns: the model goes to the info line while every run shares it, the time taken (the
        # line under the table says it) goes, an active run's layers lose their bar (the count stays), the
        # creation date keeps its time (the line under the table has the date), then the model's path is cut,
        # and when even that is too wide the model goes (the line under the table names the highlighted run's).
        fitted = fit_columns(
            [c.title for c in COLUMNS],
            rows,
            self.app.size.width - 2,  # the table has no edges: its vertical scrollbar's two columns
            same_first=("Model",),
            optional=("Took",),
            briefs={
                "Layers": [progress(r).plain.split()[-1] for r in shown],  # the count without its bar
                "Created": [summary.fmt_time(r.created, "%H:%M") for r in shown],
            },
            squeeze="Model",
            wrap="Method",  # a long label (REAP expert removal) onto two lines before the model goes
            last=("Model",),
        )
        self.shown_columns = fitted.shown
        table = self.query_one("#runs", DataTable)
        refill(table, [COLUMNS[i].title for i in fitted.shown], fitted.rows)
        every = "".join(f" · every run on {value}" for _, value in fitted.common)
        self.query_one("#runs-info", Static).update(f"{len(shown)} of {len(self.runs)} · {self.sort_text()}{every}")
        self._show_detail()

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """Cancel only an active run (kill one whose cancel was ignored), delete only an ended one, open
        and re-run only when there is a run."""
        run = self.cursor_run(self.query_one("#runs", DataTable)) if self.is_mounted else None
        if action == "cancel_run":
            return run is not None and run.active and not run.cancel_requested
        if action == "kill_run":
            return run is not None and run.active and run.cancel_requested
        if action == "delete_run":
            return run is not None and not run.active
        if action in ("open_run", "rerun"):
            return run is not None
        return True

    # ---- order and filter ----

    @on(DataTable.RowHighlighted, "#runs")
    def _show_detail(self) -> None:
        """The highlighted run in full: its model path, and its error in words when it has one."""
        self.refresh_bindings()
        run = self.cursor_run(self.query_one("#runs", DataTable))
        detail = self.query_one("#run-detail", Static)
        if run is None:
            if not self.app.runs_listed:
                detail.update("Reading the run store…")
            elif self.runs:
                detail.update("No run matches the filter: / edits it.")
            else:
                detail.update("No runs yet: start one on New run (F1) or with `acetui prune`.")
            return
        took = f", took {duration(run)}" if run.finished and run.started else ""
        text = (
            # The model by its name: a long path took most of the panel's lines and cut the error under it
            # (the Run screen's Config tab has the path).
            f"[b]{run.id}[/b] {escape(run.title)}"
            + ("" if run.settings_unknown else f" on {escape(model_name(run.config.model))}")
            + f"; created {summary.fmt_time(run.created)}{took}"
        )
        if run.damaged:
            text += f"\ndamaged in the run store: {escape(run.damaged)}"
        if run.error:
            text += f"\n[${STATUS_COLOR[run.status]}]{run.status}:[/] {escape(run.error)}"
        detail.update(text)

    def _current(self) -> RunRecord | None:
        run = self.cursor_run(self.query_one("#runs", DataTable))
        if run is None:
            self.notify("No run selected.", severity="warning")
        return run

    def action_cancel_run(self) -> None:
        run = self._current()
        if run is not None:
            self.app.cancel_run(run)

    def action_kill_run(self) -> None:
        run = self._current()
        if run is not None:
            self.app.kill_run(run)

    async def action_rerun(self) -> None:
        run = self.table_run()
        if run is not None:
            await rerun(self.app, run)

    def action_delete_run(self) -> None:
        run = self._current()
        if run is None:
            return

        def answered(yes: bool | None) -> None:
            if not yes:
                return
            try:
                self.app.store.delete_runs([run.id])
            except UserError as error:
                self.notify(str(error), severity="error")
                return
            self.notify(f"Run {run.id} deleted.")

        self.app.push_screen(
            ConfirmScreen(f"Delete run {run.id} ({run.title}, {run.status})? Its layers and results go too."),
            answered,
        )
