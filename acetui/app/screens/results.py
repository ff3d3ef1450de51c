"""Results: finished runs side by side, sortable and filterable (``results_table.py``); the paper's
comparison layout (drawn by ``acetui.app.paper``); plots of the chosen runs (``results_plots.py``); exports
(``results_export.py``).

The paper view's verdicts pair every window of every run with its column's best (seconds over hundreds of
runs): they are worked out in a thread, only while the view is shown, and kept by the set of runs they judge (a finished run's results
and evidence never change), so typing, selecting and scrolling never wait on statistics."""

from __future__ import annotations

from rich.console import Group
from rich.constrain import Constrain
from rich.segment import Segment
from rich.table import Table
from textual import work
from textual.app import ComposeResult, RenderResult
from textual.binding import Binding
from textual.containers import Horizontal, ScrollableContainer, Vertical
from textual.geometry import Size
from textual.message import Message
from textual.widgets import ContentSwitcher, DataTable, Footer, Header, Static

from acetui.app import paper
from acetui.app.screens.common import filter_keys, open_keys
from acetui.app.screens.results_export import ResultsExports
from acetui.app.widgets.plots import DepthPlot, ParetoPlot
from acetui.app.widgets.rowtable import RowTable
from acetui.app.widgets.scrolling import ScrollsAtOnce
from acetui.app.widgets.textfield import TextField
from acetui_core.storage.store_rows import RunRecord

PAPER_VIEWS_KEPT = 16  # paper views kept, by the runs they show: a filter typed and erased finds them again
PaperKey = tuple[frozenset[str], str, tuple[str, ...]]  # the chosen runs, how they are named, the selected pair


class PaperReady(Message):
    """The paper view of ``key``'s runs, worked out in a thread."""

    def __init__(self, key: PaperKey, view: Group | str) -> None:
        super().__init__()
        self.key, self.view = key, view


class PaperView(ScrollsAtOnce, ScrollableContainer):
    """The paper view, which scrolls both ways, a column or a line a key however fast the keys come."""


class PaperTables(Static):
    """The paper view's tables, as wide as the view or, where a table drawn whole is wider (``paper`` keeps
    each column as wide as its longest word), as wide as that table, the view then scrolling sideways:
    fitted to 80 columns, six column groups' cells were cut to ``50426.0…`` with nothing to scroll to. The
    legend and captions keep the view's width, so they read without scrolling."""

    DEFAULT_CSS = "PaperTables { width: auto; }"
    fitted: tuple[object, int, int] | None = None  # content, view width, width: layouts are often, drawing slow
    view_width = 0  # where the legend and captions wrap

    def get_content_width(self, container: Size, viewport: Size) -> int:
        if container.width != self.view_width:  # the view resized: the captions wrap anew though the table stays
            self.view_width = container.width
            self.refresh()
        if not isinstance(self.content, Group):  # a line saying why there is no table yet
            return container.width
        if self.fitted and self.fitted[:2] == (self.content, container.width):
            return self.fitted[2]
        width = container.width
        while True:  # a column widened to its longest word can widen the table: draw it again at that width
            options = self.app.console_options.update_width(width)
            lines = Segment.split_lines(self.app.console.render(self.content, options))  # uncropped
            drawn = max(Segment.get_line_length(line) for line in lines)
            if drawn <= width:
                self.fitted = (self.content, container.width, width)
                return width
            width = drawn

    def render(self) -> RenderResult:
        if not isinstance(self.content, Group) or not self.view_width:
            return super().render()
        parts = self.content.renderables
        return Group(*(part if isinstance(part, Table) else Constrain(part, self.view_width) for part in parts))


class ResultsScreen(ResultsExports):
    # The footer shows the main keys; the others are in the help (F5).
    BINDINGS = [
        *filter_keys("model"),
        Binding("space", "toggle_select", "Select", tooltip="Select the highlighted run (exports take the selection)"),
        Binding("a", "select_all", "Select all", show=False, tooltip="Select every listed run, or none"),
        Binding("s", "sort(1)", "Sort", tooltip="Sort by the next column (header clicks too)"),
        Binding("S", "sort(-1)", "Sort back", show=False, tooltip="Sort by the previous column"),
        Binding("r", "reverse", "Reverse sort", show=False, tooltip="Reverse the order"),
        Binding("v", "toggle_view", "Paper", tooltip="The paper's layout: methods by sparsity (arrows scroll it)"),
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
        *open_keys("Open run", show=False),
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
            yield TextField(placeholder="/ filter by model", id="filter", compact=True, select_on_focus=False)
            yield Static("", id="results-info")
        yield Static("", id="results-common")
        yield Static("", id="results-left-out")
        yield Static("", id="results-empty")
        with ContentSwitcher(initial="results", id="results-views"):
            yield RowTable(id="results")
            with PaperView(id="paper"):
                yield PaperTables("", id="paper-table")
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
        self.paper_views: dict[PaperKey, Group | str] = {}
        self.paper_pending: set[PaperKey] = set()  # being worked out
        self.paper_shown: PaperKey | None = None
        super().on_mount()

    def show_runs(self) -> None:
        super().show_runs()
        self._show_paper()

    # ---- the paper view ----

    def _paper_runs(self) -> tuple[list[RunRecord], str, list[RunRecord]]:
        """The chosen runs, how the captions name them (selected or listed), and the selected ones."""
        runs = self.chosen()
        which = "selected" if any(r.id in self.selected for r in self.filtered_runs()) else "listed"
        return runs, which, [r for r in runs if r.id in self.selected]

    def paper_table(self) -> Group | str:
        """The chosen runs in the paper's layout (``acetui.app.paper``), the selected pair compared."""
        runs, which, picked = self._paper_runs()
        if not runs:
            return "No finished runs yet."
        return paper.view(runs, self.evidence(runs), which, picked)

    def _show_paper(self) -> None:
        """The paper view of the chosen runs, if it is shown: at once when these runs' view was worked out
        before, else from a thread (the table, the filter and the keys stay live meanwhile)."""
        if self.query_one("#results-views", ContentSwitcher).current != "paper":
            return
        runs, which, picked = self._paper_runs()
        key = (frozenset(r.id for r in runs), which, tuple(r.id for r in picked))
        if key == self.paper_shown:
            return
        self.paper_shown = key
        table = self.query_one("#paper-table", Static)
        if key in self.paper_views:
            table.update(self.paper_views[key])
        elif not runs:
            table.update("No finished runs yet.")
        else:
            table.update(f"Working out the verdicts of {len(runs)} run(s)…")
            if key not in self.paper_pending:
                self.paper_pending.add(key)
                self._work_out_paper(key, runs, which, picked)

    @work(thread=True, group="paper")
    def _work_out_paper(self, key: PaperKey, runs: list[RunRecord], which: str, picked: list[RunRecord]) -> None:
        self.post_message(PaperReady(key, paper.view(runs, self.evidence(runs), which, picked)))

    def on_paper_ready(self, message: PaperReady) -> None:
        self.paper_pending.discard(message.key)
        self.paper_views[message.key] = message.view
        while len(self.paper_views) > PAPER_VIEWS_KEPT:
            del self.paper_views[next(iter(self.paper_views))]
        if message.key == self.paper_shown:
            self.query_one("#paper-table", Static).update(message.view)

    async def action_focus_table(self) -> None:
        """Escape: from the paper view or a plot back to the table, as their own key again does; from the
        filter, to the table."""
        views = self.query_one("#results-views", ContentSwitcher)
        if views.current == "results" or self.focused is self.query_one(f"#{self.FILTER}"):
            await super().action_focus_table()
            return
        views.current = "results"
        self.paper_shown = None
        self.set_focus(self.query_one(f"#{self.TABLE}", DataTable))

    def action_toggle_view(self) -> None:
        views = self.query_one("#results-views", ContentSwitcher)
        views.current = "paper" if views.current == "results" else "results"
        self.paper_shown = None
        self._show_paper()
