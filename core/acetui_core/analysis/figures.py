"""Figures of a comparison with their intervals: quality against cost (``pareto``: prune seconds or
calibration tokens, so methods are read at equal compute), against calibration length (``seqlen``,
the paper's appendix study) or against the parameters a run removed (``experts``: whole experts removed
beside sparsity inside them, docs/moe.md); one series per method or expert score. Written as pgfplots ``.tex`` (a ``tikzpicture``
with error bars, needs only ``\\usepackage{pgfplots}``) or, with matplotlib installed (``pip install
'acetui[figures]'``), as PNG, PDF or SVG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from acetui_core.analysis.comparison import Comparison, comparison, measured
from acetui_core.analysis.export import latex_escape
from acetui_core.analysis.verdicts import judge
from acetui_core.basics.choices import SparsityScope
from acetui_core.basics.errors import UserError, check_choice
from acetui_core.basics.outputs import atomic_file, write_text_atomic
from acetui_core.storage.store_rows import RunEvidence, RunRecord

FIGURES = ("pareto", "seqlen", "experts", "layers")
PARAMETERS_REMOVED = "parameters removed (millions, counted on the pruned weights)"
X_AXES = {"seconds": "prune time (s)", "tokens": "calibration tokens (samples x length)"}
Y_LABELS = {"ppl": "WikiText-2 perplexity", "zeroshot-mean": "mean zero-shot accuracy (%)"}
IMAGE_FORMATS = (".png", ".pdf", ".svg")
MOST_TICKS = 6  # x tick labels an image's axis carries: a few plain numbers, never run together


def coordinate(value: float) -> str:
    """A number of a pgfplots figure: ten significant digits, so a point is drawn at the table's figure
    (``50961.01``, not ``5.096e+04``) and its bars end on the seeds' or the interval's values, in digits a
    reader can still check by eye."""
    return f"{value:.10g}"


@dataclass
class Series:
    name: str
    # x, y, low, high; a point without an interval has low = high = y, and is drawn without a bar (a bar of
    # no width would draw the value as exact)
    points: list[tuple[float, float, float, float]] = field(default_factory=list)


def has_bar(low: float, high: float) -> bool:
    """Whether a point's bar spans anything: else the point has no interval (``Series``)."""
    return low < high


def series(table: Comparison, figure: str, x_axis: str = "seconds") -> list[Series]:
    """One series per row of a ``columns="seqlen"`` comparison with verdicts: each cell a point at its
    cost (``pareto``) or its calibration length (``seqlen``), with its interval (the value itself at both
    ends when the cell has none: one seed on one window, drawn without a bar)."""
    out = []
    groups = _group_words(table.models)
    for row, group in ((row, group) for group in table.models for row in table.rows):
        line = Series(f"{row} ({groups[group]})" if groups[group] else row)
        for column in (column for column in table.columns if column[0] == group):
            cell, verdict = table.cells.get((row, column)), table.verdicts.get((row, column))
            results = [run.results for run in cell.runs if run.results] if cell else []
            if cell is None or not results or not math.isfinite(cell.value):
                continue
            if figure == "experts":
                removed = [r.parameters_removed for r in results if r.parameters_removed is not None]
                if not removed:  # recorded before acetui counted them
                    continue
                x = sum(removed) / len(removed) / 1e6
            elif figure == "seqlen":
                x = sum(r.calibration.seqlen if r.calibration else 0 for r in results) / len(results)
            elif x_axis == "tokens":
                x = sum(r.calibration.nsamples * r.calibration.seqlen if r.calibration else 0 for r in results)
                x /= len(results)
            else:
                x = sum(r.prune_seconds or 0.0 for r in results) / len(results)
            low, high = verdict.ci if verdict and verdict.ci else (cell.value, cell.value)
            line.points.append((x, cell.value, low, high))
        repeated = any(cell.repeats for (name, where), cell in table.cells.items() if name == row and where[0] == group)
        if line.points:  # a seed run again counts once in each point; the legend says so
            name = f"{line.name} (repeats of a seed counted once)" if repeated else line.name
            out.append(Series(name, sorted(line.points)))
    return out


def _group_words(groups: list[str]) -> dict[str, str]:
    """What tells a table's column groups apart (``model, eval 16x64, 50%``), for a series' name: the parts
    not common to all of them; nothing for one group. A row's runs in two groups (two sparsities, two
    models) are two series, never one line through both."""
    parts = {group: group.split(", ") for group in groups}
    common = (
        set.intersection(*(set(words) for words in parts.values())) if len(groups) > 1 else set(groups[0].split(", "))
    )
    return {group: ", ".join(word for word in words if word not in common) for group, words in parts.items()}


def figure_series(
    records: list[RunRecord],
    kept: dict[str, RunEvidence],
    kind: str,
    x_axis: str = "seconds",
    measure: str = "ppl",
    level: float = 0.95,
) -> tuple[list[Series], str, str]:
    """Figure ``kind`` (``pareto``, ``seqlen`` or ``experts``) of the runs, as ``acetui figure`` and the app
    draw it: the comparison with calibration lengths (``experts``: the parameters taken) as columns, judged
    on the runs' kept units, one series per row; with its x and y axis labels."""
    check_choice(kind, ("pareto", "seqlen", "experts"), "figure")
    check_choice(x_axis, X_AXES, "--x")
    check_choice(measure, Y_LABELS, "--table")
    if not any(measured(record, "ppl" if measure == "ppl" else "zeroshot") for record in records):
        # said here, not by the table: a figure has no "--format csv" to fall back on
        raise UserError(f"None of the {len(records)} run(s) has finished with {Y_LABELS[measure]}: nothing to draw.")
    if kind == "experts" and not any(_of_experts(r) for r in records):
        raise UserError(  # a dense model's runs drew every point at one x, as if experts had been taken alike
            f"None of the {len(records)} run(s) is of a mixture-of-experts model, so no expert parameters were "
            "taken to draw against; figure pareto draws a dense model's runs."
        )
    columns = "sparsity" if kind == "experts" else "seqlen"
    grid = judge(comparison(records, columns=columns, measure=measure), kept, level)
    xlabel = {"seqlen": "calibration length (tokens)", "experts": PARAMETERS_REMOVED}.get(kind, X_AXES[x_axis])
    lines = series(grid, kind, x_axis)
    if kind == "experts" and not lines:  # finished and measured, but from before a run counted what it removed
        raise UserError(
            "None of the selected runs recorded the parameters it removed (a run finished before acetui "
            "counted them did not), so there is nothing to draw against them; run them again."
        )
    return lines, xlabel, Y_LABELS[measure]


def _of_experts(record: RunRecord) -> bool:
    """Whether a run is of a mixture-of-experts model: it took experts or masked inside them (a dense model's
    checks refuse both), or it recorded its experts' calibration."""
    config, results = record.config, record.results
    inside = config.sparsity_scope == SparsityScope.EXPERTS
    return bool(config.expert_sparsity) or inside or (results is not None and results.experts is not None)


def layer_series(records: list[RunRecord]) -> list[Series]:
    """Per run (with its layers loaded), each decoder layer's achieved sparsity, and with ``--fidelity`` its
    output's ``1 - cosine`` to the dense layer's as a second series; no interval (one measurement each)."""
    out = []
    for run in records:
        name = f"{run.label} {run.config.target} {run.id[:4]}"
        sparsity = [(layer.index, layer.sparsity) for layer in run.layers if layer.sparsity is not None]
        if sparsity:
            out.append(Series(f"{name} sparsity", [(x, y, y, y) for x, y in sparsity]))
        drift = [(layer.index, 1 - layer.fidelity.cosine) for layer in run.layers if layer.fidelity is not None]
        if drift:
            out.append(Series(f"{name} 1-cos", [(x, y, y, y) for x, y in drift]))
    return out


def off_log_axis(lines: list[Series]) -> tuple[list[Series], list[str]]:
    """The series with their points that a log x axis can place, and the names of those that lost points
    at x = 0 (calibration tokens or length of a method that reads no calibration data, a run that recorded
    no prune time): pgfplots and matplotlib would drop them without a word, or draw them at a meaningless 0."""
    kept, lost = [], []
    for line in lines:
        placed = [point for point in line.points if point[0] > 0]
        if len(placed) < len(line.points):
            lost.append(line.name)
        if placed:
            kept.append(Series(line.name, placed))
    return kept, lost


def to_pgfplots(
    lines: list[Series], xlabel: str, ylabel: str, log_x: bool = True, ticks: list[str] | None = None
) -> str:
    """A ``tikzpicture`` with one ``\\addplot`` (asymmetric error bars; a point without an interval has none,
    which pgfplots then leaves without a bar) and legend entry per series;
    ``ticks`` names the x positions 1, 2, ... (categories such as calibration sources). On a log axis,
    points at x = 0 are left out, and a comment names their series."""
    lost: list[str] = []
    if log_x:
        lines, lost = off_log_axis(lines)
    named = (
        f", xtick={{{','.join(str(i) for i in range(1, len(ticks) + 1))}}}, "
        f"xticklabels={{{','.join('{' + latex_escape(t) + '}' for t in ticks)}}}"
        if ticks
        else ""
    )
    out = [
        "% acetui figure: needs \\usepackage{pgfplots} in the preamble.",
        *([f"% Not on the log x axis (at x = 0): {', '.join(lost)}."] if lost else []),
        "\\begin{tikzpicture}",
        f"\\begin{{axis}}[xlabel={{{latex_escape(xlabel)}}}, ylabel={{{latex_escape(ylabel)}}}, "
        f"xmode={'log' if log_x else 'normal'}{named}, legend pos=outer north east]",
    ]
    for line in lines:
        out.append("\\addplot+[error bars/.cd, y dir=both, y explicit] coordinates {")
        out += [
            f"  ({coordinate(x)}, {coordinate(y)})"
            + (f" += (0, {coordinate(high - y)}) -= (0, {coordinate(y - low)})" if has_bar(low, high) else "")
            for x, y, low, high in line.points
        ]
        out += ["};", f"\\addlegendentry{{{latex_escape(line.name)}}}"]
    out += ["\\end{axis}", "\\end{tikzpicture}"]
    return "\n".join(out) + "\n"


def log_ticks(low: float, high: float) -> list[tuple[float, str]]:
    """The x ticks of a log axis over the data's ``low`` to ``high`` (both positive), as plain numbers:
    the densest of 1, 1-2-5 and 1-9 times the powers of ten that puts between two and ``MOST_TICKS`` on the
    data; where none does, round numbers evenly spaced (a span within a decade, such as prune seconds of
    96 to 110). matplotlib's own log axis labels every minor tick of a narrow span, and they overlap."""
    if low >= high:
        return [(low, f"{low:g}")]
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    candidates = [
        [x for e in decades for m in multipliers if low <= (x := float(f"{m}e{e}")) <= high]
        for multipliers in ((1,), (1, 2, 5), range(1, 10))
    ]
    fitting = [ticks for ticks in candidates if 2 <= len(ticks) <= MOST_TICKS]
    if fitting:
        chosen = max(fitting, key=len)
    elif len(candidates[0]) > MOST_TICKS:  # many decades: every few powers of ten
        chosen = candidates[0][:: math.ceil(len(candidates[0]) / MOST_TICKS)]
    else:
        chosen = _even_ticks(low, high)
    return [(x, f"{x:g}") for x in chosen]


def _even_ticks(low: float, high: float) -> list[float]:
    """Multiples of the finest 1, 2 or 5 times a power of ten that puts at most ``MOST_TICKS`` on the data."""
    power = math.floor(math.log10(high - low)) - 1
    for step in (float(f"{m}e{e}") for e in range(power, power + 3) for m in (1, 2, 5)):
        ticks = [round(k * step, 12) for k in range(math.ceil(low / step), math.floor(high / step) + 1)]
        if len(ticks) <= MOST_TICKS:
            return ticks
    return [low, high]


def check_figure_file(output: Path) -> None:
    if output.suffix != ".tex" and output.suffix not in IMAGE_FORMATS:
        raise UserError(f"Cannot write a figure as '{output.suffix or output.name}'; use .tex, .png, .pdf or .svg.")


def write_figure(
    lines: list[Series],
    xlabel: str,
    ylabel: str,
    output: Path,
    log_x: bool = True,
    replace: bool = False,
    ticks: list[str] | None = None,
) -> list[str]:
    """``output`` by its suffix: ``.tex`` (pgfplots) or an image through matplotlib, written beside it and
    renamed (``acetui_core.basics.outputs``; ``replace``: over an existing file, which ``--overwrite`` allowed).
    Returns the names of the series that lost points at x = 0 on a log axis (``off_log_axis``)."""
    placed, lost = off_log_axis(lines) if log_x else (lines, [])
    if not placed:
        raise UserError(
            "The selected runs have nothing to draw (no finished run with that measure"
            + (", or none off x = 0 on the log axis)." if lines else ").")
        )
    check_figure_file(output)
    if output.suffix == ".tex":
        write_text_atomic(output, to_pgfplots(lines, xlabel, ylabel, log_x, ticks), replace=replace)
        return lost
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
        from matplotlib.ticker import NullFormatter
    except ImportError:
        raise UserError(
            f"{output.suffix[1:].upper()} figures need matplotlib: pip install 'acetui[figures]' "
            "(a .tex figure needs nothing)."
        ) from None
    figure, axes = plt.subplots(figsize=(6, 4))
    for line in placed:
        xs, ys, lows, highs = zip(*line.points, strict=True)
        # no interval: no bar (matplotlib draws none at NaN)
        below = [y - low if has_bar(low, high) else math.nan for y, low, high in zip(ys, lows, highs, strict=True)]
        above = [high - y if has_bar(low, high) else math.nan for y, low, high in zip(ys, lows, highs, strict=True)]
        axes.errorbar(xs, ys, yerr=[below, above], marker="o", capsize=3, label=line.name)
    axes.set_xscale("log" if log_x else "linear")
    if ticks:
        axes.set_xticks(range(1, len(ticks) + 1), ticks)
    elif log_x and (positive := [x for line in lines for x, *_ in line.points if x > 0]):
        chosen = log_ticks(min(positive), max(positive))
        axes.set_xticks([x for x, _ in chosen], [label for _, label in chosen])
        axes.xaxis.set_minor_formatter(NullFormatter())
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.legend()
    figure.tight_layout()
    try:
        with atomic_file(output, binary=True, replace=replace) as file:
            figure.savefig(file, format=output.suffix[1:])
    finally:
        plt.close(figure)
    return lost
