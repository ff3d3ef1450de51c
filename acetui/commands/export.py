"""``acetui export``: runs as CSV (every field, one row per run), or a LaTeX/Markdown table in the paper's layout."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from acetui import options
from acetui_core import parse
from acetui_core.comparison import COLUMNS, MEASURES
from acetui_core.errors import UserError
from acetui_core.export import FORMATS, check_format, export
from acetui_core.store import RunRecord, Store


def select_runs(store: Store, runs: str | None, model: str | None, last: int | None) -> list[RunRecord]:
    """The runs an export names (all of them by default); an empty selection is the user's error."""
    ids = parse.some(runs, "--runs") if runs is not None else None
    records = store.list_runs(ids=ids, model=model, last=last, layers=True)  # layers: per-layer CSV columns
    if not records:
        chosen = " ".join(
            f"{flag} {value}"
            for flag, value in (("--runs", runs), ("--model", model), ("--last", last))
            if value is not None
        )
        raise UserError(f"No run in {store.path} matches {chosen or 'the selection'}; acetui runs lists them.")
    return records


def write_output(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    if output.is_dir():
        raise UserError(f"-o {output} is a folder; give a file name.")
    if not output.parent.is_dir():
        raise UserError(f"Cannot write {output}: the folder {output.parent} does not exist.")
    output.write_text(text)  # an OS refusal becomes one sentence in acetui.cli


def export_runs(
    format: Annotated[str, typer.Option("--format", "-f", help=f"One of: {', '.join(FORMATS)}.")] = "csv",
    runs: Annotated[str | None, typer.Option(help="Run ids (or unique prefixes), comma-separated.")] = None,
    model: Annotated[str | None, typer.Option(help="Only runs of this model (path, hub id or its last part).")] = None,
    last: options.Last = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
    cells: options.Cells = "ppl",
    columns: Annotated[
        str, typer.Option(help=f"Table columns: {', '.join(COLUMNS)} (rows are the methods).")
    ] = "sparsity",
    table: Annotated[
        str,
        typer.Option(
            help="What the LaTeX/Markdown table shows: ppl, zeroshot (accuracy per task, "
            "Avg. last) or zeroshot-mean (mean accuracy by sparsity)."
        ),
    ] = "ppl",
    store: options.StoreOption = None,
) -> None:
    """Export runs: CSV (every field, one row per run), or a LaTeX/Markdown table in the paper's layout."""
    check_format(format)
    if table not in MEASURES:
        raise UserError(f"Unknown --table '{table}'; choose one of: {', '.join(MEASURES)}.")
    records = select_runs(Store(store), runs, model, last)
    write_output(export(records, format, cells=cells, columns=columns, measure=table), output)
