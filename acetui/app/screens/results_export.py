"""The Results screen's exports of the chosen runs: a CSV or LaTeX file (``acetui_core.analysis.export``), the
Pareto view as a pgfplots figure, or the LaTeX table to the clipboard (OSC 52; a file too inside a tmux
that drops it). Files go to the export folder, never over another."""

from __future__ import annotations

import io
import time

from acetui.app.exports import TMUX_CLIPBOARD_HINT, export_dir, tmux_drops_clipboard
from acetui.app.screens.results_plots import ResultsPlots
from acetui_core.analysis.export import export
from acetui_core.analysis.figures import off_log_axis, to_pgfplots
from acetui_core.basics.errors import UserError
from acetui_core.basics.outputs import reserve_new_file


class ResultsExports(ResultsPlots):
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
                if not off_log_axis(lines)[0]:  # none, or every point at x = 0 (magnitude alone, by tokens)
                    raise UserError("The chosen runs have nothing to draw on the view's log axis.")
                return to_pgfplots(lines, xlabel, ylabel)
            return export(runs, fmt, evidence=self.evidence(runs))  # tied rows bold, the CSV's verdicts
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
