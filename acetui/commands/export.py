"""``acetui export``: runs as CSV (every field, one row per run), or a LaTeX/Markdown table in the paper's
layout; ``acetui verdict``: whether each row of such a table differs from its column's best."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from acetui import options
from acetui.commands.runs import no_run_matches
from acetui_core.analysis import verdicts
from acetui_core.analysis.comparison import CI_STYLES, COLUMNS, MEASURES, comparison, left_out_note, measured, placeable
from acetui_core.analysis.export import FORMATS, export, format_for
from acetui_core.basics import parse
from acetui_core.basics.errors import UserError
from acetui_core.basics.jsontext import json_text
from acetui_core.basics.outputs import check_output_file, write_text_atomic
from acetui_core.basics.paths import user_path
from acetui_core.storage.store import Store
from acetui_core.storage.store_rows import RunRecord

Runs = Annotated[str | None, typer.Option(help="Run ids (or unique prefixes), comma-separated.")]
ModelFilter = Annotated[str | None, typer.Option(help="Only runs of this model (path, hub id or its last part).")]
MethodFilter = Annotated[str | None, typer.Option(help="Only runs of these methods, comma-separated.")]
Columns = Annotated[str, typer.Option(help=f"Table columns: {', '.join(COLUMNS)} (rows are the methods).")]
Table = Annotated[
    str,
    typer.Option(
        help="What the table shows: ppl, zeroshot (accuracy per task, Avg. last) or zeroshot-mean (mean "
        "accuracy by sparsity)."
    ),
]
Level = Annotated[float, typer.Option(help="Confidence level of intervals and tests.")]


def check_level(level: float) -> None:
    if not 0 < level < 1:
        raise UserError(f"--level {level:g} is not a confidence level; give one between 0 and 1, such as 0.95.")


def select_runs(
    store: Store,
    runs: str | None,
    model: str | None,
    last: int | None,
    method: str | None = None,
    measure: str | None = None,
) -> list[RunRecord]:
    """The runs an export names (all of them by default), less those whose settings cannot be read (said
    on stderr: ``placeable``); an empty selection is the user's error.
    ``--last N`` counts only runs with results (with the table's ``measure`` when one is named) and says on
    stderr which newer runs without them it passed over."""
    ids = parse.some(runs, "--runs") if runs is not None else None
    records, left = placeable(store.list_runs(ids=ids, model=model))
    if left:
        shown = left[0].id if len(left) == 1 else "ID"
        print(left_out_note(left, f"acetui runs show {shown} says what is damaged"), file=sys.stderr)
    if method is not None:
        methods = set(parse.some(method, "--method"))
        records = [r for r in records if r.config.method in methods]
    if last is not None:
        chosen = [r for r in records if measured(r, measure)][-last:]
        passed = [r for r in records if chosen and r.created >= chosen[0].created and not measured(r, measure)]
        if passed:
            what = "results" if measure is None else f"a {measure} result"
            listed = ", ".join(f"{r.id} ({r.status})" for r in passed[:5]) + (", ..." if len(passed) > 5 else "")
            print(f"--last {last} passed over {len(passed)} run(s) without {what}: {listed}.", file=sys.stderr)
        records = chosen
    if not records:
        raise no_run_matches(store.path, (("--runs", runs), ("--model", model), ("--method", method), ("--last", last)))
    return store.list_runs(ids=[r.id for r in records], layers=True)  # layers: per-layer CSV columns


def runs_and_evidence(
    store, runs, model, last, method, table: str, level: float, measure_last: bool = True
) -> tuple[list[RunRecord], dict]:
    """The selected runs and what they kept for tests (``Store.evidence``), once the table and level are
    valid; ``measure_last``: ``--last N`` counts runs with the table's measure (a CSV counts any result)."""
    if table not in MEASURES:
        raise UserError(f"Unknown --table '{table}'; choose one of: {', '.join(MEASURES)}.")
    check_level(level)
    opened = Store(store, create=False)
    records = select_runs(opened, runs, model, last, method, table if measure_last else None)
    return records, opened.evidence([r.id for r in records])


def guarded_file(output: str | Path, overwrite: bool, store) -> Path:
    """The file ``-o`` writes, checked before any work by the guard of every file acetui writes
    (``acetui_core.basics.outputs``) against the store's protected places."""
    if not str(output).strip():  # an unset variable: never the working folder
        raise UserError("-o is empty; give a file name, or - for the standard output.")
    protected = Store(store, create=False).protected_places()
    return check_output_file(user_path(output), "-o", overwrite=overwrite, protected=protected)


def output_file(output: str | None, overwrite: bool, store) -> Path | None:
    """Where an export goes: None for stdout (no ``-o``, or ``-o -``), else ``guarded_file``."""
    return None if output is None or str(output) == "-" else guarded_file(output, overwrite, store)


def write_output(text: str, output: Path | None, overwrite: bool = False) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    write_text_atomic(output, text, replace=overwrite)  # an OS refusal becomes one sentence in acetui.cli


Overwrite = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="Let -o replace an existing file (never the run store, its files, the data folder or a run's model).",
    ),
]


def export_runs(
    format: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-f",
            help=f"One of: {', '.join(FORMATS)} (default: the one -o's extension names, .csv, .tex or .md; else csv).",
            show_default=False,
        ),
    ] = None,
    runs: Runs = None,
    model: ModelFilter = None,
    method: MethodFilter = None,
    last: options.Last = None,
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Write here instead of stdout (- is stdout).")
    ] = None,
    overwrite: Overwrite = False,
    cells: options.Cells = "ppl",
    columns: Columns = "sparsity",
    table: Table = "ppl",
    ci: Annotated[
        str,
        typer.Option(
            help="Intervals in LaTeX/Markdown cells: none, pm (the distances to its ends, 73.5 +1.6/−1.4) or "
            "interval ([72.1, 75.1])."
        ),
    ] = "none",
    level: Level = 0.95,
    store: options.StoreOption = None,
) -> None:
    """Export runs: CSV (every field, one row per run, with its cell's value, interval and verdict), or a
    LaTeX/Markdown table in the paper's layout, every row tied with its column's best in bold."""
    format = format_for(format, output)
    if ci not in CI_STYLES:
        raise UserError(f"Unknown --ci '{ci}'; choose one of: {', '.join(CI_STYLES)}.")
    target = output_file(output, overwrite, store)
    records, kept = runs_and_evidence(store, runs, model, last, method, table, level, format != "csv")
    text = export(records, format, cells=cells, columns=columns, measure=table, evidence=kept, level=level, ci=ci)
    write_output(text, target, overwrite)


def verdict(
    runs: Runs = None,
    model: ModelFilter = None,
    method: MethodFilter = None,
    last: options.Last = None,
    columns: Columns = "sparsity",
    table: Table = "ppl",
    level: Level = 0.95,
    store: options.StoreOption = None,
    as_json: options.JsonOption = False,
) -> None:
    """For each column of the comparison table, each row's value, seeds, interval, ratio to the best and
    verdict: best, tied (not distinguishable from the best at --level) or worse."""
    records, kept = runs_and_evidence(store, runs, model, last, method, table, level)
    data = verdicts.report(verdicts.judge(comparison(records, columns=columns, measure=table), kept, level))
    print(json_text(data) if as_json else verdicts.text(data), end="\n" if as_json else "")
