"""Runs: every run in the store with its status, progress, perplexity and duration; open (live when it
runs), cancel, delete."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.markup import escape
from textual.widgets import DataTable, Footer, Header, Static

from acetui.app import summary
from acetui.app.screens.common import ConfirmScreen, RunListScreen, refill, status_text
from acetui.app.summary import STATUS_COLOR
from acetui_core.config import model_name
from acetui_core.errors import UserError
from acetui_core.store import RunRecord

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


class RunsScreen(RunListScreen):
    AUTO_FOCUS = "#runs"
    BINDINGS = [
        Binding("o", "open_run", "Open", tooltip="The highlighted run on the Run screen (also enter)"),
        Binding("c", "cancel_run", "Cancel", tooltip="Stop the highlighted run after its current layer (asks first)"),
        Binding("d", "delete_run", "Delete", tooltip="Remove the highlighted ended run from the store (asks first)"),
    ]

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        yield Static("", id="run-detail")
        yield Footer(show_command_palette=False, compact=True)

    def on_mount(self) -> None:
        self.query_one("#runs", DataTable).add_columns(
            "Run", "Status", "Method", "Sparsity", "Layers", "PPL", "Took", "Model", "Created"
        )
        super().on_mount()

    def show_runs(self) -> None:
        newest_first = sorted(self.runs, key=lambda r: (r.created, r.id), reverse=True)
        refill(
            self.query_one("#runs", DataTable),
            [
                (
                    r.id,
                    (
                        r.id,
                        status_text(self, r.status),
                        r.label,
                        r.config.sparsity,
                        progress(r),
                        summary.ppl_text(r),
                        duration(r),
                        model_name(r.config.model),
                        summary.fmt_time(r.created, "%m-%d %H:%M"),
                    ),
                )
                for r in newest_first
            ],
        )
        self._show_detail()

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """Cancel only an active run, delete only an ended one, open only when there is a run."""
        run = self.cursor_run(self.query_one("#runs", DataTable)) if self.is_mounted else None
        if action == "cancel_run":
            return run is not None and run.active
        if action == "delete_run":
            return run is not None and not run.active
        if action == "open_run":
            return run is not None
        return True

    @on(DataTable.RowHighlighted, "#runs")
    def _show_detail(self) -> None:
        """The highlighted run in full: its model path, and its error in words when it has one."""
        self.refresh_bindings()
        run = self.cursor_run(self.query_one("#runs", DataTable))
        detail = self.query_one("#run-detail", Static)
        if run is None:
            detail.update(
                "No runs yet: start one on New run (F1) or with `acetui prune`."
                if self.app.runs_listed
                else "Reading the run store…"
            )
            return
        took = f", took {duration(run)}" if run.finished and run.started else ""
        text = (
            f"[b]{run.id}[/b] {escape(run.label)} at {run.config.sparsity} on {escape(run.config.model)}; "
            f"created {summary.fmt_time(run.created)}{took}"
        )
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
            self.app.cancel_run(run)

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
            ConfirmScreen(
                f"Delete run {run.id} ({run.label} at {run.config.sparsity}, "
                f"{run.status})? Its layers and results go too."
            ),
            answered,
        )
