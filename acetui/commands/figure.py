"""``acetui figure``: quality against cost or calibration length, with intervals, as pgfplots or an image."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from acetui import options
from acetui.commands.export import Level, MethodFilter, ModelFilter, Overwrite, Runs, guarded_file, runs_and_evidence
from acetui_core.analysis.figures import (
    FIGURES,
    X_AXES,
    Y_LABELS,
    check_figure_file,
    figure_series,
    layer_series,
    write_figure,
)
from acetui_core.basics.errors import check_choice


def figure(
    kind: Annotated[str, typer.Argument(help=f"One of: {', '.join(FIGURES)}.")],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The figure file: .tex (pgfplots), .png, .pdf or .svg.")
    ],
    x: Annotated[str, typer.Option("--x", help=f"pareto's x axis: {' or '.join(X_AXES)}.")] = "seconds",
    table: Annotated[str, typer.Option(help=f"The quality shown: {' or '.join(Y_LABELS)}.")] = "ppl",
    runs: Runs = None,
    model: ModelFilter = None,
    method: MethodFilter = None,
    last: options.Last = None,
    level: Level = 0.95,
    overwrite: Overwrite = False,
    store: options.StoreOption = None,
) -> None:
    """Draw the selected runs, one series per method: quality against prune time or calibration tokens
    (pareto: methods read at equal cost), against calibration length (seqlen) or against the parameters
    removed (experts: whole experts removed beside sparsity inside them), with their intervals; or per run
    its layers' sparsity and output fidelity (layers)."""
    check_choice(kind, FIGURES, "figure")
    check_choice(x, X_AXES, "--x")
    check_choice(table, Y_LABELS, "--table")
    check_figure_file(output)
    target = guarded_file(output, overwrite, store)
    records, kept = runs_and_evidence(store, runs, model, last, method, table, level, kind != "layers")
    if kind == "layers":
        lines = layer_series(records)
        write_figure(lines, "decoder layer", "sparsity, or 1 - cosine of the layer output", target, False, overwrite)
    else:
        lines, xlabel, ylabel = figure_series(records, kept, kind, x, table, level)
        lost = write_figure(lines, xlabel, ylabel, target, log_x=kind != "experts", replace=overwrite)
        if lost:
            print(f"Not on the log x axis (at x = 0): {', '.join(lost)}.", file=sys.stderr)
    print(output)
