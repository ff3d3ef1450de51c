"""The comparison grid shared by LaTeX, Markdown, the terminal and the app: one row per method with
its calibration length (``Wanda-16``, ``CosP+VarP-16``, ``Wanda-FL``: ``RunConfig.label``), one column per
sparsity pattern (grouped by model when there are several), cells = WikiText-2 perplexity or zero-shot
accuracy.

Runs share a cell only when every setting that can change its number is equal
(``acetui_core.analysis.rowlabels.settings``): only seeds may differ, and the cell then shows their mean
``± sd`` and ``(n=...)``, n counting distinct seeds (a seed run again is the same sample: its latest run counts, and the notes name the repeats). Runs that differ in
anything else get rows of their own, labelled with the difference (``Wanda-16 (32 samples)``). Settings
that cannot change a number (``--keep-masks``, ``--fidelity``, where the model is saved) never split
rows. A perplexity measured on part of the test set (``--eval-limit``) carries a dagger and a note.
The layout can instead put calibration lengths (``columns="seqlen"``, the paper's appendix study) or
seeds (``columns="seed"``) in the columns; each sparsity, and each model, is then a column group of its own,
so no run is ranked against another sparsity's. Whether a cell's difference from its column's best is real
is ``acetui_core.analysis.verdicts``' business; the grid only prints its verdicts.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from acetui_core.analysis.rowlabels import model_columns, result_of, row_labels, shared_settings, test_texts
from acetui_core.basics.choices import RunStatus, SparsityScope
from acetui_core.basics.errors import UserError, check_choice
from acetui_core.run.config import RunConfig
from acetui_core.run.records import any_partial, mean_accuracy, task_accuracy
from acetui_core.scores.metrics import paper_name
from acetui_core.scores.sparsity import parse_sparsity
from acetui_core.storage.store_rows import RunRecord

# ppl: WikiText-2 perplexity (lower is better); zeroshot: accuracy per task with Avg. last (the paper's
# appendix); zeroshot-mean: mean accuracy of the seven tasks (the paper's summary table).
MEASURES = ("ppl", "zeroshot", "zeroshot-mean")
CELLS = ("ppl", "ppl-time")
COLUMNS = ("sparsity", "seqlen", "seed")
AVERAGE = "Avg."  # the per-task zero-shot table's column of each run's mean over the tasks
NO_CALIBRATION = "no calibration"  # the column of a by-length table that holds methods without calibration data
# --ci: no interval, "73.5 +1.6/−1.4" (the distances to its ends), "[72.1, 75.1]"
CI_STYLES = ("none", "pm", "interval")


def _mean(values) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def sample(record: RunRecord) -> int | None:
    """What makes a run another sample of its cell: its seed, or None for a method without calibration
    data (every run of it is the same sample)."""
    return record.config.seed if record.results is not None and record.results.calibration is not None else None


@dataclass
class Cell:
    values: list[float]  # perplexities, or accuracies in percent: one per distinct seed
    seconds: list[float]
    partial: bool
    runs: list[RunRecord] = field(default_factory=list)  # the runs behind ``values``, in the same order
    repeats: list[RunRecord] = field(default_factory=list)  # earlier runs of a seed the cell holds: not counted
    repeat_values: dict[str, float] = field(default_factory=dict)  # each repeat's value, by run id
    # Perplexities are averaged as their NLLs are (the geometric mean: exp of the seeds' mean NLL), the
    # centre of the cell's interval and of the test against its column's best (acetui_core.analysis.evidence)
    geometric: bool = False

    def add(self, record: RunRecord, value: float, partial: bool) -> None:
        """Count ``record``'s ``value`` as a sample, unless the cell holds a run of its seed: a repeat of
        a seed is the same sample again, so the latest run of each seed stands and the others are kept
        aside in ``repeats`` (named in every table's notes)."""
        same = [i for i, run in enumerate(self.runs) if sample(run) == sample(record)]
        if same and (self.runs[same[0]].created, self.runs[same[0]].id) > (record.created, record.id):
            self.repeats.append(record)
            self.repeat_values[record.id] = value
            return
        if same:
            self.repeats.append(self.runs[same[0]])
            self.repeat_values[self.runs[same[0]].id] = self.values[same[0]]
            del self.runs[same[0]], self.values[same[0]], self.seconds[same[0]]
        self.runs.append(record)
        self.values.append(value)
        self.seconds.append(record.prune_seconds or 0.0)
        self.partial = self.partial or partial

    def disagreements(self) -> list[tuple[RunRecord, float, RunRecord, float]]:
        """(repeat, its value, the run counted for its seed, that value) where the two would print apart:
        the same seed run again should give the same number, and one that does not is news."""
        counted = {sample(run): (run, value) for run, value in zip(self.runs, self.values, strict=True)}
        found = []
        for repeat in self.repeats:
            run, value = counted[sample(repeat)]
            if f"{self.repeat_values[repeat.id]:.2f}" != f"{value:.2f}":
                found.append((repeat, self.repeat_values[repeat.id], run, value))
        return found

    @property
    def value(self) -> float:
        if self.geometric and len(self.values) > 1 and all(value > 0 for value in self.values):
            return statistics.geometric_mean(self.values)
        return statistics.fmean(self.values)

    @property
    def cost(self) -> dict[str, float | None]:
        """What the cell's runs spent, averaged: prune seconds, calibration tokens (samples x length, 0
        without calibration data) and peak memory up to the last mask (``RunResult.prune_peak_rss_mb``; the
        whole run's in runs recorded before acetui kept it), so a run that also evaluated zero-shot tasks
        costs what its pruning did."""
        results = [run.results for run in self.runs if run.results is not None]
        tokens = [r.calibration.nsamples * r.calibration.seqlen if r.calibration else 0 for r in results]
        rss = [r.peak_rss_mb if r.prune_peak_rss_mb is None else r.prune_peak_rss_mb for r in results]
        gpu = [r.peak_gpu_mb if r.prune_peak_gpu_mb is None else r.prune_peak_gpu_mb for r in results]
        return {
            "prune_seconds": _mean([r.prune_seconds for r in results]),
            "calibration_tokens": _mean(tokens),
            "peak_rss_mb": _mean(rss),
            "peak_gpu_mb": _mean(gpu),
        }

    @property
    def sd(self) -> float | None:
        return statistics.stdev(self.values) if len(self.values) > 1 and all(map(math.isfinite, self.values)) else None


@dataclass
class Verdict:
    """Whether a cell differs from its column's best (``acetui_core.analysis.verdicts``). ``verdict``: best, tied,
    worse, unknown (one seed of a calibrated method: seed noise unknown) or untested (no per-unit record,
    or not on the best's units); ``note`` says why for the last two."""

    verdict: str
    ci: tuple[float, float] | None  # the cell's interval, in the table's scale
    p: float | None  # Holm-adjusted p of the paired test against the column's best
    ratio: float  # value / the column's best value
    note: str | None = None
    difference: tuple[float, float, float] | None = None  # vs the best: (value, low, high), table's scale
    p_unadjusted: float | None = None  # the paired test's own p, which ``difference``'s interval inverts


@dataclass
class Comparison:
    """Rows x (model, column) of cells; ``best`` holds the (row, column) keys of each column's best value.
    ``verdicts`` (filled by ``acetui_core.analysis.verdicts.judge``) make every cell tied with the best bold too."""

    models: list[str]
    columns: list[tuple[str, str]]  # (model, column header), grouped by model
    rows: list[str]
    cells: dict[tuple[str, tuple[str, str]], Cell]
    cell_format: str
    measure: str = "ppl"
    best: set = field(default_factory=set)
    verdicts: dict[tuple[str, tuple[str, str]], Verdict] = field(default_factory=dict)
    level: float = 0.95
    ci: str = "none"  # one of CI_STYLES
    shared: list[str] = field(default_factory=list)  # settings off their defaults every run shares (its caption)
    sparsity: str | None = None  # the one sparsity of every run, where no column or group names it (its caption)

    def bold(self, row: str, column: tuple[str, str]) -> bool:
        verdict = self.verdicts.get((row, column))
        return (row, column) in self.best or (verdict is not None and verdict.verdict == "tied")

    @property
    def tested(self) -> bool:
        """Whether some cell was compared with its column's best by a test."""
        return any(v.verdict in ("tied", "worse") for v in self.verdicts.values())

    @property
    def partial(self) -> bool:
        return any(cell.partial for cell in self.cells.values())

    def repeats_note(self) -> str | None:
        """Which rows hold repeated runs of a seed, counted once (the latest), or None."""
        rows = list(dict.fromkeys(row for (row, _), cell in self.cells.items() if cell.repeats))
        if not rows:
            return None
        count = len({run.id for cell in self.cells.values() for run in cell.repeats})
        note = (
            f"{count} repeated run(s) of a seed already counted are left out (each seed counts once, its latest "
            f"run): {', '.join(rows)}."
        )
        apart = [
            f"{row} seed {repeat.config.seed}: {old:.2f} (run {repeat.id}), counted {new:.2f} (run {run.id})"
            for (row, _), cell in self.cells.items()
            for repeat, old, run, new in cell.disagreements()
        ]
        if apart:
            shown = "; ".join(apart[:3]) + (f"; and {len(apart) - 3} more" if len(apart) > 3 else "")
            note += f" {len(apart)} of them differ from the run counted for their seed: {shown}."
        return note

    @property
    def seeds(self) -> bool:
        """Whether some cell is a mean over several seeds."""
        return any(len(cell.values) > 1 for cell in self.cells.values())

    @property
    def shows_sd(self) -> bool:
        """Whether a cell shows its seeds' standard deviation (``--ci none``, a cell of several seeds)."""
        return self.ci == "none" and any(cell.sd is not None for cell in self.cells.values())

    def untested(self, row: str, column: tuple[str, str]) -> bool:
        """Whether the cell could not be compared with its column's best (one seed, one window, no record to
        pair): in a paper table it must not read as "worse" for being not bold."""
        verdict = self.verdicts.get((row, column))
        return verdict is not None and verdict.verdict in ("unknown", "untested") and column[1] != NO_CALIBRATION

    def text(
        self,
        row: str,
        column: tuple[str, str],
        bold,
        dagger: str,
        bar: str,
        pm: str,
        uneven: str = " +{up}/−{down}",
        untested: str = "",
    ) -> str:
        """A cell as text, with the markup of the target format; ``--`` where no run is. ``uneven``: how
        ``--ci pm`` writes an interval that is not symmetric about the value (``{up}``, ``{down}``);
        ``untested``: the mark of a cell not compared with its column's best (the app has its own marks)."""
        cell = self.cells.get((row, column))
        if cell is None:
            return "--"
        value = f"{cell.value:.2f}"
        if self.bold(row, column):
            value = bold(value)
        if self.untested(row, column):
            value += untested
        verdict = self.verdicts.get((row, column))
        interval = verdict.ci if verdict is not None else None
        # one spread per table, named in its note (``export.verdict_note``): with --ci, a cell that has no
        # interval shows none rather than a standard deviation behind the same ±
        if self.ci == "pm" and interval is not None:  # the distances to the interval's ends, as printed
            up, down = f"{interval[1] - cell.value:.2f}", f"{cell.value - interval[0]:.2f}"
            value += f" {pm} {up}" if up == down else uneven.format(up=up, down=down)
        elif self.ci == "interval" and interval is not None:
            value += f" [{interval[0]:.2f}, {interval[1]:.2f}]"
        elif self.ci == "none" and cell.sd is not None:
            value += f" {pm} {cell.sd:.2f}"
        if len(cell.values) > 1:
            value += f" (n={len(cell.values)})"
        if cell.partial:
            value += dagger
        if self.cell_format == "ppl-time":
            cost = cell.cost
            memory = max(cost["peak_rss_mb"] or 0, cost["peak_gpu_mb"] or 0) / 1024
            value += f" {bar} {statistics.fmean(cell.seconds):.1f} {bar} {cost['calibration_tokens'] or 0:.0f}"
            value += f" {bar} {memory:.1f}"
        return value


def _sparsity_header(config: RunConfig) -> str:
    """A run's column: its sparsity pattern; with whole experts removed or the mask on the experts alone,
    the share of the routed experts' parameters taken (docs/moe.md), so that ``50% of expert parameters``
    holds REAP's removal beside Wanda inside the experts, at matched parameters."""
    spec = parse_sparsity(config.sparsity, allow_zero=True)
    pattern = str(spec) if spec.is_nm else f"{spec.ratio * 100:g}%"
    removed = f"{config.expert_sparsity * 100:g}% of expert parameters"
    if config.expert_sparsity and spec.fraction == 0:
        return removed
    inside = config.sparsity_scope == SparsityScope.EXPERTS
    if config.expert_sparsity:  # the scope stays in the header: row labels leave it to the column
        return f"{pattern}{' inside the experts' if inside else ''} + {removed} (experts removed)"
    return f"{pattern} of expert parameters" if inside else pattern


def _values(record: RunRecord, measure: str, row: str, header: str) -> list[tuple[str, str, float, bool]]:
    """(row, column header, value, partial) entries one run adds to the grid."""
    result = result_of(record)
    if measure == "ppl":
        assert result.ppl_wikitext2 is not None, record.id
        return [(row, header, result.ppl_wikitext2, result.ppl_partial)]
    tasks = result.zeroshot or {}
    mean = 100 * mean_accuracy(tasks)
    if measure == "zeroshot-mean":
        return [(row, header, mean, any_partial(tasks))]
    return [(row, task, 100 * task_accuracy(entry), entry.partial) for task, entry in tasks.items()] + [
        (row, AVERAGE, mean, any_partial(tasks))
    ]


def _evaluations(records: list[RunRecord], measure: str, models: dict[str, str]) -> dict[str, str]:
    """Each run's evaluation in words (``eval 16x512``: windows x tokens; ``eval n=100``: documents per
    task), for the runs of a model that were not all evaluated alike. Each evaluation then gets a column
    group of its own, so no best or ratio compares numbers measured on other windows or documents; windows
    cut from another WikiText-2 text (another copy of the test set) are other windows."""
    keys: dict[str, tuple] = {}
    texts = test_texts(records)
    for record in records:
        result = result_of(record)
        if measure == "ppl":
            keys[record.id] = (result.ppl_windows, result.ppl_seqlen, texts[record.id])
        else:
            keys[record.id] = tuple(
                sorted((task, entry.n, entry.source) for task, entry in (result.zeroshot or {}).items())
            )
    several = {  # the models whose runs were evaluated in more than one way
        name for name in set(models.values()) if len({keys[r.id] for r in records if models[r.id] == name}) > 1
    }
    keys = {r.id: keys[r.id] for r in records if models[r.id] in several}
    words = {}
    sizes = [key[:2] for key in dict.fromkeys(keys.values())]
    for key in dict.fromkeys(keys.values()):
        if measure == "ppl":
            words[key] = f"eval {key[0]}x{key[1]}"
            if sizes.count(key[:2]) > 1:  # the same windows of other texts: the text names them
                words[key] += f" text {key[2][:6] if key[2] else 'unrecorded'}"
        else:
            words[key] = "eval n=" + "/".join(str(n) for n in dict.fromkeys(n for _, n, _ in key))
    if len(set(words.values())) < len(words):  # the same sizes of other tasks or files: number them
        words = {key: f"{text} #{i + 1}" for i, (key, text) in enumerate(words.items())}
    return {run_id: words[key] for run_id, key in keys.items()}


def placeable(records: list[RunRecord]) -> tuple[list[RunRecord], list[RunRecord]]:
    """The runs a table, an export, a verdict or a figure may use, and those it leaves out: runs whose
    stored settings are damaged (``RunRecord.settings_unknown``), whose numbers cannot be placed in a cell
    because what they measure is unknown, and finished runs whose results are damaged
    (``RunRecord.results_unknown``), whose numbers cannot be read. Every face selects its runs through here
    and says what it left out (``left_out_note``); the run lists keep listing such runs."""
    kept: list[RunRecord] = []
    left: list[RunRecord] = []
    for record in records:  # one pass: ``record not in left`` compared whole records, for every run
        (left if record.settings_unknown or record.results_unknown else kept).append(record)
    return kept, left


def left_out_note(left: list[RunRecord], look: str) -> str:
    """One sentence naming the runs ``placeable`` left out, ending with where to ``look`` (each face's
    words: ``acetui runs show ID``, the Runs screen)."""
    ids = ", ".join(r.id for r in left[:5]) + (", ..." if len(left) > 5 else "")
    settings, results = any(r.settings_unknown for r in left), any(r.results_unknown for r in left)
    what = " or ".join(part for part, found in (("settings", settings), ("results", results)) if found)
    if len(left) == 1:
        return f"Left out 1 damaged run ({ids}): its {what} cannot be read; {look}."
    return f"Left out {len(left)} damaged runs ({ids}): their {what} cannot be read; {look}."


def measured(record: RunRecord, measure: str | None = None) -> bool:
    """Whether a run finished with results, and with the table's ``measure`` when one is named: the runs
    a table (or ``--last N`` of one) counts. A run whose settings cannot be read never counts
    (``placeable``)."""
    if record.status != RunStatus.FINISHED or record.results is None or record.settings_unknown:
        return False
    if measure == "ppl":
        return record.ppl is not None
    return measure is None or bool(record.results.zeroshot)


def check_table(cells: str = "ppl", columns: str = "sparsity", measure: str = "ppl") -> None:
    """The table's settings, checked before any run is started or read (``acetui compare --cells``)."""
    check_choice(cells, CELLS, "--cells")
    check_choice(columns, COLUMNS, "--columns")
    check_choice(measure, MEASURES, "--table")


def comparison(
    records: list[RunRecord],
    *,
    cells: str = "ppl",
    columns: str = "sparsity",
    measure: str = "ppl",
    beside: list[RunRecord] | None = None,
) -> Comparison:
    """Arrange the finished runs into the paper's grid: perplexity (best = lowest) or zero-shot accuracy
    in percent (best = highest), per task with Avg. last or as the mean of the tasks.

    Runs share a cell only when every setting that can change the number is equal (``settings``); seeds
    may differ, and the cell is then their mean ± sd with n. Runs that differ in anything else get rows
    of their own whose labels name the difference. ``beside``: the runs of tables shown with this one (the
    app's paper view), whose settings the labels take into account, so that a run reads alike in each."""
    check_table(cells, columns, measure)
    usable = [r for r in records if measured(r, measure)]
    what = "a WikiText-2 perplexity" if measure == "ppl" else "zero-shot results (prune --eval zeroshot)"
    if not usable:
        raise UserError(
            f"None of the {len(records)} selected run(s) has finished with {what}, "
            f"so there is no table to make (--format csv exports any run)."
        )
    several_sparsities = len({_sparsity_header(r.config) for r in usable}) > 1
    # A length study may take fewer windows of the longest length (16 x 2048 beside 128 x 16): each method
    # keeps one row, and its columns then name the windows as well as the length.
    several_budgets = len({r.config.nsamples for r in usable if result_of(r).calibration is not None}) > 1

    sparsity_columns = columns == "sparsity" and measure != "zeroshot"

    def keys(record: RunRecord) -> tuple[str, str]:
        config = record.config
        if sparsity_columns:
            return record.label, _sparsity_header(config)
        if columns == "seqlen":
            length = "FL" if config.seqlen == "full" else str(config.seqlen)
            if result_of(record).calibration is None:  # magnitude: under no length (its --seqlen was unused)
                length = NO_CALIBRATION
            elif several_budgets:
                length = f"{config.nsamples}x{length}"
            # a removal alone is named by its score ("REAP expert removal"), never by its unused method
            return (config.label if config.removes_experts_alone else paper_name(config.method)), length
        if columns == "seed":
            return record.label, f"seed {config.seed}"
        return record.label, ""  # per-task table: the tasks are the columns

    axis = "sparsity" if sparsity_columns else columns
    ids = {r.id for r in usable}
    others = [r for r in beside or [] if r.id not in ids and measured(r, None)]
    labels = row_labels(usable, {r.id: keys(r)[0] for r in usable + others}, measure, axis, others=others)
    names = model_columns(usable)
    evaluations = _evaluations(usable, measure, names)

    def group(record: RunRecord) -> str:
        """The column group: the model, the evaluation when the runs were not all evaluated alike, and the
        sparsity when it is not the columns' axis and runs differ in it (runs evaluated on other windows or
        documents, or pruned to another sparsity, are never ranked against each other)."""
        name = names[record.id]
        name = f"{name}, {evaluations[record.id]}" if record.id in evaluations else name
        return f"{name}, {_sparsity_header(record.config)}" if several_sparsities and not sparsity_columns else name

    models = list(dict.fromkeys(group(r) for r in usable))
    headers: dict[str, list[str]] = {m: [] for m in models}
    rows: list[str] = []
    grid: dict = {}
    for record in usable:
        model = group(record)
        for row, header, value, partial in _values(record, measure, labels[record.id], keys(record)[1]):
            rows.append(row)
            headers[model].append(header)
            grid.setdefault((row, (model, header)), Cell([], [], False, geometric=measure == "ppl")).add(
                record, value, partial
            )
    table = Comparison(
        models,
        [(m, h) for m in models for h in dict.fromkeys(headers[m])],
        list(dict.fromkeys(rows)),
        grid,
        cells,
        measure,
        shared=shared_settings(usable, measure, axis),
        # a seed, length or per-task table of one sparsity: only its caption can say which was measured
        sparsity=None if sparsity_columns or several_sparsities else _sparsity_header(usable[0].config),
    )
    pick = min if measure == "ppl" else max
    for column in table.columns:
        if column[1] == NO_CALIBRATION:  # the methods without calibration data: no calibration length to rank at
            continue
        shown = {
            row: round(grid[(row, column)].value, 2)
            for row in table.rows
            if (row, column) in grid and math.isfinite(grid[(row, column)].value)
        }
        if shown:
            best = pick(shown.values())
            table.best |= {(row, column) for row, value in shown.items() if value == best}
    return table
