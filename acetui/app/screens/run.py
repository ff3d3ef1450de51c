"""Run: one run's progress, live while it runs, whether this app, the CLI or another SSH session
started it. The layers fill a table as they finish; the run's own log file is tailed under them; plots
show the selected layer's score histogram, and the sparsity, activation variance and output fidelity
along depth; a mixture-of-experts run's token load shows how many calibration tokens the router sent each
expert of each layer (starved experts marked); a panel shows the configuration the run was started with.
A resource line shows what its process uses. The tabs and their plots are drawn by ``run_plots``."""

from __future__ import annotations

import threading
from pathlib import Path

from rich.text import Text
from textual import getters, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.markup import escape
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, ProgressBar, Static, TabbedContent
from textual.worker import get_current_worker

from acetui.app import summary
from acetui.app.messages import LogLines, RunProgress, StoreFailed
from acetui.app.runview import batch_line, describe_stage, layer_row, token_load
from acetui.app.screens.common import exiting
from acetui.app.screens.new_run import rerun
from acetui.app.screens.run_plots import name_tabs, plot_tabs, replot, replot_histogram
from acetui.app.summary import STATUS_COLOR
from acetui.app.watch import follow_run, tail_log
from acetui.app.widgets.logpane import LogPane
from acetui.app.widgets.progress import RunProgressBar
from acetui.app.widgets.rowtable import RowTable
from acetui.app.workbench import Workbench
from acetui_core.basics.choices import RunStatus
from acetui_core.run.config import model_name
from acetui_core.run.records import LayerRecord
from acetui_core.storage.liveness import HOST
from acetui_core.storage.store_rows import RunRecord

NO_RUN = "No run to show yet: start one on New run (F1) or open one from Runs (F4)."


class RunScreen(Screen):
    app = getters.app(Workbench)

    AUTO_FOCUS = "#layers"
    BINDINGS = [
        Binding("c", "cancel_run", "Cancel", tooltip="Stop the run at its next check (asks first)"),
        Binding(
            "k",
            "kill_run",
            "Kill",
            tooltip="End the run's process now, once a cancel was asked and ignored (asks first)",
        ),
        Binding(
            "u",
            "rerun",
            "Re-run",
            priority=True,  # awaited as the app reads it: the keys after it in a burst reach the form
            tooltip="New run filled with this run's settings (ctrl+r starts it; change a field to vary it)",
        ),
        Binding(
            "right_square_bracket",
            "linear(1)",
            "Next linear",
            show=False,
            tooltip="The histogram of the layer's next linear",
        ),
        Binding(
            "left_square_bracket",
            "linear(-1)",
            "Prev linear",
            show=False,
            tooltip="The histogram of the layer's previous linear",
        ),
        Binding("n", "batch(1)", "Next", tooltip="The next run of this comparison"),
        Binding("p", "batch(-1)", "Prev", tooltip="The previous run of this comparison"),
        Binding("h", "plot('scores')", "Scores", show=False, tooltip="Score histogram of the highlighted layer"),
        Binding("s", "plot('sparsity')", "Sparsity", show=False, tooltip="Sparsity by layer and linear"),
        Binding("v", "plot('variance')", "Variance", show=False, tooltip="Var[x²] of the inputs by layer"),
        Binding("f", "plot('fidelity')", "Fidelity", show=False, tooltip="Output error of layers and linears by layer"),
        Binding("x", "plot('experts')", "Experts", show=False, tooltip="Calibration tokens per expert (MoE models)"),
        Binding("i", "plot('config')", "Config", show=False, tooltip="The configuration the run was started with"),
        Binding("l", "log", "Log", tooltip="The run's log file, full screen (l or escape: back)"),
    ]

    def __init__(self) -> None:
        super().__init__()
        # Before mounting, not in on_mount: the footer asks check_action while the screen is composed, and
        # the screen is first shown when a start's checks pass, as the run list changes (bindings refreshed).
        self._run: RunRecord | None = None
        self._layers: list[LayerRecord] = []
        self._linear = 0
        self._log_ended = threading.Event()

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(NO_RUN, id="run-title")
        yield Static("", id="batch")
        with Horizontal(id="progress-row"):
            yield RunProgressBar(id="progress", show_eta=False)
            yield Static("", id="stage")
        yield Static("", id="resources")
        yield Static("", id="run-error", classes="error")
        with Horizontal(id="run-body"):
            with Vertical(id="run-left"):
                yield RowTable(id="layers")
                yield LogPane(id="log", wrap=True, min_width=20, markup=False, highlight=False, max_lines=5000)
            yield from plot_tabs()
        yield Footer(show_command_palette=False, compact=True)

    def on_mount(self) -> None:
        if exiting(self):
            return
        table = self.query_one("#layers", DataTable)
        table.add_columns("Layer", "Lin", "Time", "Sparsity", escape("Var[x²]"))
        self.query_one("#run-error").display = False
        self.query_one("#batch").display = False
        self.watch(self.app, "followed", self._follow)
        self.app.runs_signal.subscribe(self, lambda runs: self._runs_listed())
        self.set_interval(1.0, self._tick)

    def on_resize(self) -> None:
        name_tabs(self, self.app.size.width)
        self._show_batch()

    # ---- following a run ----

    def _follow(self, run_id: str | None) -> None:
        self._log_ended.set()  # the previous run's log tail reads what is left and stops
        self._log_ended = threading.Event()
        self._run, self._layers, self._linear = None, [], 0
        self.query_one("#layers", DataTable).clear()
        self.query_one("#log", LogPane).clear()
        self.query_one("#run-error").display = False
        self.query_one("#progress", ProgressBar).update(total=None, progress=0)
        self.query_one("#progress", ProgressBar).display = True
        self.query_one("#stage", Static).update("")
        self.query_one("#resources", Static).update("")
        self.query_one("#config-text", Static).update("")
        self.query_one("#experts-text", Static).update("")
        self.query_one("#run-title", Static).update(NO_RUN if run_id is None else f"run {run_id}")
        self.query_one("#progress-row").display = run_id is not None  # no bouncing bar for no run
        self._title_log()  # another run (n, p): no longer the one it named
        self._show_batch()
        self._replot()
        if run_id is not None:
            self._poll(run_id)

    @work(thread=True, exclusive=True, group="follow")
    def _poll(self, run_id: str) -> None:
        follow_run(self.app.store, run_id, self.post_message, get_current_worker().cancelled_event)

    @work(thread=True, exclusive=True, group="log")
    def _tail(self, run_id: str, path: Path, ended: threading.Event) -> None:
        tail_log(run_id, path, self.post_message, get_current_worker().cancelled_event, ended)

    def on_store_failed(self, message: StoreFailed) -> None:
        self._show_error(message.error)

    def on_run_progress(self, message: RunProgress) -> None:
        run = message.run
        if run.id != self.app.followed:
            return  # a late message from the run shown before
        previous, self._run = self._run, run
        if previous is None:
            self._start_log(run)
            self._title_log()
        # Every time: the status, the device actually used and the versions come once the run has started.
        self.query_one("#config-text", Static).update(summary.config_text(run, self.app.store.folder))
        if not run.active:
            self._log_ended.set()
        self._add_layers(message.new_layers)
        if not self._layers and (previous is None or previous.active != run.active):
            self._replot_histogram()  # no layer: whether one is still to come is the run's status
        self.query_one("#experts-text", Static).update(token_load(run, self._layers))
        self._show_status(run)
        self.refresh_bindings()
        if previous is not None and previous.active and not run.active:
            self._advance_batch(run)

    def _start_log(self, run: RunRecord) -> None:
        log = self.query_one("#log", LogPane)
        path = run.env.get("log")
        if not path:
            log.add("This run has no log file (it was recorded by an older acetui).")
            return
        self._tail(run.id, Path(path), self._log_ended)

    def on_log_lines(self, message: LogLines) -> None:
        if message.run_id != self.app.followed:
            return
        log = self.query_one("#log", LogPane)
        if message.missing:
            run = self._run
            where = f" on {run.host}" if run and run.host and run.host != HOST else ""
            log.add(f"No log file{where} yet: {run.env.get('log') if run else ''}")
        for line in message.lines:
            log.add(Text.from_ansi(line))

    def _add_layers(self, layers: list[LayerRecord]) -> None:
        if not layers:
            return
        table = self.query_one("#layers", DataTable)
        at_end = table.row_count == 0 or table.cursor_row == table.row_count - 1
        self._layers += layers
        for layer in layers:
            table.add_row(*layer_row(layer), key=str(layer.index))
        if at_end:  # keep showing the newest layer unless the user moved away
            table.move_cursor(row=table.row_count - 1)
        self._replot()

    def _show_title(self, run: RunRecord) -> None:
        batch = self.app.batch
        place = f" ({batch.index(run.id) + 1}/{len(batch)})" if len(batch) > 1 and run.id in batch else ""
        self.query_one("#run-title", Static).update(
            (
                "[b]settings unreadable[/b]"  # not its stand-in ``?-16 · ? · ?``
                if run.settings_unknown
                else f"[b]{escape(run.label)}[/b] · {run.config.target} · {escape(model_name(run.config.model))}"
            )
            + f" · [${STATUS_COLOR[run.status]}]{run.status}[/] · run {run.id}{place}"
        )

    def _runs_listed(self) -> None:
        """The app's run list changed; the comparison the shown run belongs to may just have been found."""
        if self._run is not None:
            self._show_title(self._run)
        self._show_batch()

    def _show_status(self, run: RunRecord) -> None:
        self._show_title(run)
        total = run.num_layers
        done = total if run.status == RunStatus.FINISHED and total else run.layers_done
        bar = self.query_one("#progress", ProgressBar)
        bar.update(total=total, progress=done)
        bar.display = run.active  # once ended, the line is the result's: it needs the whole width at 80 columns
        self._tick()
        if run.error and not run.active:
            self._show_error(f"{run.status}: {run.error}")
        self._show_batch()

    def _tick(self) -> None:
        """The stage line with the time elapsed and left, and the resource line; every second (no store
        reads: from the last record the poller posted)."""
        run = self._run
        if run is None:
            return
        now = summary.clock()
        parts = [describe_stage(run)]
        elapsed = summary.elapsed_seconds(run, now)
        if elapsed is not None:
            parts.append(
                f"{summary.fmt_seconds(elapsed)} elapsed" if run.active else f"took {summary.fmt_seconds(elapsed)}"
            )
        eta = summary.eta_seconds(self._layers, run.num_layers or 0) if run.status == RunStatus.RUNNING else None
        if eta:
            parts.append(f"ETA {summary.fmt_seconds(eta)}")
        self.query_one("#stage", Static).update(" · ".join(parts))
        self.query_one("#resources", Static).update(escape(summary.resource_line(run, HOST, now)))

    def _show_error(self, text: str) -> None:
        error = self.query_one("#run-error", Static)
        error.update(escape(text))
        error.display = True

    def _show_batch(self) -> None:
        batch = self.app.batch
        line = self.query_one("#batch", Static)
        line.display = len(batch) > 1
        if len(batch) > 1:
            # Its two lines, less what wrapping at word ends may leave unused.
            room = 2 * (self.app.size.width - 2) - 16
            line.update(batch_line(batch, self.app.runs, self.app.followed, room))

    def _advance_batch(self, run: RunRecord) -> None:
        """When a run of a comparison ends, follow the next one of the batch (the batch line keeps each
        run's result in view)."""
        batch = self.app.batch
        if run.id in batch and batch.index(run.id) + 1 < len(batch):
            self.app.followed = batch[batch.index(run.id) + 1]

    # ---- plots ----

    @on(DataTable.RowHighlighted, "#layers")
    def _row_highlighted(self) -> None:
        self._replot_histogram()

    def _replot(self) -> None:
        replot(self, self._run, self._layers, self._linear)

    def _replot_histogram(self) -> None:
        replot_histogram(self, self._run, self._layers, self._linear)

    # ---- actions ----

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """Offer cancel only while the run is active (kill once a cancel was ignored), and run stepping
        only within a comparison."""
        if action == "cancel_run":
            return self._run is not None and self._run.active and not self._run.cancel_requested
        if action == "kill_run":
            return self._run is not None and self._run.active and self._run.cancel_requested
        if action == "rerun":
            return self._run is not None
        if action == "batch":
            batch, current = self.app.batch, self.app.followed
            return current in batch and 0 <= batch.index(current) + parameters[0] < len(batch)
        return True

    def action_linear(self, step: int) -> None:
        self._linear += step
        self._replot_histogram()

    def action_plot(self, tab: str) -> None:
        self.query_one("#plots", TabbedContent).active = tab

    def action_log(self) -> None:
        log = self.query_one("#log", LogPane)
        if self.maximized is log:
            self.minimize()
        else:
            self.maximize(log, container=False)

    def watch_maximized(self, maximized) -> None:
        """Full screen, the log takes the keys (the arrows, Home, End and the pages scroll it; they went to
        the hidden layers table) and names its run; back (l or escape), the table has them again."""
        log = self.query_one("#log", LogPane)
        if maximized is log:
            self._title_log()
            log.focus()
        else:
            log.border_title = None
            if self.focused is log:
                self.query_one("#layers", DataTable).focus()

    def _title_log(self) -> None:
        """The full-screen log's title names its run, once its record has arrived: ``enter l`` in one burst
        from a run table maximises the log first (it said "log · l: back" for good)."""
        log = self.query_one("#log", LogPane)
        if self.maximized is not log:
            return
        run = self._run
        log.border_title = f"log of {run.label} {run.id} · l: back" if run else "log · l: back"

    # check_action has made sure these make sense before they run.

    def action_batch(self, step: int) -> None:
        batch = self.app.batch
        self.app.followed = batch[batch.index(self.app.followed) + step]

    def _shown_run(self) -> RunRecord:
        assert self._run is not None  # check_action offers cancel, kill and re-run only with a run shown
        return self._run

    def action_cancel_run(self) -> None:
        self.app.cancel_run(self._shown_run())

    def action_kill_run(self) -> None:
        self.app.kill_run(self._shown_run())

    async def action_rerun(self) -> None:
        await rerun(self.app, self._shown_run())
