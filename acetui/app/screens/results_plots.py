"""The Results screen's plots of the chosen runs, each in place of the table (its key again: back): output
fidelity by layer, the Pareto view (quality against cost, with intervals; ``acetui figure pareto``'s
series), and the mask overlap of two selected runs (read in a thread)."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.message import Message
from textual.widgets import ContentSwitcher, DataTable, Static

from acetui.app import summary
from acetui.app.screens.results_table import ResultsTable
from acetui.app.widgets.plots import SERIES_COLORS, SERIES_MARKERS, DepthPlot, ParetoPlot
from acetui_core.analysis.figures import X_AXES, Y_LABELS, Series, figure_series, off_log_axis
from acetui_core.basics.errors import UserError
from acetui_core.run.records import linear_kind
from acetui_core.scores.maskfile import run_overlap, total
from acetui_core.storage.store_rows import RunRecord


class OverlapReady(Message):
    """The mask overlap of two runs, computed in a thread: per-kind Jaccard series, or why there is none."""

    def __init__(self, title: str, series: dict | None, error: str | None = None) -> None:
        super().__init__()
        self.title, self.series, self.error = title, series, error


class ResultsPlots(ResultsTable):
    pareto_axis = "seconds"  # the Pareto view's and its file's cost axis (x: "tokens")
    pareto_quality = "ppl"  # and its quality axis (z: "zeroshot-mean")

    def action_plot(self, kind: str) -> None:
        """Show the fidelity, Pareto or overlap plot of the chosen runs; the same key again goes back to the table."""
        views = self.query_one("#results-views", ContentSwitcher)
        if views.current == f"{kind}-view":
            views.current = "results"
            self.set_focus(self.query_one("#results", DataTable))  # hidden with the view, it had lost the focus
            return
        views.current = f"{kind}-view"
        {"fidelity": self._plot_fidelity, "pareto": self._plot_pareto, "overlap": self._plot_overlap}[kind]()

    def pareto(self) -> tuple[list[Series], str, str]:
        """The Pareto figure of the chosen runs (series, x and y labels): what the view draws and ``g`` saves,
        from the engine's selection (``acetui figure pareto``'s)."""
        runs = self.chosen()
        return figure_series(runs, self.evidence(runs), "pareto", self.pareto_axis, self.pareto_quality)

    def _plot_pareto(self) -> None:
        plot = self.query_one("#pareto-overlay", ParetoPlot)
        try:
            lines, xlabel, ylabel = self.pareto()
        except UserError as error:
            self.query_one("#pareto-caption", Static).update(f"{error} (p: back)")
            plot.display = False  # empty axes under the sentence read as a plot of nothing
            return
        plot.display = True
        shown = lines[: len(SERIES_COLORS)]
        other = "calibration tokens" if self.pareto_axis == "seconds" else "prune seconds"
        quality = "accuracy" if self.pareto_quality == "ppl" else "perplexity"
        caption = (
            f"Each method across calibration lengths against {xlabel}, bars: 95% intervals. "
            f"x: {other} instead · z: {quality} instead · g: save .tex · p: back."
        )
        if len(lines) > len(shown):  # the screen has colours for so many; a paper's figure takes them all
            caption += f" The first {len(shown)} of {len(lines)} methods are shown; g saves every one."
        off_axis = off_log_axis(shown)[1]
        if off_axis:  # a log axis has no place for 0 (tokens of a method without calibration data)
            caption += f" Not on the log axis at 0: {', '.join(off_axis)}."
        # every series by its glyph in the caption, which wraps: at 80 columns six names do not fit the one
        # line under the x axis
        names = "  ".join(f"{marker}{line.name}" for line, marker in zip(shown, SERIES_MARKERS, strict=False))
        self.query_one("#pareto-caption", Static).update(Text(f"{names}\n{caption}"))
        better = "lower" if self.pareto_quality == "ppl" else "higher"
        plot.show(shown, xlabel, f"{ylabel} ({better} is better)")

    def action_pareto_axis(self) -> None:
        self.pareto_axis = "tokens" if self.pareto_axis == "seconds" else "seconds"
        if self.query_one("#results-views", ContentSwitcher).current == "pareto-view":
            self._plot_pareto()
        self.notify(f"Pareto cost: {X_AXES[self.pareto_axis]}.")

    def action_pareto_quality(self) -> None:
        self.pareto_quality = "zeroshot-mean" if self.pareto_quality == "ppl" else "ppl"
        if self.query_one("#results-views", ContentSwitcher).current == "pareto-view":
            self._plot_pareto()
        self.notify(f"Pareto quality: {Y_LABELS[self.pareto_quality]}.")

    def _show_overlay(self, kind: str, caption: str, title: str, series: dict, total_layers: int) -> None:
        """The caption, and the plot only when it has a series: empty axes under "select two runs" or
        "reading the masks…" read as a plot of nothing."""
        self.query_one(f"#{kind}-caption", Static).update(caption)
        plot = self.query_one(f"#{kind}-overlay", DepthPlot)
        plot.display = bool(series)
        plot.show(total_layers, series, title)

    def _plot_fidelity(self) -> None:
        chosen = [r.id for r in self.chosen()]
        runs = self.app.store.list_runs(ids=chosen, layers=True) if chosen else []
        measured = [run for run in runs if any(layer.fidelity for layer in run.layers)]
        series = {
            summary.run_name(run): [(layer.index, 1 - layer.fidelity.cosine) for layer in run.layers if layer.fidelity]
            for run in measured
        }
        shown = dict(list(series.items())[: len(SERIES_COLORS)])
        # the depth of the runs drawn: a deeper chosen run without fidelity squeezed them to the left
        total_layers = max((len(run.layers) for run in measured[: len(shown)]), default=0)
        if not shown:
            caption = "None of the chosen runs recorded output fidelity: start runs with --fidelity (f: back)."
        else:
            caption = "Lower keeps the layer's output direction better (f: back)."
            if len(series) > len(shown):
                caption += f" The first {len(shown)} of {len(series)} runs with fidelity are shown."
        self._show_overlay("fidelity", caption, "1 - cos(Y, Y') of layer outputs (log)", shown, total_layers)

    def _plot_overlap(self) -> None:
        picked = [r for r in self.filtered_runs() if r.id in self.selected]
        if len(picked) != 2:
            self._show_overlay(
                "overlap", "Select exactly two runs (space) to compare their masks (m: back).", "", {}, 0
            )
            return
        self._show_overlay("overlap", f"Reading the masks of {picked[0].id} and {picked[1].id}…", "", {}, 0)
        self._compute_overlap(*picked)

    @work(thread=True, exclusive=True, group="overlap")
    def _compute_overlap(self, run_a: RunRecord, run_b: RunRecord) -> None:
        title = f"Jaccard of pruned positions: {summary.run_name(run_a)} vs {summary.run_name(run_b)}"
        try:
            store = self.app.store
            rows = run_overlap(run_a, run_b, (store.masks_kept(run_a), store.masks_kept(run_b)))
        except UserError as error:
            self.post_message(OverlapReady(title, None, str(error)))
            return
        series = {"all": [(layer, total(rows, layer=layer).jaccard) for layer in sorted({r.layer for r in rows})]}
        for row in rows:
            series.setdefault(linear_kind(row.name), []).append((row.layer, row.jaccard))
        self.post_message(OverlapReady(title, series))

    def on_overlap_ready(self, message: OverlapReady) -> None:
        if message.series is None:
            self._show_overlay("overlap", f"{message.error} (m: back)", "", {}, 0)
            return
        total_layers = len(message.series["all"])
        caption = "1: the same pruned positions; 0: none shared (acetui overlap prints the table). m: back."
        self._show_overlay("overlap", caption, message.title, message.series, total_layers)
