"""The Results screen's table: finished runs, one row each, with the columns that tell runs apart, filtered
by model, sorted by any column, selected for exports and plots. ``ResultsTable`` is the screen's base:
what is listed, what is chosen and the chosen runs' evidence, which the paper view, the plots and the
exports (``results.py``, ``results_plots.py``, ``results_export.py``) all read."""

from __future__ import annotations

import math

from textual.widgets import DataTable, Input, Static

from acetui.app import summary
from acetui.app.screens.common import (
    PADDING,
    Column,
    SortedRunListScreen,
    fit_columns,
    missing_last,
    refill,
)
from acetui_core.analysis.comparison import left_out_note, placeable
from acetui_core.analysis.rowlabels import row_labels
from acetui_core.basics.choices import RunStatus
from acetui_core.run.config import model_name
from acetui_core.scores.metrics import METHODS, reads_calibration
from acetui_core.storage.store_rows import RunEvidence, RunRecord


def zeroshot_mean(run: RunRecord) -> float | None:
    return run.results.zeroshot_mean if run.results else None


def _zeroshot_percent(run: RunRecord) -> str:
    """The mean accuracy with the partial mark (†: some task over part of its documents, --limit), as the
    perplexity has it: 50.0 on 4 examples a task is not a full task's number."""
    mean = zeroshot_mean(run)
    if mean is None:
        return "–"
    assert run.results is not None  # a mean comes from results
    return f"{mean * 100:.1f}" + ("†" if run.results.zeroshot_partial else "")


def _zeroshot_order(run: RunRecord) -> float:
    """Highest mean accuracy first; runs without one (or with NaN) last."""
    mean = zeroshot_mean(run)
    return missing_last(None if mean is None else -mean)


def _reads_no_calibration(run: RunRecord) -> bool:
    return run.config.method in METHODS and not reads_calibration(run.config)


def _calibration_order(run: RunRecord) -> tuple[bool, float, int]:
    """By window length, then samples; runs whose method reads no calibration data (shown –) after every
    other, whatever samples and length they recorded."""
    seqlen = run.config.seqlen
    return _reads_no_calibration(run), math.inf if seqlen == "full" else float(seqlen), run.config.nsamples


def _calibration(run: RunRecord) -> str:
    """Samples x window length, e.g. ``128×16`` (– for methods without calibration data)."""
    return "–" if _reads_no_calibration(run) else f"{run.config.nsamples}×{run.config.seqlen}"


def _windows(run: RunRecord) -> str:
    """Perplexity windows x their length, e.g. ``16×512``."""
    results = run.results
    if results is None or results.ppl_windows is None:
        return "–"
    return f"{results.ppl_windows}×{results.ppl_seqlen}" if results.ppl_seqlen else str(results.ppl_windows)


COLUMNS = [
    Column("Model", lambda r: model_name(r.config.model), lambda r: model_name(r.config.model)),
    Column("Method", lambda r: r.label, lambda r: r.label),  # named apart by ResultsTable.method_names
    Column("Sparsity", summary.sparsity_order, lambda r: r.config.target),  # experts removed too
    Column("PPL", lambda r: missing_last(r.ppl), summary.ppl_text),
    Column("Prune", lambda r: missing_last(r.prune_seconds), lambda r: summary.fmt_seconds(r.prune_seconds)),
    Column("0-shot%", lambda r: _zeroshot_order(r), _zeroshot_percent),
    Column("Calib", _calibration_order, _calibration),
    Column("Seed", lambda r: r.config.seed, lambda r: str(r.config.seed)),
    Column("Eval", lambda r: missing_last(r.results.ppl_windows if r.results else None), _windows),
    Column("Date", lambda r: r.finished or 0, lambda r: summary.fmt_time(r.finished, "%m-%d %H:%M")),
    Column("Id", lambda r: r.id, lambda r: r.id),
]
PPL_COLUMN = [c.title for c in COLUMNS].index("PPL")
# Settings the columns above show (Calib, Eval), which a Method cell need not repeat to tell runs apart.
SHOWN_SETTINGS = frozenset({"nsamples", "seqlen", "eval_seqlen", "eval_limit"})
# Where the columns do not fit (80 columns): first those every listed run shares (said on a line above the
# table instead), then the prune time and the date; then the model's path is cut at its start, then a long
# Method cell wraps. The columns that tell runs apart (method, sparsity, calibration, seed, evaluation, id)
# stay while they differ.
SAME_FIRST = ("Model", "Seed", "Calib", "Eval", "0-shot%", "Sparsity", "Method")
OPTIONAL = ("Date", "Prune")


class ResultsTable(SortedRunListScreen):
    AUTO_FOCUS = "#results"
    COLUMNS = COLUMNS
    LEADING = 1  # the selection mark
    FILTER, TABLE = "filter", "results"

    def on_mount(self) -> None:
        self.selected: set[str] = set(self.app.chosen_runs)
        # Each run's evidence, by run id: a finished run's never changes, so it is read once.
        self.kept: dict[str, RunEvidence] = {}
        self.sort_column, self.descending = PPL_COLUMN, False
        self.names: dict[str, str] = {}
        self.briefs: dict[str, str] = {}  # the same, settings at their defaults unsaid: for 80 columns
        super().on_mount()

    def _runs_listed(self, runs: list[RunRecord]) -> None:
        """A selected run removed from the store (``acetui runs rm`` elsewhere) leaves the selection with a
        word: were it the only one, ``e`` would export every listed run and the user would not know."""
        listed = {run.id for run in runs}
        gone = [run.id for run in self.runs if run.id in self.selected and run.id not in listed]
        if gone:
            self.selected -= set(gone)
            what = f"Run {gone[0]} was" if len(gone) == 1 else f"Runs {', '.join(gone)} were"
            rest = "" if self.selected & listed else "; none is selected now: e, l and the plots take every listed run"
            self.notify(f"{what} removed from the store and left the selection{rest}.", severity="warning", timeout=10)
        super()._runs_listed(runs)

    def finished_runs(self) -> tuple[list[RunRecord], list[RunRecord]]:
        """The finished runs this screen may list, and those it leaves out: runs whose settings cannot be
        read (``placeable``), which the Runs screen lists."""
        return placeable([r for r in self.runs if r.status == RunStatus.FINISHED])

    def filtered_runs(self) -> list[RunRecord]:
        """Finished runs matching the model filter, in the chosen order (never one whose settings cannot
        be read: ``finished_runs``)."""
        wanted = self.query_one("#filter", Input).value.strip().lower()
        runs = [r for r in self.finished_runs()[0] if wanted in r.config.model.lower()]
        self.method_names(runs)
        return sorted(runs, key=self.sort_key(), reverse=self.descending)

    def method_names(self, runs: list[RunRecord]) -> None:
        """Each listed run's Method cell: its label, and where runs of one label and model differ in a
        setting that can move a number (a permutation, DSnoT, a calibration length), what tells it apart,
        as the paper view names its rows (``Wanda-16 (lsa permutation, DSnoT)``): two rows never read
        the same while their runs differ. Made again only when the listed runs change."""
        named = [r for r in runs if r.results is not None]
        if {r.id for r in named} != self.names.keys():
            base = {r.id: r.label for r in named}
            self.names = row_labels(named, base, "ppl", "sparsity", shown=SHOWN_SETTINGS)
            self.briefs = row_labels(named, base, "ppl", "sparsity", shown=SHOWN_SETTINGS, brief=True)

    def method_name(self, run: RunRecord) -> str:
        return self.names.get(run.id, run.label)

    def sort_key(self):
        return self.method_name if self.COLUMNS[self.sort_column].title == "Method" else super().sort_key()

    def cell(self, column: Column, run: RunRecord) -> str:
        return self.method_name(run) if column.title == "Method" else column.cell(run) if column.cell else ""

    def chosen(self) -> list[RunRecord]:
        """The selected runs still visible, or every visible run when none is selected."""
        visible = self.filtered_runs()
        return [r for r in visible if r.id in self.selected] or visible

    def evidence(self, runs: list[RunRecord]) -> dict[str, RunEvidence]:
        """The evidence of ``runs`` (and of those read before), read from the store once per run."""
        missing = [r.id for r in runs if r.id not in self.kept]
        if missing:
            self.kept.update(self.app.store.evidence(missing))
        return self.kept

    def show_runs(self) -> None:
        visible = self.filtered_runs()
        table = self.query_one("#results", DataTable)
        fitted = fit_columns(
            [c.title for c in COLUMNS],
            [(r.id, tuple(self.cell(c, r) for c in COLUMNS)) for r in visible],
            self.table_width() - 1 - PADDING,  # the selection mark's column
            same_first=SAME_FIRST,
            optional=OPTIONAL,
            briefs={"Method": [self.briefs.get(r.id, r.label) for r in visible]},
            squeeze="Model",
            wrap="Method",
        )
        self.shown_columns = fitted.shown
        titles = [" ", *(COLUMNS[i].title for i in fitted.shown)]
        refill(table, titles, [(key, ("✓" if key in self.selected else " ", *cells)) for key, cells in fitted.rows])
        common = self.query_one("#results-common", Static)
        common.update("Every run: " + " · ".join(f"{title} {value}" for title, value in fitted.common))
        common.display = bool(fitted.common)
        picked = len([r for r in visible if r.id in self.selected])
        marked = [
            name
            for name, some in (
                ("ppl", any(r.ppl_partial for r in visible)),
                ("0-shot", any(r.results and r.results.zeroshot_partial for r in visible)),
            )
            if some
        ]
        partial = f" · † partial {' and '.join(marked)}" if marked else ""
        self.query_one("#results-info", Static).update(
            f"{len(visible)} run(s) · {picked} selected · {self.sort_text()}{partial}"
        )
        left = self.finished_runs()[1]
        note = self.query_one("#results-left-out", Static)
        note.update(
            left_out_note(left, "Runs (F4) lists them" if len(left) > 1 else "Runs (F4) lists it") if left else ""
        )
        note.display = bool(left)
        self._say_what_to_do(visible)

    def _say_what_to_do(self, visible: list[RunRecord]) -> None:
        """An empty table says why and what to do."""
        empty = self.query_one("#results-empty", Static)
        empty.display = not visible and self.app.runs_listed
        if self.finished_runs()[0]:
            empty.update("No finished run's model matches the filter: / edits it (escape: back to the table).")
        elif any(r.active for r in self.runs):
            empty.update("No run has finished yet: F2 follows the active one; its results come here when it ends.")
        else:
            empty.update(
                "No finished runs yet: start one on New run (F1) or with `acetui prune`; "
                "Runs (F4) shows the ones that failed or were cancelled."
            )

    def action_toggle_select(self) -> None:
        run = self.cursor_run(self.query_one("#results", DataTable))
        if run is not None:
            self.selected ^= {run.id}
            self.show_runs()

    def action_select_all(self) -> None:
        visible = {r.id for r in self.filtered_runs()}
        self.selected = set() if visible <= self.selected else self.selected | visible
        self.show_runs()
