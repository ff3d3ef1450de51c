"""Run: one run's progress, live while it runs, whether this app, the CLI or another SSH session
started it. The layers fill a table as they finish; plots show the selected layer's score histogram
and the sparsity and activation variance along depth."""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.markup import escape
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Log, ProgressBar, Static, TabbedContent, TabPane
from textual.worker import get_current_worker

from acetui.app import summary
from acetui.app.messages import RunProgress, StoreFailed
from acetui.app.summary import STATUS_COLOR
from acetui.app.watch import follow_run
from acetui.app.widgets.plots import DepthPlot, ScoreHistogram, sparsity_series, variance_series
from acetui_core.records import LayerRecord
from acetui_core.store import RunRecord
from acetui_core.config import model_name

NO_RUN = "No run to show yet: start one on New run (F1) or open one from Runs (F4)."


def describe_stage(run: RunRecord) -> str:
    """Where the run is now, in a few words."""
    if run.status == "finished":
        ppl = run.ppl
        return "finished" + (f" · ppl {ppl:.2f}" if ppl is not None else "") + \
            f" · prune {summary.fmt_seconds(run.prune_seconds)}"
    if not run.active:
        return run.status
    if run.current_layer is not None and run.num_layers:
        return f"layer {run.current_layer + 1}/{run.num_layers}"
    if run.stage:
        total = run.stage.total
        return f"{run.stage.name} {run.stage.done}/{total if total is not None else '?'}"
    return "waiting to start" if run.status == "queued" else "starting"


def layer_row(layer: LayerRecord) -> tuple[str, ...]:
    """Index, linears, seconds, sparsity and the median Var[x²] of the layer's inputs (the Var[x²]
    plot adds the largest column's)."""
    variance = summary.layer_variance(layer)
    return (
        str(layer.index),
        str(len(layer.linears)),
        summary.fmt_seconds(layer.seconds),
        "–" if layer.sparsity is None else f"{layer.sparsity:.3f}",
        "–" if variance is None else f"{variance.median:.3g}",
    )


class RunScreen(Screen):
    AUTO_FOCUS = "#layers"
    BINDINGS = [
        Binding("c", "cancel_run", "Cancel"),
        Binding("right_square_bracket", "linear(1)", "Next linear"),
        Binding("left_square_bracket", "linear(-1)", "Prev linear", show=False),
        Binding("n", "batch(1)", "Next run"),
        Binding("p", "batch(-1)", "Prev run"),
        Binding("h", "plot('scores')", "Scores", show=False),
        Binding("s", "plot('sparsity')", "Sparsity", show=False),
        Binding("v", "plot('variance')", "Variance", show=False),
    ]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(NO_RUN, id="run-title")
        yield Static("", id="run-error", classes="error")
        with Horizontal(id="progress-row"):
            yield ProgressBar(id="progress", show_eta=False)
            yield Static("", id="stage")
        with Horizontal(id="run-body"):
            with Vertical(id="run-left"):
                yield DataTable(id="layers", cursor_type="row", zebra_stripes=True)
                yield Log(id="log")
            with TabbedContent(id="plots"):
                with TabPane(escape("Scores [h]"), id="scores"):
                    yield ScoreHistogram(id="histogram")
                with TabPane(escape("Sparsity [s]"), id="sparsity"):
                    yield DepthPlot("sparsity by layer", ylim=(0, 1), id="sparsity-plot")
                with TabPane(escape("Var[x²] [v]"), id="variance"):
                    yield DepthPlot("Var[x²] of inputs by layer", log=True, id="variance-plot")
        yield Footer(show_command_palette=False, compact=True)

    def on_mount(self) -> None:
        table = self.query_one("#layers", DataTable)
        table.add_columns("Layer", "Lin", "Time", "Sparsity", escape("Var[x²]"))
        self.query_one("#run-error").display = False
        self._run: RunRecord | None = None
        self._layers: list[LayerRecord] = []
        self._linear = 0
        self.watch(self.app, "followed", self._follow)

    # ---- following a run ----

    def _follow(self, run_id: str | None) -> None:
        self._run, self._layers, self._linear = None, [], 0
        self.query_one("#layers", DataTable).clear()
        self.query_one("#log", Log).clear()
        self.query_one("#run-error").display = False
        self.query_one("#progress", ProgressBar).update(total=None, progress=0)
        self.query_one("#stage", Static).update("")
        self.query_one("#run-title", Static).update(NO_RUN if run_id is None else f"run {run_id}")
        self._replot()
        if run_id is not None:
            self._poll(run_id)

    @work(thread=True, exclusive=True, group="follow")
    def _poll(self, run_id: str) -> None:
        follow_run(self.app.store, run_id, self.post_message, get_current_worker().cancelled_event)

    def on_store_failed(self, message: StoreFailed) -> None:
        self._show_error(message.error)

    def on_run_progress(self, message: RunProgress) -> None:
        run = message.run
        if run.id != self.app.followed:
            return  # a late message from the run shown before
        previous, self._run = self._run, run
        self._log_changes(previous, run, message.new_layers)
        self._add_layers(message.new_layers)
        self._show_status(run)
        self.refresh_bindings()
        if previous is not None and previous.active and not run.active:
            self._advance_batch(run)

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

    def _show_status(self, run: RunRecord) -> None:
        batch = self.app.batch
        place = f" ({batch.index(run.id) + 1}/{len(batch)})" if len(batch) > 1 and run.id in batch else ""
        self.query_one("#run-title", Static).update(
            f"[b]{escape(run.label)}[/b] · {run.config.sparsity} · {escape(model_name(run.config.model))} · "
            f"[${STATUS_COLOR[run.status]}]{run.status}[/] · run {run.id}{place}")
        total = run.num_layers
        done = total if run.status == "finished" and total else run.layers_done
        self.query_one("#progress", ProgressBar).update(total=total, progress=done)
        stage = describe_stage(run)
        eta = summary.eta_seconds(self._layers, total or 0) if run.status == "running" else None
        self.query_one("#stage", Static).update(stage + (f" · ETA {summary.fmt_seconds(eta)}" if eta else ""))
        if run.error and not run.active:
            self._show_error(f"{run.status}: {run.error}")

    def _show_error(self, text: str) -> None:
        error = self.query_one("#run-error", Static)
        error.update(escape(text))
        error.display = True

    def _log_changes(self, before: RunRecord | None, run: RunRecord, layers: list[LayerRecord]) -> None:
        log = self.query_one("#log", Log)
        if before is None:
            log.write_line(f"{run.label} at {run.config.sparsity}: {run.status}")
        elif run.active and run.stage != before.stage and run.current_layer is None:
            log.write_line(describe_stage(run))
        for layer in layers:
            log.write_line(f"layer {layer.index}: {summary.fmt_seconds(layer.seconds)}, "
                           f"sparsity {layer_row(layer)[3]}")
        if not run.active and (before is None or before.active):
            log.write_line(describe_stage(run) + (f": {run.error}" if run.error else ""))

    def _advance_batch(self, run: RunRecord) -> None:
        """When a run of a comparison ends, follow the next one of the batch."""
        batch = self.app.batch
        if run.id in batch and batch.index(run.id) + 1 < len(batch):
            self.app.followed = batch[batch.index(run.id) + 1]

    # ---- plots ----

    @on(DataTable.RowHighlighted, "#layers")
    def _row_highlighted(self) -> None:
        self._replot_histogram()

    def _replot(self) -> None:
        total = (self._run.num_layers if self._run else None) or len(self._layers)
        self.query_one("#sparsity-plot", DepthPlot).show(total, sparsity_series(self._layers))
        self.query_one("#variance-plot", DepthPlot).show(total, variance_series(self._layers))
        self._replot_histogram()

    def _replot_histogram(self) -> None:
        plot = self.query_one("#histogram", ScoreHistogram)
        table = self.query_one("#layers", DataTable)
        if not self._layers or table.row_count == 0:
            plot.show("no layer pruned yet", None)
            return
        layer = self._layers[min(table.cursor_row, len(self._layers) - 1)]
        linears = layer.linears
        self._linear %= len(linears)
        linear = linears[self._linear]
        histogram = linear.histogram
        threshold = histogram.threshold if histogram else None
        title = f"L{layer.index} {linear.name} ({self._linear + 1}/{len(linears)})"
        if histogram is None:
            title += ": no scores (solved, not scored)"
        elif threshold is not None:
            title += f" thr {threshold:.3g}"
        plot.show(title, histogram)

    # ---- actions ----

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """Offer cancel only while the run is active, and run stepping only within a comparison."""
        if action == "cancel_run":
            return self._run is not None and self._run.active
        if action == "batch":
            batch, current = self.app.batch, self.app.followed
            return current in batch and 0 <= batch.index(current) + parameters[0] < len(batch)
        return True

    def action_linear(self, step: int) -> None:
        self._linear += step
        self._replot_histogram()

    def action_plot(self, tab: str) -> None:
        self.query_one("#plots", TabbedContent).active = tab

    # check_action has made sure these make sense before they run.

    def action_batch(self, step: int) -> None:
        batch = self.app.batch
        self.app.followed = batch[batch.index(self.app.followed) + step]

    def action_cancel_run(self) -> None:
        self.app.cancel_run(self.app.followed)

