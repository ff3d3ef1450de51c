"""The Results screen's exports of the chosen runs: a CSV or LaTeX file (``acetui_core.analysis.export``), the
Pareto view as a pgfplots figure, or the LaTeX table to the clipboard (OSC 52; a file too inside a tmux
that drops it). Files go to the export folder, never over another."""

from __future__ import annotations

import time
from contextlib import suppress
from pathlib import Path

from acetui.app.exports import (
    EXPORT_DIR_ADVICE,
    TMUX_CLIPBOARD_HINT,
    home_short,
    make_export_dir,
    refused_folders,
    tmux_drops_clipboard,
)
from acetui.app.paper import in_store_order
from acetui.app.screens.results_plots import ResultsPlots
from acetui_core.analysis.comparison import comparison
from acetui_core.analysis.export import export
from acetui_core.analysis.figures import off_log_axis, to_pgfplots
from acetui_core.basics.errors import UserError, os_sentence
from acetui_core.basics.outputs import reserve_new_file, write_text_atomic


class ResultsExports(ResultsPlots):
    def _export_text(self, fmt: str) -> str | None:
        runs = in_store_order(self.chosen())  # the CLI's rows and columns, whatever the table's sort
        if not runs:
            self.notify("No finished runs to export.", severity="warning")
            return None
        if fmt == "csv":  # with their layers, for the per-layer columns
            runs = self.app.store.list_runs(ids=[r.id for r in runs], layers=True)
        try:
            if fmt == "pareto":  # the Pareto view's figure, as acetui figure pareto writes it
                lines, xlabel, ylabel = self.pareto()
                if not off_log_axis(lines)[0]:  # none, or every point at x = 0 (magnitude alone, by tokens)
                    raise UserError("The chosen runs have nothing to draw on the view's log axis.")
                return to_pgfplots(lines, xlabel, ylabel)
            return export(runs, fmt, evidence=self.evidence(runs))  # tied rows bold, the CSV's verdicts
        except UserError as error:
            self.notify(str(error), severity="error", timeout=8)
            return None

    def action_export(self, fmt: str) -> Path | None:
        """Save the export as a new file and say where; the file's path, or None where a notice said why not."""
        text = self._export_text(fmt)
        if text is None:
            return None
        suffix = ".tex" if fmt in ("latex", "pareto") else f".{fmt}"
        kind = "-pareto" if fmt == "pareto" else ""
        try:
            path = self._save(text, f"acetui{kind}-{time.strftime('%Y%m%d-%H%M%S')}", suffix)
        except UserError as error:
            self.notify(f"Could not save the export: {error}", severity="error", timeout=10)
            return None
        except OSError as error:
            self.notify(f"Could not save the export. {os_sentence(error)}", severity="error", timeout=10)
            return None
        self.notify(f"Saved {path.name}\nin {home_short(path.parent)}")  # each on a line of its own (80 columns)
        return path

    def _save(self, text: str, stem: str, suffix: str) -> Path:
        """``text`` as a new file of the export folder, whole or not at all: written beside the reserved
        name and renamed over it once complete (a full disk left a file cut mid-row), the reservation
        removed when that fails."""
        folder = make_export_dir(self.app.preferences.export_dir)
        store = self.app.store
        refused = refused_folders(store.folder)
        path = reserve_new_file(folder, stem, suffix, store.protected_places(), refused, EXPORT_DIR_ADVICE)
        try:
            write_text_atomic(path, text)
        except BaseException:
            with suppress(OSError):  # the refusal is what to say; at worst an empty file stays
                path.unlink()
            raise
        return path

    def _table_count(self) -> str:
        """What the LaTeX table holds, as its notice says it: the runs it counts, and the repeated runs of
        a seed it leaves out (each seed counts once, its latest run)."""
        grid = comparison(in_store_order(self.chosen()))
        held = {run.id for cell in grid.cells.values() for run in cell.runs}
        repeats = {run.id for cell in grid.cells.values() for run in cell.repeats}
        left_out = (
            f" ({len(repeats)} repeated run{'s' if len(repeats) > 1 else ''} of a seed left out)" if repeats else ""
        )
        return f"LaTeX table of {len(held)} run(s){left_out}"

    def action_copy_latex(self) -> None:
        text = self._export_text("latex")
        if text is None:
            return
        self.app.copy_to_clipboard(text)
        what = self._table_count()
        if tmux_drops_clipboard():  # the copy never reaches the terminal: keep it in a file too
            if self.action_export("latex") is None:  # the notice above says why: neither copy nor file was made
                self.notify(f"{TMUX_CLIPBOARD_HINT}; the {what} was not copied.", severity="error", timeout=12)
            else:
                self.notify(f"{TMUX_CLIPBOARD_HINT}; the {what} is saved as a file instead.", timeout=12)
            return
        self.notify(f"{what} copied to the clipboard (OSC 52).")
