"""Runs from the store as CSV (one row per run, every field), or as comparison tables
(``acetui_core.analysis.comparison``) in LaTeX and Markdown laid out like the paper's: best per column, and every
row tied with it (``acetui_core.analysis.verdicts``), in bold."""

from __future__ import annotations

import csv
import io
import re
from datetime import datetime, timezone
from pathlib import PurePath

from acetui_core.analysis.comparison import AVERAGE, Comparison, check_table, comparison
from acetui_core.analysis.verdicts import judge
from acetui_core.basics.errors import UserError
from acetui_core.basics.jsontext import json_text
from acetui_core.basics.texttable import aligned
from acetui_core.storage.store_rows import RunEvidence, RunRecord

FORMATS = ("csv", "latex", "markdown")

_TIME_FIELDS = ("created", "started", "finished", "heartbeat")
_SKIPPED = {"layers", "results.layers", "results.config", "results.window_losses", "results.task_outcomes"}


# The format a file's extension names: ``-o table.tex`` without --format wrote CSV into a .tex file.
FORMAT_OF_EXTENSION = {".csv": "csv", ".tex": "latex", ".md": "markdown"}


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise UserError(f"Unknown export format '{fmt}'; choose one of: {', '.join(FORMATS)}.")


def format_for(fmt: str | None, output: str | None) -> str:
    """The format of an export written to ``output`` (None or ``-``: stdout): ``fmt`` when one is given,
    else the one the file's extension names (``FORMAT_OF_EXTENSION``), else csv. A format that contradicts
    the extension is refused: a file named table.tex holding CSV is a surprise later, in the paper."""
    extension = PurePath(output).suffix.lower() if output not in (None, "-") else ""
    named = FORMAT_OF_EXTENSION.get(extension)
    if fmt is None:
        return named or "csv"
    check_format(fmt)
    if named is not None and named != fmt:
        raise UserError(
            f"--format {fmt} does not match -o {output} (a {extension} file is {named}); "
            f"give --format {named}, or leave --format out."
        )
    return fmt


def export(
    records: list[RunRecord],
    fmt: str,
    *,
    cells: str = "ppl",
    columns: str = "sparsity",
    measure: str = "ppl",
    evidence: dict[str, RunEvidence] | None = None,
    level: float = 0.95,
    ci: str = "none",
) -> str:
    """The text of ``records`` in ``fmt`` (one of ``FORMATS``), with the verdicts ``evidence`` (what the
    runs kept, ``Store.evidence``) allows at ``level``; ``ci``: intervals in the cells (``CI_STYLES``)."""
    check_format(fmt)
    # before the CSV's table, which is skipped when no run has the measure and took a bad --columns with it
    check_table(cells, columns, measure)
    kept = evidence or {}
    if fmt == "csv":
        try:
            table = judge(comparison(records, columns=columns, measure=measure), kept, level)
        except UserError:  # no finished run with that measure: the CSV still lists every run
            table = None
        return to_csv(records, table)
    table = judge(comparison(records, cells=cells, columns=columns, measure=measure), kept, level)
    table.ci = ci
    return to_latex(table) if fmt == "latex" else to_markdown(table)


# ---- CSV ---------------------------------------------------------------------------------------


def _iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _flatten(value, prefix: str, out: dict) -> None:
    if prefix in _SKIPPED:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}" if prefix else key, out)
    elif isinstance(value, list):
        if all(not isinstance(item, (dict, list)) for item in value):
            out[prefix] = " ".join(str(item) for item in value)
        else:  # records, such as each expert's load and removal (results.experts.removal): JSON text
            out[prefix] = json_text(value, indent=None)
    else:
        out[prefix] = value


def csv_row(record: RunRecord) -> dict:
    """Every field of a run as ``column -> value``; nested fields as dotted names (``results.ppl_wikitext2``)."""
    data = record.to_dict()
    for name in _TIME_FIELDS:
        data[name] = _iso(data[name])
    row: dict = {}
    _flatten(data, "", row)
    row.update(fidelity_columns(record))
    return row


def fidelity_columns(record: RunRecord) -> dict:
    """The output fidelity of each decoder layer (``--fidelity``; needs the record's layers loaded)."""
    columns = {}
    for layer in record.layers:
        if layer.fidelity is not None:
            columns[f"fidelity.layer{layer.index}.cosine"] = layer.fidelity.cosine
            columns[f"fidelity.layer{layer.index}.rel_error"] = layer.fidelity.rel_error
    return columns


VERDICT_COLUMNS = ["row", "group", "column", "value", "ci_low", "ci_high", "n", "verdict"]


def verdict_columns(table: Comparison | None) -> dict[str, dict]:
    """Per run id, the comparison cell it belongs to: its row, column group (the model, and the evaluation
    where runs differ in it) and column as the table names them, so that row, group and column name one cell
    whatever else the export holds; its value
    (mean over seeds), interval, seeds and verdict (in the per-task zero-shot table, its Avg. column: its mean over the tasks, not its first task)."""
    columns: dict[str, dict] = {}
    cells = sorted(table.cells.items(), key=lambda item: item[0][1][1] != AVERAGE) if table else []
    for (row, column), cell in cells:
        verdict = table.verdicts.get((row, column)) if table else None
        for run in [*cell.runs, *cell.repeats]:
            said = verdict.verdict if verdict else None
            columns.setdefault(
                run.id,
                {
                    "row": row,
                    "group": column[0],
                    "column": column[1],
                    "value": cell.value,
                    "ci_low": verdict.ci[0] if verdict and verdict.ci else None,
                    "ci_high": verdict.ci[1] if verdict and verdict.ci else None,
                    "n": len(cell.values),
                    "verdict": f"repeat of seed {run.config.seed}, not counted" if run in cell.repeats else said,
                },
            )
    return columns


def to_csv(records: list[RunRecord], table: Comparison | None = None) -> str:
    """One row per run; the columns are the union of the runs' fields, in order of first appearance, then
    its comparison cell's value, interval, seeds and verdict (``table``)."""
    cells = verdict_columns(table)
    rows = [csv_row(record) for record in records]
    header = list(dict.fromkeys(key for row in rows for key in row))
    # a field empty in some runs and nested in others (results.experts_removed) is its dotted columns alone
    nested = {key.rpartition(".")[0] for key in header}
    header = [key for key in header if key not in nested or any(row.get(key) not in (None, "") for row in rows)]
    if cells:
        header += VERDICT_COLUMNS
        rows = [{**row, **cells.get(record.id, {})} for row, record in zip(rows, records, strict=True)]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=header, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


# ---- LaTeX -------------------------------------------------------------------------------------

_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    # LaTeX's default OT1 encoding sets these characters as other glyphs: | as an em dash, < and > as ¡ and ¿
    "|": r"\textbar{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
}


def latex_escape(text: str) -> str:
    """``text`` as LaTeX prints it in any font encoding (a row label, a model name, a figure's legend)."""
    return "".join(_LATEX_SPECIAL.get(char, char) for char in text)


def _caption(table: Comparison, latex: bool) -> str:
    what = {
        "ppl": "WikiText-2 perplexity",
        "zeroshot": "Zero-shot accuracy (%) per task",
        "zeroshot-mean": "Mean zero-shot accuracy (%)",
    }[table.measure]
    what += " | pruning time (s) | calibration tokens | peak memory (GiB)" if table.cell_format == "ppl-time" else ""
    if latex:
        what = latex_escape(what)
    model = latex_escape(table.models[0]) if latex else table.models[0]
    of = f" of {model}" if len(table.models) == 1 else ""
    of += f" at sparsity {latex_escape(table.sparsity) if latex else table.sparsity}" if table.sparsity else ""
    better = "lower" if table.measure == "ppl" else "higher"
    bold = "best per column, and every row tied with it, in bold" if table.tested else "best per column in bold"
    shared = ", ".join(table.shared)
    shared = f" Every run, where it applies: {latex_escape(shared) if latex else shared}." if shared else ""
    return f"{what}{of} ({better} is better; {bold}).{shared}"


def verdict_note(table: Comparison, dash: str = "–") -> str | None:
    """The footnote of a table with verdicts: the test, its level, the seeds per cell and the interval."""
    unknown = any(v.verdict == "unknown" for v in table.verdicts.values())
    repeats = table.repeats_note()
    spread = "± is the standard deviation of a cell's seeds." if table.shows_sd else None
    marked = any(table.untested(row, column) for row, column in table.verdicts)
    untested = (
        "? marks a cell not compared with its column's best (one seed, one window or no record to pair: "
        "acetui verdict says which); not being bold does not make it worse."
        if marked
        else None
    )
    if not table.tested and not unknown:
        return " ".join(part for part in (untested, spread, repeats) if part) or None
    level = f"{table.level * 100:g}%"
    units = "windows" if table.measure == "ppl" else "documents"
    seeds = sorted({len(cell.values) for cell in table.cells.values()})
    n = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}{dash}{seeds[-1]}"
    parts = [
        f"Tied: not distinguishable from the column's best by a paired t-test on the same {units} with the "
        f"seed-to-seed spread added, Holm-corrected per column, at the {level} level; n = {n} seed(s) per cell."
    ]
    if table.ci == "pm":
        parts.append(
            f"± is the distance from the value to either end of its {level} interval; where the ends are at "
            "different distances, the cell gives both (+up/−down)."
        )
    elif table.ci == "interval":
        parts.append(f"[low, high] is the {level} interval.")
    elif spread:
        parts.append(spread)
    if unknown:
        parts.append(
            "A row is not tested where it or its column's best is a calibrated method with one seed: "
            "that seed noise is unknown."
        )
    if untested:
        parts.append(untested)
    if repeats:
        parts.append(repeats)
    return " ".join(parts)


_PARTIAL_NOTES = {
    "ppl": "perplexity over part of the WikiText-2 test set{how}; not comparable to full-set numbers.",
    "zeroshot": "accuracy over the first examples of a task only{how}; not comparable to full-task numbers.",
}


def _partial_note(table: Comparison, how: str) -> str:
    return _PARTIAL_NOTES["ppl" if table.measure == "ppl" else "zeroshot"].format(how=how)


def to_latex(table: Comparison) -> str:
    """A ``table`` float with booktabs rules; needs only ``\\usepackage{booktabs}``."""
    width = len(table.columns)
    lines = [
        "% acetui export: needs \\usepackage{booktabs} in the preamble.",
        "\\begin{table}[ht]",
        "\\centering",
        f"\\caption{{{_caption(table, latex=True)}}}",
        "\\label{tab:acetui}",
        f"\\begin{{tabular}}{{l{'c' * width}}}",
        "\\toprule",
    ]
    if len(table.models) > 1:
        groups = [(m, sum(1 for model, _ in table.columns if model == m)) for m in table.models]
        # "Method" sits on the second header row: a \multirow would need multirow.sty, which
        # texlive-latex-recommended lacks.
        lines.append(" & " + " & ".join(f"\\multicolumn{{{n}}}{{c}}{{{latex_escape(m)}}}" for m, n in groups) + " \\\\")
        rules, start = [], 2
        for _, n in groups:
            rules.append(f"\\cmidrule(lr){{{start}-{start + n - 1}}}")
            start += n
        lines.append(" ".join(rules))
    lines.append("Method & " + " & ".join(latex_escape(h) for _, h in table.columns) + " \\\\")
    lines.append("\\midrule")
    for row in table.rows:
        cells = [
            table.text(
                row,
                column,
                lambda v: f"\\textbf{{{v}}}",
                "$^\\dagger$",
                "\\textbar{}",
                "$\\pm$",
                "$^{{+{up}}}_{{-{down}}}$",
                "$^{?}$",
            )
            for column in table.columns
        ]
        lines.append(" & ".join([latex_escape(row), *cells]) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    if table.partial:
        # No "--eval-limit" here: LaTeX would typeset its "--" as an en dash.
        lines.append(f"\\par\\smallskip{{\\footnotesize $^\\dagger$ {_partial_note(table, '')}}}")
    note = verdict_note(table, dash="--")
    if note:
        note = latex_escape(note).replace("±", "$\\pm$").replace("+up/−down", "$^{+\\mathrm{up}}_{-\\mathrm{down}}$")
        note = note.replace("? marks", "$^{?}$ marks")
        lines.append(f"\\par\\smallskip{{\\footnotesize {note}}}")
    lines.append("\\end{table}")
    return "\n".join(lines) + "\n"


# ---- Markdown ----------------------------------------------------------------------------------


# What Markdown would read as markup in a label: a bar ends a cell (``CosP+VarP-8 (|W|^2)``), a ``*`` or a
# word-edge ``_`` starts emphasis (``_scores.py``'s plug-in), backticks code, ``<`` an HTML tag. An ``_``
# inside a word (``tiny_llama``) is text in CommonMark and stays as it is, readable in a terminal.
_MARKUP = re.compile(r"[\\|*`<>\[\]]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def markdown_cell(text: str) -> str:
    """``text`` as one cell of a pipe table that renders as the text it is."""
    return _MARKUP.sub(lambda found: "\\" + found.group(), text)


def to_markdown(table: Comparison) -> str:
    """A GitHub-flavoured pipe table, padded so it also reads well in a terminal."""
    several = len(table.models) > 1
    header = ["Method", *(markdown_cell(f"{m} {h}" if several else h) for m, h in table.columns)]
    body = [
        [
            markdown_cell(row),
            *(table.text(row, column, lambda v: f"**{v}**", "†", "\\|", "±", untested="?") for column in table.columns),
        ]
        for row in table.rows
    ]
    padded = aligned([header, *body], right=range(1, len(header)))
    rule = ["-" * len(c) if i == 0 else "-" * (len(c) - 1) + ":" for i, c in enumerate(padded[0])]
    lines = ["| " + " | ".join(cells) + " |" for cells in [padded[0], rule, *padded[1:]]]
    out = [f"{_caption(table, latex=False)}", "", *lines]
    if table.partial:
        out += ["", f"† {_partial_note(table, ' (--eval-limit)' if table.measure == 'ppl' else ' (--limit)')}"]
    note = verdict_note(table)
    if note:
        out += ["", note]
    return "\n".join(out) + "\n"
