"""A study's report: one folder a paper can include, written from the store alone.

- ``table-<measure>.{tex,md,csv}``: the comparison of the study's finished runs per evaluation (WikiText-2
  perplexity, mean zero-shot accuracy), with n, intervals and verdicts as ``acetui verdict`` computes them
  (``verdicts-<measure>.txt`` holds its report);
- ``figures/``: pgfplots ``.tex`` (and ``.png``/``.pdf`` where matplotlib is installed, the ``figures``
  extra): the matched-compute Pareto against prune seconds and against calibration tokens, perplexity
  against calibration length and against calibration source, where the runs have perplexity; the Pareto
  and the length figure of mean zero-shot accuracy (``accuracy_*``) where they have that; none for a
  study of no evaluation;
- ``environment.md``: the versions of every package that can move a number (those each run records),
  acetui's version and commit, the machine and device of this report and of the runs, and the study file
  as read (``study.toml`` beside it, byte for byte);
- ``summary.md``: at its top, whether every cell of the study has a finished run (a report of an unfinished
  study names the cells it lacks, and says so on stderr too: its tables count only the finished runs); then
  one sentence per comparison with its column's best, and a line when the methods of one
  table were calibrated with different token budgets; then each method's variants against the method's
  own best (the permutation, DSnoT, a calibration length: does it help this method?).

Every file goes inside the folder; nothing outside it is written or replaced. Every file is checked
before the first is written (a refused report makes nothing), and the manifest is written first (a report
cut short leaves a folder ``--overwrite`` can redo).
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from acetui_core.analysis import verdicts
from acetui_core.analysis.comparison import Cell, Comparison, comparison, measured
from acetui_core.analysis.export import to_csv, to_latex, to_markdown
from acetui_core.analysis.figures import IMAGE_FORMATS, Series, figure_series, off_log_axis, write_figure
from acetui_core.analysis.rowlabels import model_columns, row_labels
from acetui_core.basics.errors import UserError
from acetui_core.basics.outputs import check_output_file, refuse_protected, write_text_atomic
from acetui_core.execution.runner import NUMERIC_PACKAGES, package_version
from acetui_core.modeling.data import source_names
from acetui_core.storage.store import Store
from acetui_core.storage.store_rows import RunRecord
from acetui_core.studies.study import DONE, Study, cell_states, cell_text, newest_finished

MEASURES = {"ppl": "WikiText-2 perplexity", "zeroshot-mean": "mean zero-shot accuracy"}
UNFINISHED_NAMED = 5  # the unfinished cells a report names; `acetui study status` lists them all
# How summary.md's sentences read, said once above them
READING = (
    "Each row against its column's best: the difference with its interval (unadjusted), the p of the paired "
    "test after Holm's adjustment over the column's comparisons (what the verdict reads), and the seeds (n) of "
    "the row and of the best."
)

# summary.md of a study whose runs have no evaluation (evals = "none"), above the list of its runs
NOTHING_MEASURED = (
    'No run of the study was evaluated (`evals = "none"`), so there is nothing to compare: no tables, '
    "verdicts or figures. Its finished runs:"
)


@dataclass(frozen=True)
class Report:
    files: list[Path]  # every file written, in the report's folder
    unfinished: str | None  # the sentence saying which cells have no finished run; None when every one has


def unfinished(study: Study, states: list) -> str | None:
    """The sentence saying how many of the study's cells (``cell_states``) have no finished run, naming the
    first few: a report of them alone is not the study's, its tables' n fewer than the file declares."""
    lacking = [(cell, state) for cell, state, _ in states if state != DONE]
    if not lacking:
        return None
    named = "; ".join(f"{cell_text(cell, tuple(study.axes))} ({state})" for cell, state in lacking[:UNFINISHED_NAMED])
    more = f"; and {len(lacking) - UNFINISHED_NAMED} more" if len(lacking) > UNFINISHED_NAMED else ""
    return (
        f"{len(lacking)} of {len(states)} cells have no finished run, so this report is of the other "
        f"{len(states) - len(lacking)} alone (its tables count only their runs): {named}{more} "
        f"(acetui study status {study.path} lists every cell)."
    )


def _version(package: str) -> str:
    return package_version(package) or "not installed"


def _commit() -> str:
    """acetui's git commit, where it runs from a checkout (else what pip installed says nothing of it)."""
    try:
        found = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return found.stdout.strip() if found.returncode == 0 else "unknown (not a git checkout)"


def _device() -> str:
    import torch

    if torch.cuda.is_available():
        return ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    return f"CPU only ({os.cpu_count()} cores visible)"


def environment(study: Study, records: list[RunRecord]) -> str:
    """environment.md: what made the numbers, as far as this machine and the store can tell."""
    lines = [
        f"# Environment of the study {study.name}",
        "",
        "## This report",
        "",
        f"- acetui {_version('acetui')}, commit {_commit()}",
        f"- Python {platform.python_version()} on {platform.platform()} ({platform.machine()})",
        f"- device: {_device()}",
        "",
        "| package | version |",
        "|---|---|",
        *(f"| {package} | {_version(package)} |" for package in NUMERIC_PACKAGES),
        "",
        "## The runs (as each recorded where it executed)",
        "",
    ]
    seen: dict[str, list[str]] = {}
    for record in records:
        env = {k: v for k, v in record.env.items() if k not in ("log", "folder")}  # each run's own places
        env["device"] = record.results.device if record.results else "?"
        seen.setdefault(", ".join(f"{k} {v}" for k, v in sorted(env.items())), []).append(record.id)
    lines += [f"- {len(ids)} run(s): {text}" for text, ids in seen.items()] or ["- no finished run"]
    lines += ["", f"## The study file ({study.path.name}, also beside this file as study.toml)", "", "```toml"]
    as_read = study.text.replace("\r\n", "\n").rstrip("\n")  # study.toml keeps its line ends; this file has its own
    return "\n".join([*lines, as_read, "```", ""])


def _worse(row: dict, best: dict, measure: str, column: str, level: float) -> str:
    """One sentence comparing a row with its column's best: the difference with its interval (at ``level``,
    unadjusted), the paired test's p adjusted by Holm's method over the column (what the verdict is), and
    each side's seeds. Where the interval excludes 0 but the adjusted test does not reject, it says so,
    so "tied" beside an interval off 0 does not read as a contradiction."""
    what = "perplexity" if measure == "ppl" else "points of mean accuracy"
    where = f"at {column}, " if column else ""
    apart = False
    if row["difference"]:
        delta, low, high = row["difference"][:3]
        shown = f"{delta:+.2f} {what} [{low:+.2f}, {high:+.2f}]"
        apart = low > 0 or high < 0
    else:
        shown = f"{row['value']:.2f} against {best['value']:.2f} ({row['note'] or 'no interval'})"
    p_shown = verdicts.p_text(row["p"], level)
    p = "p –" if row["p"] is None else f"Holm-adjusted p {'< 0.001' if p_shown == '<0.001' else f'= {p_shown}'}"
    verdict = {
        "worse": "is worse than",
        "tied": "is tied with",
        "unknown": "was not compared (one seed, one window or no record to pair: seed noise unknown) with",
    }.get(row["verdict"], f"is {row['verdict']} beside")
    seeds = f"n = {row['n']} and {best['n']} seed{'s' if best['n'] != 1 else ''}"
    caveat = (
        f"; its {level * 100:g}% interval excludes 0 unadjusted, but the difference is not significant after "
        "Holm's adjustment over the column's comparisons"
        if apart and row["verdict"] == "tied"
        else ""
    )
    return f"- {where}{row['row']} {verdict} {best['row']}: {shown}, {p}, {seeds}{caveat}."


def _against_best(table: Comparison, measure: str) -> list[str]:
    """A sentence for each row of ``table`` that is not its column's best."""
    out = []
    for column in verdicts.report(table)["columns"]:
        best = next((row for row in column["rows"] if row["verdict"] == "best"), None)
        if best is None:
            continue
        for row in column["rows"]:
            if row is not best:
                out.append(_worse(row, best, measure, column["column"], table.level))
    return out


def summary(
    tables: dict[str, Comparison],
    by_method: dict[str, list[Comparison]],
    cells: int,
    lacking: str | None,
    runs: list[str],
) -> str:
    """``by_method``: per measure, one table per method of several variants (the same runs, judged among
    themselves), so that "does DSnoT help Wanda?" has its own sentence, not only "is it the best?".
    ``cells``: how many the study has; ``lacking``: the ``unfinished`` sentence, first, where there is one;
    ``runs``: each finished run in words, listed where no table holds them (no run was evaluated)."""
    complete = f"All {cells} cells of the study have a finished run."
    out = ["# Summary", "", f"**Unfinished study: {lacking}**" if lacking else complete, ""]
    if not tables:  # nothing measured: no comparison for a sentence to introduce, the runs are all there is
        return "\n".join([*out, NOTHING_MEASURED, "", *runs, ""])
    out += [READING, ""]
    for measure, table in tables.items():
        out += [f"## {MEASURES[measure]}", "", *_against_best(table, measure)]
        budgets = {  # of the runs this table counts: a run without this measure is not in it
            r.results.calibration.nsamples * r.results.calibration.seqlen
            for cell in table.cells.values()
            for r in cell.runs
            if r.results is not None and r.results.calibration is not None
        }
        if len(budgets) > 1:
            shown = ", ".join(str(b) for b in sorted(budgets))
            out.append(f"- Note: the methods of this table were calibrated with different token budgets ({shown}).")
        within = [sentence for method in by_method.get(measure, []) for sentence in _against_best(method, measure)]
        if within:
            out += ["", "### Each method's variants against its best variant (as `acetui verdict --method` says)", ""]
            out += within
        out.append("")
    return "\n".join(out)


def _by_source(records: list[RunRecord]) -> tuple[list[Series], list[str]]:
    """Perplexity against calibration source: one series per row of the study's tables (every setting but
    the source alike: ``Wanda-16 (4 samples)`` apart from ``Wanda-16 (8 samples)``) and sparsity; a point per
    source at the geometric mean over seeds (a repeated seed counted once, as in the tables), the bars at the lowest
    and highest seed."""
    calibrated = [r for r in records if r.ppl is not None and r.results is not None and r.results.calibration]
    sources = list(dict.fromkeys(r.config.calib for r in calibrated))
    labels = row_labels(calibrated, {r.id: r.label for r in calibrated}, "ppl", "sparsity", frozenset({"calibration"}))
    groups: dict[str, dict[str, Cell]] = {}
    models = model_columns(calibrated)
    several_models = len(set(models.values())) > 1
    for record in calibrated:
        name = f"{labels[record.id]} at {record.config.target}"  # experts removed or not: apart
        if several_models:  # one model's seed is not another's: a series each
            name += f" on {models[record.id]}"
        cell = groups.setdefault(name, {}).setdefault(record.config.calib, Cell([], [], False, geometric=True))
        cell.add(record, record.ppl, False)  # type: ignore[arg-type]  # kept above: every one has a perplexity
    lines = [
        Series(
            name, [(sources.index(s) + 1, cell.value, min(cell.values), max(cell.values)) for s, cell in cells.items()]
        )
        for name, cells in groups.items()
    ]
    return lines, [source_names(source, " + ") for source in sources]


@dataclass(frozen=True)
class _Figure:
    name: str  # its file's name in figures/, without the suffix
    series: list[Series]
    xlabel: str
    ylabel: str
    log_x: bool
    ticks: list[str] | None  # the x axis's category names (calibration sources), else None


def _figures(records: list[RunRecord], kept: dict) -> list[_Figure]:
    """The figures the runs have something for, drawn but not written (a figure that cannot be drawn is
    said before the report writes anything): perplexity's where runs have one, mean zero-shot accuracy's
    (``accuracy_`` files) where runs have one; none for runs that have neither (no evaluation)."""
    wanted: list[tuple[str, Callable[[], tuple[list[Series], str, str]], bool, list[str] | None]] = []
    for measure, evaluation, prefix in (("ppl", "ppl", ""), ("zeroshot-mean", "zeroshot", "accuracy_")):
        if any(measured(record, evaluation) for record in records):
            wanted += [
                (f"{prefix}pareto_{x}", partial(figure_series, records, kept, "pareto", x, measure), True, None)
                for x in ("seconds", "tokens")
            ]
            length = "ppl_vs_seqlen" if measure == "ppl" else "accuracy_vs_seqlen"
            wanted.append((length, partial(figure_series, records, kept, "seqlen", measure=measure), True, None))
    if any(measured(record, "ppl") for record in records):
        lines, sources = _by_source(records)
        by_seeds = f"{MEASURES['ppl']} (bars: lowest and highest seed)"  # the others' bars are 95% intervals
        wanted.append(("ppl_vs_source", lambda: (lines, "calibration source", by_seeds), False, sources))
    drawn = []
    for name, make, log_x, ticks in wanted:
        series, xlabel, ylabel = make()
        if series and (not log_x or off_log_axis(series)[0]):  # else nothing to draw (magnitude alone on tokens)
            drawn.append(_Figure(name, series, xlabel, ylabel, log_x, ticks))
    return drawn


def _image_formats() -> tuple[str, ...]:
    try:
        import matplotlib  # noqa: F401  # the figures extra
    except ImportError:
        return ()
    return tuple(f for f in IMAGE_FORMATS if f != ".svg")


def write_report(study: Study, cells: list, store: Store, folder: Path, overwrite: bool = False) -> Report:
    """Write the report of ``study`` into ``folder`` (made if missing); return the files written and whether
    cells are missing from it. Every file
    passes the guard of ``acetui_core.basics.outputs`` (as ``export -o``): nothing into the store's or the runs'
    places, an existing file replaced only with ``overwrite``."""
    if folder.exists() and not folder.is_dir():
        raise UserError(f"-o {folder} is a file; give a folder for the report.")
    protected = store.protected_places()
    refuse_protected(folder, f"-o {folder}", protected, "give the report a folder of its own.")
    protected.append((study.path.resolve(), "the study file"))  # the file itself: its folder may hold the report
    earlier = _earlier_report(folder)
    found = next((name for name in _OWN_NAMES if (folder / name).exists()), None)
    if overwrite and found and not (folder / MANIFEST).is_file():
        raise UserError(
            f"-o {folder} holds {found} but no earlier report ({MANIFEST}, which a report lists its files in): "
            "--overwrite replaces a report's own files only; give the report a folder of its own."
        )

    def guard(path: Path) -> Path:
        if not path.parent.exists():  # a folder this report will make holds nothing to replace: its place is checked
            refuse_protected(path, f"-o {path}", protected, "give the report a folder of its own.")
            return path
        return check_output_file(path, "-o", overwrite=overwrite, protected=protected)  # "-o rep/table-ppl.tex"

    states = cell_states(cells, store)
    records = [newest_finished(runs) for _, state, runs in states if state == DONE]
    if not records:
        raise UserError(f"No cell of {study.name} has a finished run yet; run: acetui study run {study.path}.")
    kept = store.evidence([r.id for r in records])
    missing = sum(state != DONE for _, state, _ in states)
    # a table pasted alone must not pass for the study's: each says so, summary.md names the cells
    mark = f"Unfinished study: {missing} of {len(states)} cells have no finished run; summary.md names them."
    tex, md, txt = (f"% {mark}\n", f"**{mark}**\n\n", f"{mark}\n\n") if missing else ("", "", "")
    written: dict[Path, str] = {}
    tables: dict[str, Comparison] = {}
    by_method: dict[str, list[Comparison]] = {}
    methods = sorted({r.config.method for r in records})
    for measure in MEASURES:
        try:
            table = verdicts.judge(comparison(records, columns="sparsity", measure=measure), kept)
        except UserError:  # no run of the study has this evaluation
            continue
        tables[measure] = table
        written[folder / f"table-{measure}.tex"] = tex + to_latex(table)
        written[folder / f"table-{measure}.md"] = md + to_markdown(table)
        written[folder / f"table-{measure}.csv"] = to_csv(records, table)  # read by programs: a column's rows only
        written[folder / f"verdicts-{measure}.txt"] = txt + verdicts.text(verdicts.report(table))
        for method in methods:  # a method whose runs lack this evaluation has no variants to judge on it
            runs = [r for r in records if r.config.method == method and measured(r, measure)]
            if not runs:
                continue
            variants = verdicts.judge(comparison(runs, columns="sparsity", measure=measure), kept)
            if len(variants.rows) > 1:
                by_method.setdefault(measure, []).append(variants)
    lacking = unfinished(study, states)
    in_words = [f"- {r.id}: {cell_text(r.config, tuple(study.axes))}" for r in records]
    written[folder / "summary.md"] = summary(tables, by_method, len(cells), lacking, in_words)
    written[folder / "environment.md"] = environment(study, records)
    written[folder / "study.toml"] = study.text
    figures = {
        folder / "figures" / f"{figure.name}{suffix}": figure
        for figure in _figures(records, kept)
        for suffix in (".tex", *_image_formats())
    }
    # every file checked before the first is written
    targets = {path: guard(path) for path in [*written, *figures, folder / MANIFEST]}
    (folder / "figures" if figures else folder).mkdir(parents=True, exist_ok=True)  # nothing made for nothing
    made = [*written, *figures]
    # listed first, with the earlier report's files: a report cut short leaves a folder --overwrite can redo
    _list_files(folder, [*made, *earlier], replace=overwrite)
    for path, text in written.items():
        write_text_atomic(path, text, replace=overwrite)
    for path, figure in figures.items():
        write_figure(
            figure.series, figure.xlabel, figure.ylabel, targets[path], figure.log_x, replace=True, ticks=figure.ticks
        )
    kept_now = {path.resolve() for path in made}
    for path in earlier:  # the earlier report's files this one has nothing for: they would pass for its own
        if path.resolve() not in kept_now:
            path.unlink()
    if not figures and folder / "figures" in {path.parent for path in earlier}:  # emptied above: the earlier report's
        with suppress(OSError):  # unless it holds files of someone else's
            (folder / "figures").rmdir()
    _list_files(folder, made, replace=True)
    return Report(made, lacking)


def _list_files(folder: Path, paths: list[Path], replace: bool) -> None:
    """The report's manifest: its files, relative to its folder."""
    listed = "".join(f"{path.resolve().relative_to(folder.resolve())}\n" for path in dict.fromkeys(paths))
    write_text_atomic(folder / MANIFEST, listed, replace=replace)


# The list of the files a report wrote, in its folder: what marks the folder as a report's, and the only
# files a later --overwrite removes where it has nothing for them (a measure no run has, a figure with
# nothing to draw).
MANIFEST = ".acetui-report"
# A report's file names: a folder holding one of them but no manifest is not --overwrite's to replace.
_OWN_NAMES = (
    *(
        f"{kind}-{measure}.{suffix}"
        for measure in MEASURES
        for kind, suffix in (("table", "tex"), ("table", "md"), ("table", "csv"), ("verdicts", "txt"))
    ),
    "summary.md",
    "environment.md",
    "study.toml",
    *(
        f"figures/{name}{suffix}"
        for name in (
            "pareto_seconds",
            "pareto_tokens",
            "ppl_vs_seqlen",
            "ppl_vs_source",
            "accuracy_pareto_seconds",
            "accuracy_pareto_tokens",
            "accuracy_vs_seqlen",
        )
        for suffix in (".tex", *IMAGE_FORMATS)
    ),
)


def _earlier_report(folder: Path) -> list[Path]:
    """The files an earlier report in ``folder`` listed in its manifest and that are still there (only
    names a report writes: a hand-edited manifest removes nothing else)."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return []
    listed = {line.strip() for line in manifest.read_text().splitlines()}
    return [folder / name for name in _OWN_NAMES if name in listed and (folder / name).is_file()]
