"""Results: finished runs side by side, sortable and filterable; the paper's comparison layout (drawn by
``acetui.app.paper``); export of the selected runs as CSV or LaTeX (``acetui_core.export``), or the LaTeX to
the clipboard; plots along depth of the chosen runs' output fidelity, or of two selected runs' mask overlap."""

from __future__ import annotations

import io
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Group
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import ContentSwitcher, DataTable, Footer, Header, Input, Static

from acetui.app import paper, summary
from acetui.app.exports import TMUX_CLIPBOARD_HINT, export_dir, tmux_drops_clipboard
from acetui.app.screens.common import SortedRunListScreen, filter_keys, refill
from acetui.app.widgets.plots import SERIES_COLORS, DepthPlot, ParetoPlot
from acetui.app.widgets.textfield import TextField
from acetui_core.choices import RunStatus
from acetui_core.config import model_name
from acetui_core.errors import UserError
from acetui_core.export import export
from acetui_core.figures import X_AXES, Y_LABELS, Series, figure_series, to_pgfplots
from acetui_core.maskfile import run_overlap, total
from acetui_core.metrics import METHODS
from acetui_core.outputs import reserve_new_file
from acetui_core.records import linear_kind
from acetui_core.sparsity import parse_sparsity
from acetui_core.store_rows import RunEvidence, RunRecord


def zeroshot_mean(run: RunRecord) -> float | None:
    return run.results.zeroshot_mean if run.results else None


def _zeroshot_percent(run: RunRecord) -> str:
    mean = zeroshot_mean(run)
    return "–" if mean is None else f"{mean * 100:.1f}"


def _seqlen_order(run: RunRecord) -> float:
    seqlen = run.config.seqlen
    return math.inf if seqlen == "full" else float(seqlen)


def _sparsity_order(run: RunRecord) -> tuple:
    spec = parse_sparsity(run.config.sparsity)
    return spec.is_nm, spec.fraction


def _missing_last(value: float | None) -> float:
    return math.inf if value is None else value


@dataclass(frozen=True)
class Column:
    title: str
    cell: Callable[[RunRecord], str]
    order: Callable[[RunRecord], object]


def _calibration(run: RunRecord) -> str:
    """Samples x window length, e.g. ``128×16`` (– for methods without calibration data)."""
    method = METHODS.get(run.config.method)
    if method is not None and not method.calibrated(run.config):
        return "–"
    return f"{run.config.nsamples}×{run.config.seqlen}"


def _windows(run: RunRecord) -> str:
    """Perplexity windows x their length, e.g. ``16×512``."""
    results = run.results
    if results is None or results.ppl_windows is None:
        return "–"
    return f"{results.ppl_windows}×{results.ppl_seqlen}" if results.ppl_seqlen else str(results.ppl_windows)


COLUMNS = [
    Column("Model", lambda r: model_name(r.config.model), lambda r: model_name(r.config.model)),
    Column("Method", lambda r: r.label, lambda r: r.label),
    Column("Sparsity", lambda r: r.config.sparsity, _sparsity_order),
    Column("PPL", summary.ppl_text, lambda r: _missing_last(r.ppl)),
    Column("Prune", lambda r: summary.fmt_seconds(r.prune_seconds), lambda r: _missing_last(r.prune_seconds)),
    Column("0-shot%", _zeroshot_percent, lambda r: -(zeroshot_mean(r) or -1)),
    Column("Calib", _calibration, lambda r: (_seqlen_order(r), r.config.nsamples)),
    Column("Seed", lambda r: str(r.config.seed), lambda r: r.config.seed),
    Column("Eval", _windows, lambda r: _missing_last(r.results.ppl_windows if r.results else None)),
    Column("Date", lambda r: summary.fmt_time(r.finished, "%m-%d %H:%M"), lambda r: r.finished or 0),
    Column("Id", lambda r: r.id, lambda r: r.id),
]
PPL_COLUMN = [c.title for c in COLUMNS].index("PPL")


class OverlapReady(Message):
    """The mask overlap of two runs, computed in a thread: per-kind Jaccard series, or why there is none."""

    def __init__(self, title: str, series: dict | None, error: str | None = None) -> None:
        super().__init__()
        self.title, self.series, self.error = title, series, error


class ResultsScreen(SortedRunListScreen):
    AUTO_FOCUS = "#results"
    COLUMNS = COLUMNS
    LEADING = 1  # the selection mark
    FILTER, TABLE = "filter", "results"
    # The footer shows the main keys; the others are in the help (?).
    BINDINGS = [
        *filter_keys("model"),
        Binding("space", "toggle_select", "Select", tooltip="Select the highlighted run (exports take the selection)"),
        Binding("a", "select_all", "Select all", show=False, tooltip="Select every listed run, or none"),
        Binding("s", "sort(1)", "Sort", tooltip="Sort by the next column (header clicks too)"),
        Binding("S", "sort(-1)", "Sort back", show=False, tooltip="Sort by the previous column"),
        Binding("r", "reverse", "Reverse sort", show=False, tooltip="Reverse the order"),
        Binding("v", "toggle_view", "Paper", tooltip="The paper's layout: methods by sparsity"),
        Binding("e", "export('csv')", "CSV", tooltip="Export the chosen runs as CSV"),
        Binding("l", "export('latex')", "LaTeX", tooltip="Export the chosen runs as a LaTeX table"),
        Binding(
            "p",
            "plot('pareto')",
            "Pareto",
            show=False,
            tooltip="Perplexity against cost with intervals, one line per method",
        ),
        Binding(
            "x", "pareto_axis", "Cost axis", show=False, tooltip="The Pareto cost: prune seconds or calibration tokens"
        ),
        Binding(
            "z",
            "pareto_quality",
            "Quality axis",
            show=False,
            tooltip="The Pareto quality: WikiText-2 perplexity or mean zero-shot accuracy",
        ),
        Binding(
            "g", "export('pareto')", "Save Pareto", show=False, tooltip="Save the Pareto view as a pgfplots figure"
        ),
        Binding("y", "copy_latex", "Copy", show=False, tooltip="Copy the LaTeX table (OSC 52, works over SSH)"),
        Binding("o", "open_run", "Open run", show=False, tooltip="The highlighted run on the Run screen (also enter)"),
        Binding(
            "f",
            "plot('fidelity')",
            "Fidelity",
            show=False,
            tooltip="Layer outputs' 1-cos by layer, chosen runs overlaid",
        ),
        Binding("m", "plot('overlap')", "Overlap", show=False, tooltip="Mask overlap (Jaccard) of two selected runs"),
    ]

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="results-bar"):
            yield TextField(placeholder="filter by model (/)", id="filter", compact=True)
            yield Static("", id="results-info")
        yield Static("", id="results-empty")
        with ContentSwitcher(initial="results", id="results-views"):
            yield DataTable(id="results", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="paper"):
                yield Static("", id="paper-table")
            with Vertical(id="fidelity-view", classes="overlay"):
                yield Static("", id="fidelity-caption")
                yield DepthPlot("", log=True, id="fidelity-overlay")
            with Vertical(id="pareto-view", classes="overlay"):
                yield Static("", id="pareto-caption")
                yield ParetoPlot(id="pareto-overlay")
            with Vertical(id="overlap-view", classes="overlay"):
                yield Static("", id="overlap-caption")
                yield DepthPlot("", ylim=(0, 1), id="overlap-overlay")
        yield Footer(show_command_palette=False, compact=True)

    def on_mount(self) -> None:
        self.selected: set[str] = set(self.app.chosen_runs)
        # Each run's evidence, by run id: a finished run's never changes, so it is read once.
        self.kept: dict[str, RunEvidence] = {}
        self.pareto_axis = "seconds"  # the Pareto view's and its file's cost axis (x: tokens)
        self.pareto_quality = "ppl"  # and its quality axis (z: "zeroshot-mean")
        self.sort_column, self.descending = PPL_COLUMN, False
        self.query_one("#results", DataTable).add_columns(" ", *(c.title for c in COLUMNS))
        super().on_mount()

    # ---- what is shown ----

    def filtered_runs(self) -> list[RunRecord]:
        """Finished runs matching the model filter, in the chosen order."""
        wanted = self.query_one("#filter", Input).value.strip().lower()
        runs = [r for r in self.runs if r.status == RunStatus.FINISHED and wanted in r.config.model.lower()]
        return sorted(runs, key=self.sort_key(), reverse=self.descending)

    def chosen(self) -> list[RunRecord]:
        """The selected runs still visible, or every visible run when none is selected."""
        visible = self.filtered_runs()
        return [r for r in visible if r.id in self.selected] or visible

    def show_runs(self) -> None:
        visible = self.filtered_runs()
        refill(
            self.query_one("#results", DataTable),
            [(r.id, ("✓" if r.id in self.selected else " ", *(c.cell(r) for c in COLUMNS))) for r in visible],
        )
        picked = len([r for r in visible if r.id in self.selected])
        partial = " · † partial ppl" if any(r.ppl_partial for r in visible) else ""
        self.query_one("#results-info", Static).update(
            f"{len(visible)} run(s) · {picked} selected · {self.sort_text()}{partial}"
        )
        self.query_one("#paper-table", Static).update(self.paper_table())
        self._say_what_to_do(visible)

    def _say_what_to_do(self, visible: list[RunRecord]) -> None:
        """An empty table says why and what to do."""
        empty = self.query_one("#results-empty", Static)
        empty.display = not visible and self.app.runs_listed
        if any(r.status == RunStatus.FINISHED for r in self.runs):
            empty.update("No finished run's model matches the filter: / edits it (escape: back to the table).")
        elif any(r.active for r in self.runs):
            empty.update("No run has finished yet: F2 follows the active one; its results come here when it ends.")
        else:
            empty.update(
                "No finished runs yet: start one on New run (F1) or with `acetui prune`; "
                "Runs (F4) shows the ones that failed or were cancelled."
            )

    def _evidence(self, runs: list[RunRecord]) -> dict[str, RunEvidence]:
        missing = [r.id for r in runs if r.id not in self.kept]
        if missing:
            self.kept.update(self.app.store.evidence(missing))
        return self.kept

    def paper_table(self) -> Group | str:
        """The chosen runs in the paper's layout (``acetui.app.paper``), the selected pair compared."""
        runs = self.chosen()
        if not runs:
            return "No finished runs yet."
        which = "selected" if any(r.id in self.selected for r in self.filtered_runs()) else "listed"
        return paper.view(runs, self._evidence(runs), which, [r for r in runs if r.id in self.selected])

    # ---- actions ----

    @on(Input.Changed, "#filter")
    def _filter_changed(self) -> None:
        self.show_runs()

    def action_toggle_select(self) -> None:
        run = self.cursor_run(self.query_one("#results", DataTable))
        if run is not None:
            self.selected ^= {run.id}
            self.show_runs()

    def action_select_all(self) -> None:
        visible = {r.id for r in self.filtered_runs()}
        self.selected = set() if visible <= self.selected else self.selected | visible
        self.show_runs()

    def action_plot(self, kind: str) -> None:
        """Show the fidelity or overlap plot of the chosen runs; the same key again goes back to the table."""
        views = self.query_one("#results-views", ContentSwitcher)
        if views.current == f"{kind}-view":
            views.current = "results"
            return
        views.current = f"{kind}-view"
        {"fidelity": self._plot_fidelity, "pareto": self._plot_pareto, "overlap": self._plot_overlap}[kind]()

    def pareto(self) -> tuple[list[Series], str, str]:
        """The Pareto figure of the chosen runs (series, x and y labels): what the view draws and ``g`` saves,
        from the engine's selection (``acetui figure pareto``'s)."""
        runs = self.chosen()
        return figure_series(runs, self._evidence(runs), "pareto", self.pareto_axis, self.pareto_quality)

    def _plot_pareto(self) -> None:
        plot = self.query_one("#pareto-overlay", ParetoPlot)
        try:
            lines, xlabel, ylabel = self.pareto()
        except UserError as error:
            self.query_one("#pareto-caption", Static).update(f"{error} (p: back)")
            plot.show([], "", "")
            return
        shown = lines[: len(SERIES_COLORS)]
        other = "calibration tokens" if self.pareto_axis == "seconds" else "prune seconds"
        quality = "accuracy" if self.pareto_quality == "ppl" else "perplexity"
        caption = (
            "Each method across calibration lengths, bars: 95% intervals. "
            f"x: by {other} · z: {quality} · g: save .tex · p: back"
        )
        if len(lines) > len(shown):
            caption += f" The first {len(shown)} of {len(lines)} methods are shown."
        self.query_one("#pareto-caption", Static).update(caption)
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
        self.query_one(f"#{kind}-caption", Static).update(caption)
        self.query_one(f"#{kind}-overlay", DepthPlot).show(total_layers, series, title)

    def _plot_fidelity(self) -> None:
        chosen = [r.id for r in self.chosen()]
        runs = self.app.store.list_runs(ids=chosen, layers=True) if chosen else []
        series = {
            summary.run_name(run): [(layer.index, 1 - layer.fidelity.cosine) for layer in run.layers if layer.fidelity]
            for run in runs
        }
        series = {name: points for name, points in series.items() if points}
        shown = dict(list(series.items())[: len(SERIES_COLORS)])
        total_layers = max((len(run.layers) for run in runs), default=0)
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
            rows = run_overlap(run_a, run_b)
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

    def action_toggle_view(self) -> None:
        views = self.query_one("#results-views", ContentSwitcher)
        views.current = "paper" if views.current == "results" else "results"

    @on(DataTable.RowSelected, "#results")
    def action_open_run(self) -> None:
        run = self.cursor_run(self.query_one("#results", DataTable))
        if run is not None:
            self.app.follow(run.id)

    def _export_text(self, fmt: str) -> str | None:
        runs = self.chosen()
        if not runs:
            self.notify("No finished runs to export.", severity="warning")
            return None
        if fmt == "csv":  # with their layers, for the per-layer columns
            runs = self.app.store.list_runs(ids=[r.id for r in runs], layers=True)
        try:
            if fmt == "pareto":  # the Pareto view's figure, as acetui figure pareto writes it
                lines, xlabel, ylabel = self.pareto()
                if not lines:
                    raise UserError("The chosen runs have nothing to draw (no finished run with a perplexity).")
                return to_pgfplots(lines, xlabel, ylabel)
            return export(runs, fmt, evidence=self._evidence(runs))  # tied rows bold, the CSV's verdicts
        except UserError as error:
            self.notify(str(error), severity="error", timeout=8)
            return None

    def action_export(self, fmt: str) -> None:
        text = self._export_text(fmt)
        if text is None:
            return
        suffix = ".tex" if fmt in ("latex", "pareto") else f".{fmt}"
        kind = "-pareto" if fmt == "pareto" else ""
        try:
            folder = export_dir(self.app.preferences.export_dir)
            folder.mkdir(parents=True, exist_ok=True)
            stem = f"acetui{kind}-{time.strftime('%Y%m%d-%H%M%S')}"
            path = reserve_new_file(folder, stem, suffix, self.app.store.protected_places())
        except (UserError, OSError) as error:
            self.notify(f"Could not save the export: {error}", severity="error", timeout=10)
            return
        self.app.deliver_text(io.StringIO(text), save_directory=folder, save_filename=path.name, name="export")

    def action_copy_latex(self) -> None:
        text = self._export_text("latex")
        if text is None:
            return
        self.app.copy_to_clipboard(text)
        what = f"LaTeX table of {len(self.chosen())} run(s)"
        if tmux_drops_clipboard():  # the copy never reaches the terminal: keep it in a file too
            self.action_export("latex")
            self.notify(f"{TMUX_CLIPBOARD_HINT}; the {what} is saved as a file instead.", timeout=12)
            return
        self.notify(f"{what} copied to the clipboard (OSC 52).")
