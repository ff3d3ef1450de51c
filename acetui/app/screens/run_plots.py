"""The Run screen's tabs: the score histogram of the highlighted layer's linears; sparsity, Var[x²] and
output fidelity along depth; a mixture-of-experts run's token load; the configuration the run was started
with. Drawn from the run's record and the layers recorded so far, which the Run screen holds: no store,
no threads here."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.dom import DOMNode
from textual.markup import escape
from textual.widgets import DataTable, Static, TabbedContent, TabPane

from acetui.app.widgets.plots import (
    DepthPlot,
    ScoreHistogram,
    choice_caption,
    fidelity_series,
    fidelity_title,
    histogram_caption,
    sparsity_series,
    sparsity_title,
    uniform_note,
    variance_series,
)
from acetui.app.widgets.scrolling import TextScroll
from acetui_core.basics.errors import UserError
from acetui_core.run.records import LayerRecord
from acetui_core.scores.metrics import get_method, reads_calibration
from acetui_core.storage.store_rows import RunRecord

# Each tab's name, and the short one it takes where the full names do not fit beside the layers (under
# FULL_TABS terminal columns: at 80, the plots pane has 39).
TAB_NAMES = {
    "scores": ("Scores", "Scores"),
    "sparsity": ("Sparsity", "Spars."),
    "variance": ("Var[x²]", "Var"),
    "fidelity": ("Fidelity", "Fid."),
    "experts": ("Experts", "Exp."),
    "config": ("Config", "Cfg"),
}
FULL_TABS = 110
NO_FIDELITY = (
    "This run did not record output fidelity. A run started with --fidelity (New run: Advanced, Fidelity) "
    "records how far each layer's and each linear's output moved from the dense model's (||Y-Y'||/||Y||), "
    "drawn here along depth. u re-runs this one with the form filled."
)


def plot_tabs() -> ComposeResult:
    with TabbedContent(id="plots"):
        with TabPane("Scores", id="scores"):
            yield Static("", id="histogram-caption")
            yield ScoreHistogram(id="histogram")
        with TabPane("Sparsity", id="sparsity"):
            yield Static("", id="sparsity-note", classes="note")
            yield DepthPlot("sparsity by layer", ylim=(0, 1), id="sparsity-plot")
        with TabPane(escape("Var[x²]"), id="variance"):
            yield Static("", id="variance-note", classes="note")
            yield DepthPlot("Var[x²] of inputs by layer", log=True, id="variance-plot")
        with TabPane("Fidelity", id="fidelity"):
            yield Static("", id="fidelity-note", classes="note")
            yield DepthPlot(fidelity_title({}), log=True, id="fidelity-plot")
        with TabPane("Experts", id="experts"), TextScroll():
            yield Static("", id="experts-text")
        with TabPane("Config", id="config"), TextScroll():
            yield Static("", id="config-text")


def name_tabs(screen: DOMNode, width: int) -> None:
    """The tabs' full names where they fit in ``width`` terminal columns, else their short ones."""
    plots = screen.query_one("#plots", TabbedContent)
    for pane, (full, short) in TAB_NAMES.items():
        plots.get_tab(pane).label = escape(full if width >= FULL_TABS else short)


def replot(screen: DOMNode, run: RunRecord | None, layers: list[LayerRecord], linear: int) -> None:
    """Every plot of ``run`` from its ``layers`` (the histogram: of the ``linear``-th linear of the layer
    highlighted in the layers table)."""
    total = (run.num_layers if run else None) or len(layers)
    series = sparsity_series(layers)
    screen.query_one("#sparsity-plot", DepthPlot).show(total, series, sparsity_title(series) if layers else None)
    _show_note(screen, "sparsity", uniform_note(series))
    variance = variance_series(layers)
    screen.query_one("#variance-plot", DepthPlot).show(total, variance)
    _show_note(screen, "variance", _no_variance(run) if layers and not variance["median"] else "")
    fidelity = fidelity_series(layers)
    # --fidelity is put back to off for such a run: "run with --fidelity" would send the user round in a circle
    uncalibrated = _reads_no_calibration(run) if layers and not fidelity else None
    title = "no fidelity: no calibration activations" if uncalibrated else fidelity_title(fidelity)
    screen.query_one("#fidelity-plot", DepthPlot).show(total, fidelity, title)
    recorded = run is None or run.config.fidelity or not layers
    if uncalibrated:
        note = (
            f"{uncalibrated} reads no calibration activations, so this run has no output fidelity to draw "
            "(with --update obs or --refine dsnot it reads them)."
        )
    else:
        note = "" if fidelity or recorded else NO_FIDELITY
    _show_note(screen, "fidelity", note)
    replot_histogram(screen, run, layers, linear)


def _reads_no_calibration(run: RunRecord | None) -> str | None:
    """The paper's name of the run's method where it reads no calibration activations (magnitude), else None."""
    try:
        method = get_method(run.config.method) if run is not None else None
    except UserError:  # a plug-in this environment cannot import
        method = None
    if run is not None and method is not None and not reads_calibration(run.config):
        return method.paper_name
    return None


def _no_variance(run: RunRecord | None) -> str:
    """Why a run with layers drew no Var[x²]: its method reads no activations, or it predates the statistic."""
    name = _reads_no_calibration(run)
    if name is not None:
        return f"{name} reads no calibration activations, so this run has no Var[x²] of inputs to draw."
    return "This run recorded no Var[x²] of its layers' inputs (runs before the statistic was kept did not)."


def _show_note(screen: DOMNode, tab: str, text: str) -> None:
    """The line over a plot that says why it shows little (nothing recorded, every line on one)."""
    note = screen.query_one(f"#{tab}-note", Static)
    note.update(escape(text))
    note.display = bool(text)


def replot_histogram(screen: DOMNode, run: RunRecord | None, layers: list[LayerRecord], linear: int) -> None:
    """The score histogram of the highlighted layer's ``linear``-th linear (counted round its linears)."""
    plot = screen.query_one("#histogram", ScoreHistogram)
    caption = screen.query_one("#histogram-caption", Static)
    table = screen.query_one("#layers", DataTable)
    if not layers or table.row_count == 0:
        ended = run is not None and not run.active  # cancelled or failed before its first layer ended
        plot.show("the run ended before a layer" if ended else "no layer pruned yet", None)
        caption.update("")
        return
    layer = layers[min(table.cursor_row, len(layers) - 1)]
    linears = layer.linears
    if not linears:
        plot.show(f"L{layer.index}: no linears recorded", None)
        caption.update("")
        return
    linear %= len(linears)
    shown = linears[linear]
    histogram = shown.histogram
    title = f"L{layer.index} {shown.name} ({linear + 1}/{len(linears)})"
    if histogram is None and run is not None and run.config.removes_experts_alone:
        title += ": no scores (--sparsity 0: whole experts removed, no mask)"
    elif histogram is None:
        title += ": no scores (solved, not scored)"
    elif histogram.threshold is not None:
        title += f" thr {histogram.threshold:.3g}"
    plot.show(title, histogram, keep=len(f"L{layer.index} "))  # cut in the linear's name, not the threshold
    config = run.config if run else None
    text = histogram_caption(config.sparsity, config.group, histogram) if config else ""
    caption.update(escape(" ".join(filter(None, (text, choice_caption(shown.choice))))))
