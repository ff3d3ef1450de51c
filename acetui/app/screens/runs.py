"""Runs: every run in the store with its status; open (live when it runs), cancel, delete."""

from __future__ import annotations

import time

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Header, Static

from acetui.app import summary
from acetui.app.screens.common import RunListScreen, refill, status_text
from acetui.app.summary import STATUS_COLOR
from acetui_core.errors import UserError
from acetui_core.store import RunRecord
from acetui_core.config import model_name


def when(seconds: float | None, form: str = "%Y-%m-%d %H:%M") -> str:
    return "–" if seconds is None else time.strftime(form, time.localtime(seconds))


def progress(run: RunRecord) -> str:
    return f"{run.layers_done}/{run.num_layers}" if run.num_layers else str(run.layers_done)


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question; ``y`` or ``n`` (escape is no)."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Static(self.question)
            yield Static("[b]y[/b] yes   [b]n[/b] no", id="confirm-keys")
        yield Footer(show_command_palette=False, compact=True)

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class RunsScreen(RunListScreen):
    AUTO_FOCUS = "#runs"
    BINDINGS = [
        Binding("o", "open_run", "Open"),
        Binding("c", "cancel_run", "Cancel"),
        Binding("d", "delete_run", "Delete"),
    ]

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        yield Static("", id="run-detail")
        yield Footer(show_command_palette=False, compact=True)

    def on_mount(self) -> None:
        self.query_one("#runs", DataTable).add_columns("Run", "Status", "Method", "Sparsity", "Model", "Layers",
                                                       "Created")
        super().on_mount()

    def show_runs(self) -> None:
        newest_first = sorted(self.runs, key=lambda r: (r.created, r.id), reverse=True)
        refill(self.query_one("#runs", DataTable), [(r.id, (
            r.id, status_text(self, r.status), r.label, r.config.sparsity,
            model_name(r.config.model), progress(r), when(r.created, "%m-%d %H:%M"),
        )) for r in newest_first])
        self._show_detail()

    @on(DataTable.RowHighlighted, "#runs")
    def _show_detail(self) -> None:
        """The highlighted run in full: its model path, and its error in words when it has one."""
        run = self.cursor_run(self.query_one("#runs", DataTable))
        detail = self.query_one("#run-detail", Static)
        if run is None:
            detail.update("No runs yet: start one on New run (F1) or with `acetui prune`.")
            return
        took = f", took {summary.fmt_seconds(run.finished - run.started)}" if run.finished and run.started else ""
        text = (f"[b]{run.id}[/b] {escape(run.label)} at {run.config.sparsity} on {escape(run.config.model)}; "
                f"created {when(run.created)}{took}")
        if run.error:
            text += f"\n[${STATUS_COLOR[run.status]}]{run.status}:[/] {escape(run.error)}"
        detail.update(text)

    def _current(self) -> RunRecord | None:
        run = self.cursor_run(self.query_one("#runs", DataTable))
        if run is None:
            self.notify("No run selected.", severity="warning")
        return run

    @on(DataTable.RowSelected, "#runs")
    def action_open_run(self) -> None:
        run = self._current()
        if run is not None:
            self.app.follow(run.id)

    def action_cancel_run(self) -> None:
        run = self._current()
        if run is not None:
            self.app.cancel_run(run.id)

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

        self.app.push_screen(ConfirmScreen(f"Delete run {run.id} ({run.label} at {run.config.sparsity}, "
                                           f"{run.status})? Its layers and results go too."), answered)
