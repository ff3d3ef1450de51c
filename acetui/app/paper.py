"""The Results screen's paper view: the chosen runs in the paper's layout, methods by sparsity, with their
WikiText-2 perplexity and mean zero-shot accuracy (each where some run measured it), every cell with its
interval and a verdict mark that reads without colour, and the paired difference of two selected runs.

Rich renderables from the engine's comparison (``acetui_core.analysis.comparison``) and verdicts
(``acetui_core.analysis.verdicts``); no widget, no store.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Group
from rich.table import Table
from rich.text import Text

from acetui.app.summary import run_name
from acetui_core.analysis.comparison import Comparison, comparison, measured
from acetui_core.analysis.verdicts import judge, run_difference
from acetui_core.basics.errors import UserError
from acetui_core.storage.store_rows import RunEvidence, RunRecord

# A verdict's mark beside its cell: a glyph that reads without colour (NO_COLOR), and a colour that helps.
VERDICT_MARKS = {
    "best": ("●", "green"),
    "tied": ("≈", "green"),
    "worse": ("▼", "red"),
    "unknown": ("?", "yellow"),
    "untested": ("–", "dim"),
}
VERDICT_LEGEND = "● best · ≈ tied with it · ▼ worse · ? 1 seed: noise unknown · – untested"  # one line at 80

# The paper view's tables (methods by sparsity), each shown where some chosen run measured it.
PAPER_MEASURES = {
    "ppl": "WikiText-2 perplexity of the {which} runs (lower is better), [95% interval]; bold: the best per "
    "column and rows tied with it.",
    "zeroshot-mean": "Mean zero-shot accuracy % of the {which} runs (higher is better), [95% interval], "
    "paired on the same documents.",
}
PARTIAL_NOTES = {
    "ppl": "† over part of the test set (--eval-limit): not comparable to full-set numbers.",
    "zeroshot-mean": "† some task over part of its documents (--limit): not comparable to full-task numbers.",
}


def in_store_order(runs: list[RunRecord]) -> list[RunRecord]:
    """``runs`` oldest first, as the store lists them to ``acetui export``: the paper's rows and columns
    follow the order runs come in, so the app's tables (this view, ``l``, ``y``) are the CLI's whatever
    the Results table's sort."""
    return sorted(runs, key=lambda run: (run.created, run.id))


def view(runs: list[RunRecord], kept: dict[str, RunEvidence], which: str, picked: list[RunRecord]) -> Group | str:
    """``runs`` (at least one) in the paper's layout, the best per column and the rows tied with it in bold,
    in the CLI's order whatever the order given (``in_store_order``); ``which`` names them in the captions
    (selected or listed); two ``picked`` runs get their paired difference (the newer minus the older)."""
    runs, picked = in_store_order(runs), in_store_order(picked)
    parts: list = [Text(VERDICT_LEGEND)]  # first: the marks must be read before the cells (NO_COLOR)
    unmeasured = []
    grids = {}
    # Each table's row labels take the other's runs into account, so that a run reads alike in both
    # ("Wanda-16 (row groups, OWL)" in one and "Wanda-16" in the other said two things of one run).
    shown = [run for run in runs if measured(run, "ppl") or measured(run, "zeroshot")]
    for measure in PAPER_MEASURES:
        try:
            grids[measure] = judge(comparison(runs, measure=measure, beside=shown), kept)
        except UserError as error:  # no chosen run measured it
            unmeasured.append(str(error))
    # the model is named in every table's headers where one table has several: a table of one model
    # beside one of two named no model at all
    several = any(len(grid.models) > 1 for grid in grids.values())
    for measure, grid in grids.items():
        caption = PAPER_MEASURES[measure]
        notes = [caption.format(which=which)]
        if grid.partial:
            notes.append(PARTIAL_NOTES[measure])
        repeats = grid.repeats_note()
        if repeats:
            notes.append(repeats)
        parts += [Text("\n".join(notes)), _grid_table(grid, several)]
    if len(parts) == 1:
        return unmeasured[0]
    if len(picked) == 2:
        parts.append(Text(_paired(picked, kept)))
    return Group(*parts)


def _grid_table(grid: Comparison, several: bool = False) -> Table:
    """The table of ``grid``, each column at least as wide as its longest word: narrowed to fit a terminal,
    Rich cut cells with an ellipsis (``50426.0…``, the mark and † gone, ``tiny-ll…``); now they wrap at
    spaces only, and the table comes out wider than asked where it must (the view scrolls sideways).
    Its headers name the model where it has several column groups, or ``several`` (another table of the
    view has)."""
    grid.ci = "interval"
    table = Table(expand=False)
    several = several or len(grid.models) > 1
    headers = ["Method", *(f"{model} {header}" if several else header for model, header in grid.columns)]
    rows = [[Text(row), *(_cell(grid, row, column) for column in grid.columns)] for row in grid.rows]
    for index, header in enumerate(headers):
        longest = _longest_word([header, *(cells[index].plain for cells in rows)])
        table.add_column(header, justify="right" if index else "left", min_width=longest)
    for cells in rows:
        table.add_row(*cells)
    return table


def _longest_word(texts: list[str]) -> int:
    """The width of the widest run of characters without a space in ``texts``."""
    return max(cell_len(word) for text in texts for word in text.split())


def _cell(grid: Comparison, row: str, column: tuple[str, str]) -> Text:
    """The cell's value with its verdict's mark joined to it, then its interval and n: a narrow column
    (80 terminal columns, several sparsities) wraps at a space, which puts the interval and n on lines of
    their own but never takes the mark away from its number."""
    text = grid.text(row, column, lambda v: f"[b]{v}[/b]", "†", "|", "±")
    verdict = grid.verdicts.get((row, column))
    if verdict is None:
        return Text.from_markup(text)
    value, _, rest = text.partition(" ")  # the value (in bold if best) comes first, before any space
    glyph, colour = VERDICT_MARKS[verdict.verdict]
    cell = Text.from_markup(value).append(glyph, style=colour)
    return cell.append_text(Text.from_markup(f" {rest}")) if rest else cell


def _paired(picked: list[RunRecord], kept: dict[str, RunEvidence]) -> str:
    """The paired difference of the two selected runs on their shared windows, and on their shared
    zero-shot documents when both were scored."""
    first, second = picked
    names = f"{run_name(second)} − {run_name(first)}"
    measured = {
        "ppl": any(run.results and run.results.ppl_wikitext2 is not None for run in picked),
        "zeroshot": all(run.results and run.results.zeroshot for run in picked),
    }
    lines = []
    for measure, unit, units in (("ppl", "ppl", "windows"), ("zeroshot", "points of mean accuracy", "documents")):
        if not measured[measure] and (measure == "zeroshot" or measured["zeroshot"]):
            continue
        difference = run_difference(first, second, kept, measure=measure)
        if isinstance(difference, str):
            lines.append(f"Paired difference {names}: {difference}.")
            continue
        value, low, high, p = difference
        lines.append(
            f"Paired difference {names}: {value:+.2f} {unit} [{low:+.2f}, {high:+.2f}], p = {p:.3g} "
            f"(same {units}; one run each, so seed noise is not included)."
        )
    return "\n".join(lines)
