"""Verdicts of a comparison: for each column, each cell's interval and whether it differs from the
column's best (``best``, ``tied``, ``worse``), by a paired test on the same windows or documents with the
seed spread included and Holm's correction over the column (``acetui_core.analysis.evidence``). A cell is
``unknown`` when a calibrated method has one seed (its seed noise cannot be measured), ``untested`` when a
run kept no per-unit record (recorded before acetui kept them), was not evaluated on the best's units, or
on one unit only (one window: no sampling noise to measure), or when no cell of its column is finite
(every perplexity infinite: nothing to rank against).
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

import numpy as np

from acetui_core.analysis import evidence
from acetui_core.analysis.comparison import AVERAGE, NO_CALIBRATION, Cell, Comparison, Verdict
from acetui_core.analysis.rowlabels import test_texts
from acetui_core.basics.texttable import text_table
from acetui_core.run.records import NOT_FINITE
from acetui_core.storage.store_rows import RunEvidence, RunRecord

NOT_KEPT = {
    "ppl": "cannot be tested: its per-window losses were not kept (run recorded before acetui kept them)",
    "zeroshot": "cannot be tested: its per-document outcomes were not kept (run recorded before acetui kept them)",
}
OTHER_UNITS = "cannot be tested: not evaluated on the same windows or documents as the best"
BEST_UNTESTED = "cannot be tested: the column's best kept no per-unit record to compare with"
BEST_ONE_SEED = "the column's best has 1 seed: seed noise unknown"
NOTHING_FINITE = "cannot be ranked or tested: no row of this column has a finite value to compare with"
NO_LENGTH = "not ranked: no calibration length to compare at (the method reads no calibration data)"
ONE_UNIT = {
    "ppl": "cannot be tested: evaluated on 1 window, whose sampling noise cannot be measured (--eval-limit)",
    "zeroshot": "cannot be tested: 1 document per task, whose sampling noise cannot be measured (--limit)",
}


@dataclass
class _Units:
    """A cell's runs as ``evidence.Group`` and the identity of the units they were measured on."""

    group: evidence.Group
    identity: tuple


def damaged(what: str, problem: str) -> str:
    """The note of a run whose kept record is damaged (``RunEvidence.damaged``), or whose model's loss was
    not finite (the model's fault, not the store's)."""
    if problem == NOT_FINITE:
        return "cannot be tested: the model's loss is infinite or NaN on a window (pruned to noise, or an overflow)"
    return f"cannot be tested: its {what} record is damaged ({problem})"


def _run_units(
    run: RunRecord, kept: RunEvidence, measure: str, header: str
) -> tuple[list[np.ndarray], tuple] | str | None:
    """The run's per-unit values in strata and their identity; None when it kept none, or why its
    record cannot be used (damaged)."""
    if measure == "ppl":
        losses = kept.window_losses
        if "wikitext2" in kept.damaged:
            return damaged("per-window", kept.damaged["wikitext2"])
        if losses is None:
            return None
        per_token = np.asarray(losses.nll) / np.asarray(losses.tokens)
        return [per_token], (losses.dataset, losses.split, losses.seqlen, len(losses.nll))
    tasks = list(run.results.zeroshot or {}) if run.results else []
    if measure == "zeroshot" and header != AVERAGE:
        tasks = [header]
    broken = [task for task in tasks if task in kept.damaged]
    if broken:
        return damaged(f"{broken[0]} per-document", kept.damaged[broken[0]])
    if not tasks or any(task not in kept.task_outcomes for task in tasks):
        return None
    outcomes = [kept.task_outcomes[task] for task in tasks]
    return [np.asarray(o.acc, dtype=float) for o in outcomes], tuple((o.task, tuple(o.doc_ids)) for o in outcomes)


def _cell_units(cell: Cell, kept: dict[str, RunEvidence], measure: str, header: str) -> _Units | None | str:
    """The cell's units, None when a run kept none, or OTHER_UNITS when its runs disagree on them."""
    found = [_run_units(run, kept.get(run.id, RunEvidence()), measure, header) for run in cell.runs]
    problem = next((units for units in found if isinstance(units, str)), None)
    if problem is not None:
        return problem
    per_run = [units for units in found if isinstance(units, tuple)]
    if len(per_run) < len(found):
        return None
    identities = {identity for _, identity in per_run}
    if len(identities) > 1:
        return OTHER_UNITS
    seed_free = all(run.results is not None and run.results.calibration is None for run in cell.runs)
    return _Units(evidence.Group([strata for strata, _ in per_run], seed_free), identities.pop())


def _to_scale(measure: str, value: float) -> float:
    """From the units' scale (NLL per token, accuracy as a fraction) to the table's."""
    if measure == "ppl":
        return math.exp(value) if value < 700 else math.inf
    return 100 * value


def _measured_interval(units: _Units | str | None, measure: str, level: float) -> tuple[float, float] | None:
    """A cell's interval; None without kept units, or on one unit (one window: no sampling noise measured)."""
    if not isinstance(units, _Units) or not units.group.unit_noise_known:
        return None
    return _interval(units, measure, level)


def _interval(units: _Units, measure: str, level: float) -> tuple[float, float]:
    group = units.group
    if group.seeds == 1 and measure != "ppl" and len(group.runs[0]) == 1:
        low, high = evidence.accuracy_interval(group.runs[0][0], level)
        return 100 * low, 100 * high
    low, high = evidence.group_interval(group, level)
    if measure != "ppl":
        if low == high:  # seeds alike, units alike (2 documents, both right): the binomial interval of them all
            low, high = evidence.accuracy_interval(np.concatenate(group.unit_means()), level)
        low, high = max(low, 0.0), min(high, 1.0)  # an accuracy's t-interval can pass 0% or 100%
    return _to_scale(measure, low), _to_scale(measure, high)


def judge(table: Comparison, kept: dict[str, RunEvidence], level: float = 0.95) -> Comparison:
    """Fill ``table.verdicts`` from the runs' kept units; returns the table."""
    table.level = level
    for column in table.columns:
        keys = [(row, column) for row in table.rows if (row, column) in table.cells]
        finite = [key for key in keys if math.isfinite(table.cells[key].value)]
        if not finite:  # nothing to rank against: every row is still shown, with its value and why
            for key in keys:
                table.verdicts[key] = Verdict("untested", None, None, math.nan, NOTHING_FINITE)
            continue
        if column[1] == NO_CALIBRATION:  # compared with nothing: each cell its interval alone
            for key in keys:
                alone = _cell_units(table.cells[key], kept, table.measure, column[1])
                table.verdicts[key] = Verdict("untested", _measured_interval(alone, table.measure, level), None,
                                              math.nan, NO_LENGTH)  # fmt: skip
            continue
        pick = min if table.measure == "ppl" else max
        best = pick(finite, key=lambda key: table.cells[key].value)
        # Rows tied for best as printed: the others are compared with the one of most seeds (whose seed
        # noise is known), not with whichever row came first.
        tied = [best, *(key for key in finite if key in table.best and key != best)]
        best = max(tied, key=lambda key: len(table.cells[key].values))
        best_value = table.cells[best].value
        units = {key: _cell_units(table.cells[key], kept, table.measure, column[1]) for key in keys}
        best_units = units[best]
        kind = "ppl" if table.measure == "ppl" else "zeroshot"
        tested: dict = {}
        for key in keys:
            cell, own = table.cells[key], units[key]
            ratio = cell.value / best_value if best_value else math.nan
            ci = _measured_interval(own, table.measure, level)
            note = None
            difference = None
            if key == best or key in table.best:  # the best, or equal to it as printed
                verdict = "best"
            elif not isinstance(own, _Units):
                verdict, note = "untested", own or NOT_KEPT[kind]
            elif not isinstance(best_units, _Units):
                verdict, note = "untested", BEST_UNTESTED
            elif own.identity != best_units.identity:
                verdict, note = "untested", OTHER_UNITS
            elif not (own.group.unit_noise_known and best_units.group.unit_noise_known):
                verdict, note = "untested", ONE_UNIT[kind]
            else:
                paired = evidence.paired_difference(own.group, best_units.group, level)
                difference = _difference(table.measure, paired, best_units.group.mean) if paired.ci else None
                if paired.seed_noise_known:
                    verdict, tested[key] = "tested", paired.p
                else:  # say whose seed noise is missing: this row's, or the best's it is compared with
                    verdict = "unknown"
                    note = BEST_ONE_SEED if own.group.seed_noise_known else evidence.SEED_NOISE_UNKNOWN
            table.verdicts[key] = Verdict(verdict, ci, None, ratio, note, difference)
        for key, p in zip(tested, evidence.holm(list(tested.values())), strict=True):
            judged = table.verdicts[key]
            judged.p, judged.p_unadjusted = p, tested[key]
            judged.verdict = "tied" if p >= alpha(level) else "worse"
    return table


def alpha(level: float) -> float:
    """The test's threshold, exact as written: 1 - 0.95 is 0.050000000000000044 in floats, which made
    p = 0.05 "worse" where the docs say tied."""
    return round(1 - level, 12)


def p_text(p: float | None, level: float) -> str:
    """A p-value as a table prints it: three decimals, as many more as it takes not to round it across the
    test's threshold (0.04958 is "0.0496", 0.04996 "0.04996", never "0.050" beside "worse")."""
    if p is None:
        return "–"
    if p < 0.001:
        return "<0.001"
    digits = 3
    while (float(f"{p:.{digits}f}") >= alpha(level)) != (p >= alpha(level)):  # rounded across: one more digit
        digits += 1
    return f"{p:.{digits}f}"


def _difference(measure: str, paired: evidence.Difference, best_mean: float) -> tuple[float, float, float]:
    """The paired difference (with an interval) in the table's scale: a perplexity ratio's change (exp of
    the NLL difference, times the best's perplexity minus it), or accuracy points."""
    assert paired.ci is not None, "called for a difference with an interval"
    if measure == "ppl":
        best = math.exp(best_mean)
        return tuple(best * (math.exp(d) - 1) for d in (paired.value, *paired.ci))  # type: ignore[return-value]
    return 100 * paired.value, 100 * paired.ci[0], 100 * paired.ci[1]


def report(table: Comparison) -> dict:
    """The verdicts as ``acetui verdict --json`` prints them: per column, each row's value, seeds, ratio to
    the best, interval, Holm-adjusted p and verdict, with the paired difference and the cost of the runs."""
    columns = []
    for column in table.columns:
        rows = []
        for row in table.rows:
            cell, verdict = table.cells.get((row, column)), table.verdicts.get((row, column))
            if cell is None or verdict is None:
                continue
            rows.append(
                {
                    "row": row,
                    "value": cell.value,
                    "n": len(cell.values),
                    "ratio": verdict.ratio,
                    "ci": list(verdict.ci) if verdict.ci else None,
                    "p": verdict.p,
                    "p_unadjusted": verdict.p_unadjusted,
                    "verdict": verdict.verdict,
                    "note": verdict.note,
                    "difference": list(verdict.difference) if verdict.difference else None,
                    "repeats": [run.id for run in cell.repeats],
                    **cell.cost,
                }
            )
        model, header = column
        columns.append({"column": f"{header} ({model})" if header else model, "rows": rows})
    return {
        "level": table.level,
        "measure": table.measure,
        "test": TEST,
        "repeats": table.repeats_note(),
        "columns": columns,
    }


TEST = (
    "paired t-test on the same windows or documents, seed-to-seed spread added (Welch-Satterthwaite df), "
    "Holm-corrected over each column's comparisons with its best"
)


def _number(value: float | None, digits: int = 2) -> str:
    """A figure, or "–" where there is none (a ratio of a cell ranked against nothing is NaN)."""
    return "–" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def text(data: dict) -> str:
    """The report as plain text: one block per column, notes under it."""
    level = f"{data['level'] * 100:g}%"
    header = ["Row", "value", "n", "ratio", f"{level} interval", "p", "verdict", "prune s", "calib tokens", "peak MB"]
    out = []
    for column in data["columns"]:
        lines = [header]
        notes = []
        for row in column["rows"]:
            ci = row["ci"]
            lines.append(
                [
                    row["row"],
                    _number(row["value"]),
                    str(row["n"]),
                    _number(row["ratio"], 3),
                    f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "–",
                    p_text(row["p"], data["level"]),
                    row["verdict"],
                    _number(row["prune_seconds"], 1),
                    _number(row["calibration_tokens"], 0),
                    _number(row["peak_rss_mb"], 0),
                ]
            )
            if row["note"]:
                notes.append(f"  {row['row']}: {row['note']}")
        out.append(column["column"])
        numbers = set(range(len(header))) - {0, 6}  # all but the row and the verdict
        out.append(textwrap.indent(text_table(header, lines[1:], right=numbers), "  "))
        out += notes
        out.append("")
    if data["repeats"]:
        out.append(data["repeats"])
    out.append(f"Test: {data['test']}; level {level}; n = seeds per row.")
    return "\n".join(out) + "\n"


def run_difference(
    first: RunRecord, second: RunRecord, kept: dict[str, RunEvidence], level: float = 0.95, measure: str = "ppl"
) -> tuple[float, float, float, float] | str:
    """``second - first`` with its interval and the paired test's p, for two runs evaluated on the same
    units: in perplexity over the same windows (``measure`` "ppl"), or in points of mean zero-shot accuracy
    over the same documents of the same tasks ("zeroshot", each task weighing equally); or why it cannot
    be computed. One run each: the seed noise is not included."""
    if measure == "ppl" and first.model_key != second.model_key:
        # another model's tokenizer cuts other windows from the same text; documents stay the same documents
        return "cannot be tested: the two runs are of different models, whose windows need not hold the same tokens"
    if measure == "ppl" and len(set(test_texts([first, second]).values())) > 1:
        return "cannot be tested: the two runs were evaluated on different copies of the WikiText-2 test text"
    a, b = (_run_units(run, kept.get(run.id, RunEvidence()), measure, AVERAGE) for run in (first, second))
    if isinstance(a, str):
        return a.replace("its", "a run's", 1)
    if isinstance(b, str):
        return b.replace("its", "a run's", 1)
    if a is None or b is None:
        return NOT_KEPT[measure].replace("its", "a run's")
    if a[1] != b[1]:
        where = "windows" if measure == "ppl" else "documents"
        return f"cannot be tested: the two runs were not evaluated on the same {where}"
    base = evidence.Group([a[0]])
    paired = evidence.paired_difference(evidence.Group([b[0]]), base, level)
    if paired.ci is None:
        where = "window" if measure == "ppl" else "document"
        return f"every {where} moved alike, so no interval can be given; the sign test's p is {paired.p:.3g}"
    value, low, high = _difference(measure, paired, base.mean)
    return value, low, high, paired.p
