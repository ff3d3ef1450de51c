"""Verdicts on synthetic stored runs: per-window losses drawn at fixed seeds, so every claim is about what a
user's table would say, without a model."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import re
import sqlite3
from dataclasses import replace

import numpy as np
import pytest
from runhelpers import Clock, cli, insert_run, pilot_wait_until, window_losses
from scipy import stats
from scipy.stats import ttest_rel

from acetui_core.analysis.comparison import comparison
from acetui_core.analysis.export import export
from acetui_core.analysis.figures import coordinate
from acetui_core.analysis.verdicts import judge, run_difference
from acetui_core.run.config import RunConfig
from acetui_core.storage.store import Store

WINDOWS, SEQLEN = 32, 16
BASE = np.random.default_rng(0).normal(4.3, 0.35, WINDOWS)  # the windows' own difficulty, shared by every run
C4 = {"source": "/data/c4/c4_calib_merged.jsonl", "nsamples": 8, "seqlen": 16, "seed": 0, "fingerprint": "a"}
OTHER = {**C4, "source": "/data/c4-train.00000-of-01024-first1000.json", "fingerprint": "b"}


def losses(seed: int, shift: float = 0.0) -> dict:
    """A run's window losses: the windows' difficulty, a seed effect of the calibration sample (sd 0.02
    per token, about ±1.5 on a perplexity of 74, as measured on SmolLM2) and per-window noise."""
    rng = np.random.default_rng(1000 + seed)
    return window_losses(BASE + shift + rng.normal(0, 0.02) + rng.normal(0, 0.01, WINDOWS), SEQLEN)


def add(
    store,
    clock,
    run_id,
    *,
    method="wanda",
    seed=0,
    calib="c4",
    calibration=C4,
    shift=0.0,
    kept=True,
    windows=None,
    model="org/tiny",
    sparsity="0.5",
    text=None,
    device=None,
    **config,
):
    """A finished run; ``windows``: (count, length) of another evaluation than the default's; ``text``: the
    WikiText-2 test text it recorded (None: recorded before acetui kept it)."""
    per_window = losses(int(run_id[-2:]), shift)
    count, length = windows or (WINDOWS, SEQLEN)
    per_window |= {"seqlen": length, "limit": count} if windows else {}
    per_window["nll"], per_window["tokens"] = per_window["nll"][:count], per_window["tokens"][:count]
    ppl = float(np.exp(np.sum(per_window["nll"]) / (count * SEQLEN)))
    result = {"calibration": calibration, "ppl_windows": count, "ppl_seqlen": length, "ppl_text": text}
    result |= {"device": device} if device else {}
    if kept:
        result["window_losses"] = per_window
    config = {"nsamples": 8, **config}
    run = RunConfig(model=model, method=method, sparsity=sparsity, seed=seed, calib=calib, **config)
    insert_run(store, clock, run_id, run, created=clock.now + 10, ppl=ppl, result=result)


@pytest.fixture
def store(tmp_path):
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    store.clock_ = clock
    return store


@pytest.fixture(params=[False, True], ids=["colour", "NO_COLOR"])
def no_color(request, monkeypatch, tmp_path) -> bool:
    """The app with colour or under ``NO_COLOR`` (the marks must read without it); exports in tmp_path."""
    if request.param:
        monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("ACETUI_EXPORT_DIR", str(tmp_path / "exports"))
    return request.param


@contextlib.asynccontextmanager
async def results_screen(store, rows: int):
    """The app at 80x24 on its Results screen once ``rows`` finished runs are listed: (pilot, screen)."""
    from acetui.app import make_app

    app = make_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f3")
        await pilot_wait_until(pilot, lambda: app.screen.query_one("#results").row_count == rows, "the runs")
        yield pilot, app.screen


def verdicts(store, **kw):
    runs = store.list_runs()
    table = judge(comparison(runs, **kw), store.evidence([r.id for r in runs]))
    return {row: table.verdicts[(row, table.columns[0])] for row in table.rows}


def test_two_calibration_samples_of_one_distribution_tie_and_a_shifted_group_is_worse(store):
    clock = store.clock_
    for seed in range(3):  # the same method on two C4 files, three seeds each, different seed effects
        add(store, clock, f"a00000{seed:02d}", seed=seed)
        add(store, clock, f"b00000{seed + 10:02d}", seed=seed, calib="/data/c4-train.json", calibration=OTHER)
        add(store, clock, f"c00000{seed + 20:02d}", seed=seed, method="ria", shift=0.15)
    add(store, clock, "d0000030", method="magnitude", calibration=None, shift=1.5)  # no calibration: no seed noise
    found = verdicts(store)
    [c4, other] = [row for row in found if row.startswith("Wanda-16")]
    assert c4 == "Wanda-16 (C4 sample c4_calib_merged)"
    assert other == "Wanda-16 (calibration c4-train.00000…first1000)"
    assert {found[c4].verdict, found[other].verdict} == {"best", "tied"}
    assert found["RIA-16"].verdict == "worse" and found["RIA-16"].p < 0.05
    assert found["Magnitude"].verdict == "worse"
    tied = found[c4] if found[c4].verdict == "tied" else found[other]
    assert tied.p > 0.05 and tied.ci[0] < tied.ci[1]
    # the trap the seed spread avoids: one seed of each, tested on the windows alone, would differ
    a, b = (np.array(losses(seed)["nll"]) / SEQLEN for seed in (0, 10))
    assert ttest_rel(a, b).pvalue < 0.05


def test_one_seed_says_its_seed_noise_is_unknown(store):
    clock = store.clock_
    add(store, clock, "a0000001")
    add(store, clock, "b0000002", method="ria", shift=0.15)
    found = verdicts(store)
    assert found["RIA-16"].verdict == "unknown" and found["RIA-16"].note == "1 seed: seed noise unknown"
    assert found["RIA-16"].p is None
    assert found["Wanda-16"].verdict == "best"


def test_a_row_compared_with_a_one_seed_best_says_whose_seed_noise_is_unknown(store):
    clock = store.clock_
    add(store, clock, "a0000001")  # the best, one seed
    for seed in range(3):
        add(store, clock, f"b00000{seed + 2:02d}", method="ria", seed=seed, shift=0.15)
    found = verdicts(store)
    assert found["Wanda-16"].verdict == "best"
    assert found["RIA-16"].verdict == "unknown" and found["RIA-16"].p is None
    assert found["RIA-16"].note == "the column's best has 1 seed: seed noise unknown"
    from acetui_core.analysis.export import verdict_note

    table = judge(comparison(store.list_runs()), store.evidence([r.id for r in store.list_runs()]))
    assert "not tested where it or its column's best is a calibrated method with one seed" in verdict_note(table)


def test_rows_tied_for_best_compare_the_others_with_the_one_of_more_seeds(store):
    """Wanda (one seed) and RIA (two) print the same perplexity: CosP is tested against RIA, whose seed
    noise is known, not reported 'unknown' against Wanda because Wanda came first."""
    clock = store.clock_
    add(store, clock, "a0000001")
    add(store, clock, "b0000001", method="ria")  # the same windows' losses (the id's last two digits): the same ppl
    add(store, clock, "c0000001", method="ria", seed=1)
    for seed in range(2):
        add(store, clock, f"d00000{seed + 2:02d}", method="cosp", seed=seed, shift=0.15)
    found = verdicts(store)
    assert found["Wanda-16"].verdict == found["RIA-16"].verdict == "best"
    assert found["CosP-16"].verdict == "worse" and found["CosP-16"].p is not None


def test_a_cell_is_centred_where_its_interval_and_test_are(store):
    """One diverged seed of ten: the mean of the perplexities (2323 here) lay outside the cell's own
    interval, ranked Wanda behind magnitude and called it worse, while the paired test found Wanda
    better. A cell's perplexity is the geometric mean of its seeds', exp of their mean NLL, as the test's."""
    clock = store.clock_
    add(store, clock, "a0000001", method="magnitude", calibration=None, shift=1.9)
    for seed in range(10):
        add(store, clock, f"b00000{seed + 10:02d}", seed=seed, shift=5.0 if seed == 9 else 0.0)
    runs = store.list_runs()
    table = judge(comparison(runs), store.evidence([r.id for r in runs]))
    column = table.columns[0]
    wanda, magnitude = table.cells[("Wanda-16", column)], table.cells[("Magnitude", column)]
    low, high = table.verdicts[("Wanda-16", column)].ci
    assert low < wanda.value < high
    assert wanda.value == pytest.approx(np.exp(np.mean(np.log(wanda.values))))
    assert wanda.value < magnitude.value < np.mean(wanda.values)
    assert table.verdicts[("Wanda-16", column)].verdict == "best"
    assert table.verdicts[("Magnitude", column)].verdict in ("tied", "worse")


@pytest.mark.parametrize("count", [2, 8, WINDOWS])
def test_one_runs_interval_is_students_over_its_windows(store, count):
    """One run (magnitude: no seeds to spread): exp(mean NLL ± t(n-1) s/sqrt(n)) over its n windows. The
    percentile bootstrap used before was, on 2 windows, the two windows' own perplexities (it covered the
    mean half the time) and 88% at 8 windows: a one-seed cell looked surer than its neighbours."""
    clock = store.clock_
    add(store, clock, "a0000001", method="magnitude", calibration=None, windows=(count, SEQLEN))
    nll = np.array(losses(1)["nll"][:count]) / SEQLEN
    half = stats.t.ppf(0.975, count - 1) * np.std(nll, ddof=1) / np.sqrt(count)
    [found] = verdicts(store).values()
    assert found.ci == pytest.approx((np.exp(nll.mean() - half), np.exp(nll.mean() + half)))
    if count == 2:  # wider than the two windows' own perplexities, the bootstrap's ends
        assert found.ci[0] < np.exp(nll.min()) and np.exp(nll.max()) < found.ci[1]


def test_one_window_gives_no_interval_and_no_verdict(store):
    """``--eval-limit 1``: one window per run, so nothing measures the windows' sampling noise. Two
    seed-free magnitude variants were called worse at p < 0.001, each with a zero-width interval."""
    clock = store.clock_
    add(store, clock, "a0000001", method="magnitude", calibration=None, windows=(1, SEQLEN))
    add(store, clock, "b0000002", method="magnitude", calibration=None, windows=(1, SEQLEN), shift=0.3, group="row")
    found = verdicts(store)
    [best, other] = sorted(found, key=lambda row: found[row].verdict)
    assert found[best].verdict == "best" and found[best].ci is None
    assert found[other].verdict == "untested" and found[other].p is None and found[other].ci is None
    assert found[other].note.startswith("cannot be tested: evaluated on 1 window")
    runs = store.list_runs()
    markdown = export(runs, "markdown", evidence=store.evidence([r.id for r in runs]))
    [line] = [line for line in markdown.splitlines() if line.startswith(f"| {other} ")]
    assert line.rstrip(" |").endswith("?") and "? marks a cell not compared" in markdown  # it read as if worse


def test_a_run_without_window_losses_shows_its_perplexity_and_cannot_be_tested(store):
    clock = store.clock_
    for seed in range(2):
        add(store, clock, f"a00000{seed:02d}", seed=seed)
        add(store, clock, f"b00000{seed + 10:02d}", seed=seed, method="ria", shift=0.15, kept=False)
    table = judge(comparison(store.list_runs()), store.evidence([r.id for r in store.list_runs()]))
    [column] = table.columns
    assert table.verdicts[("RIA-16", column)].verdict == "untested"
    assert "were not kept" in table.verdicts[("RIA-16", column)].note
    assert table.cells[("RIA-16", column)].value > table.cells[("Wanda-16", column)].value


def test_runs_show_says_whether_a_run_can_be_tested(store, monkeypatch, capsys):
    add(store, store.clock_, "a0000001")
    add(store, store.clock_, "b0000002", kept=False)
    _, out, _ = cli(monkeypatch, capsys, "runs", "show", "a0000001", "--store", store.path)
    assert f"kept for tests: {WINDOWS} perplexity windows of {SEQLEN} tokens" in out
    _, out, _ = cli(monkeypatch, capsys, "runs", "show", "b0000002", "--store", store.path)
    assert "its perplexity cannot be tested" in out


def test_keep_masks_and_fidelity_never_split_a_row(store):
    clock = store.clock_
    add(store, clock, "a0000001", seed=0)
    add(store, clock, "a0000002", seed=1, keep_masks=True)
    add(store, clock, "a0000003", seed=2, fidelity=True, save="/tmp/pruned")
    table = comparison(store.list_runs())
    assert table.rows == ["Wanda-16"] and len(table.cells[("Wanda-16", table.columns[0])].values) == 3


def test_exports_bold_every_tied_row_and_say_how(store):
    clock = store.clock_
    for seed in range(3):
        add(store, clock, f"a00000{seed:02d}", seed=seed)
        add(store, clock, f"b00000{seed + 10:02d}", seed=seed, calib="/data/c4-train.json", calibration=OTHER)
        add(store, clock, f"c00000{seed + 20:02d}", seed=seed, method="ria", shift=0.15)
    runs = store.list_runs()
    kept = store.evidence([r.id for r in runs])
    markdown = export(runs, "markdown", evidence=kept, ci="interval")
    wanda = [line for line in markdown.splitlines() if line.startswith("| Wanda-16")]
    assert len(wanda) == 2 and all("**" in line for line in wanda)
    assert "**" not in next(line for line in markdown.splitlines() if line.startswith("| RIA-16"))
    assert "paired t-test on the same windows" in markdown and "95% level" in markdown and "n = 3 seed(s)" in markdown
    assert "[" in wanda[0] and "[low, high] is the 95% interval." in markdown
    latex = export(runs, "latex", evidence=kept, ci="pm")
    assert latex.count("\\textbf{") == 2 and "95\\% level" in latex and "$\\pm$ is the distance" in latex
    # a perplexity interval is not symmetric about the value: each end's distance, as the interval gives it
    table = judge(comparison(runs), kept)
    table.ci = "pm"
    low, high = table.verdicts[("RIA-16", table.columns[0])].ci
    value = table.cells[("RIA-16", table.columns[0])].value
    assert f"$^{{+{high - value:.2f}}}_{{-{value - low:.2f}}}$" in latex
    assert f"{value:.2f} +{high - value:.2f}/−{value - low:.2f} (n=3)" in export(
        runs, "markdown", evidence=kept, ci="pm"
    )
    rows = export(runs, "csv", evidence=kept).splitlines()
    assert rows[0].endswith(",value,ci_low,ci_high,n,verdict")
    assert sorted(line.rsplit(",", 1)[1] for line in rows[1:]).count("worse") == 3


def test_csv_row_group_and_column_name_one_cell_across_models(store):
    """Two models' Wanda rows share a label and a column header: the CSV's group keeps their cells apart, so
    a program that pivots on row, group and column never merges two models' values."""
    clock = store.clock_
    for seed in range(2):
        add(store, clock, f"a00000{seed:02d}", seed=seed)
        add(store, clock, f"b00000{seed + 30:02d}", seed=seed, model="org/other", shift=0.2)
    runs = store.list_runs()
    rows = list(csv.DictReader(io.StringIO(export(runs, "csv", evidence=store.evidence([r.id for r in runs])))))
    cells: dict[tuple, set] = {}
    for row in rows:
        cells.setdefault((row["row"], row["group"], row["column"]), set()).add((row["config.model"], row["value"]))
    assert len(cells) == 2 and all(len(values) == 1 for values in cells.values())
    assert {group for _, group, _ in cells} == {"tiny", "other"}


def test_a_row_across_models_holds_runs_of_the_same_settings(store):
    """Labels were made per model: one plain Wanda-16 row held 8-sample runs in one model's column and
    16-sample runs in the other's, and runs of the same settings on two models could read as two rows."""
    clock = store.clock_
    add(store, clock, "a0000000")
    add(store, clock, "b0000030", model="org/other", nsamples=16)
    add(store, clock, "c0000040", model="org/third")
    table = comparison(store.list_runs())
    rows = {column[0]: row for row, column in table.cells}
    assert rows == {"tiny": "Wanda-16 (8 samples)", "third": "Wanda-16 (8 samples)", "other": "Wanda-16 (16 samples)"}


def test_a_cells_memory_is_its_pruning_not_a_zero_shot_evaluation_after_it(store):
    """Seeds re-run with zero-shot became the counted runs, and their whole-run peak (lm-eval's included)
    gave Wanda 2.4x RIA's memory for the same masks; a run recorded before the pruning's own peak was kept
    still counts with its whole-run peak."""
    clock = store.clock_
    add(store, clock, "a0000000", seed=0)
    add(store, clock, "a0000001", seed=1)
    with sqlite3.connect(store.path) as db:
        for run_id, whole, pruning in (("a0000000", 1500.0, 600.0), ("a0000001", 700.0, None)):
            result = json.loads(db.execute("SELECT results FROM runs WHERE id = ?", (run_id,)).fetchone()[0])
            result |= {"peak_rss_mb": whole, "prune_peak_rss_mb": pruning}
            db.execute("UPDATE runs SET results = ? WHERE id = ?", (json.dumps(result), run_id))
    db.close()
    [cell] = comparison(store.list_runs()).cells.values()
    assert cell.cost["peak_rss_mb"] == pytest.approx((600.0 + 700.0) / 2)


def test_two_versions_of_one_calibration_file_are_v1_and_v2(store):
    """A file re-written at its path was numbered among every calibration of the row: the C4 sample took
    version 1, and the file's two versions read "dom v2" and "dom v3"."""
    clock = store.clock_
    add(store, clock, "a0000000")
    for run_id, fingerprint in (("b0000010", "d1"), ("c0000020", "d2")):
        dom = {**C4, "source": "/data/dom.jsonl", "fingerprint": fingerprint}
        add(store, clock, run_id, calib="/data/dom.jsonl", calibration=dom)
    rows = sorted(comparison(store.list_runs()).rows)
    assert rows == [
        "Wanda-16 (C4 sample c4_calib_merged)",
        "Wanda-16 (calibration dom v1)",
        "Wanda-16 (calibration dom v2)",
    ]


def test_verdict_command_prints_the_json_the_issue_names(store, monkeypatch, capsys):
    clock = store.clock_
    for seed in range(2):
        add(store, clock, f"a00000{seed:02d}", seed=seed)
        add(store, clock, f"c00000{seed + 20:02d}", seed=seed, method="ria", shift=0.15)
    code, out, _ = cli(monkeypatch, capsys, "verdict", "--store", store.path, "--json", "--level", "0.9")
    assert code == 0
    data = json.loads(out)
    [column] = data["columns"]
    assert column["column"] == "50% (tiny)" and data["level"] == 0.9
    ria = next(row for row in column["rows"] if row["row"] == "RIA-16")
    assert {"row", "value", "n", "ratio", "ci", "p", "verdict"} <= set(ria)
    assert ria["n"] == 2 and ria["verdict"] == "worse" and ria["ratio"] > 1 and ria["calibration_tokens"] == 128
    assert ria["p_unadjusted"] <= ria["p"]  # the difference's interval is the unadjusted test's: both are given
    code, out, _ = cli(monkeypatch, capsys, "verdict", "--store", store.path, "--method", "ria")
    assert code == 0 and "RIA-16" in out and "Wanda" not in out and "Test: paired t-test" in out


def test_a_column_with_no_finite_value_still_shows_every_row(store, monkeypatch, capsys):
    """Models pruned to noise (an infinite perplexity, as export's table shows it): verdict printed an empty
    column with exit 0. Each row is shown, its value inf (null in valid JSON), with why it has no verdict."""
    from test_runs_cli import strict_json

    from acetui_core.analysis.verdicts import NOTHING_FINITE

    clock = store.clock_
    add(store, clock, "a0000001", shift=math.inf)
    add(store, clock, "b0000002", method="magnitude", calibration=None, shift=math.inf)
    code, out, err = cli(monkeypatch, capsys, "verdict", "--store", store.path, "--json")
    assert code == 0, err
    [column] = strict_json(out)["columns"]
    assert {row["row"] for row in column["rows"]} == {"Wanda-16", "Magnitude"}, out
    for row in column["rows"]:
        assert (row["value"], row["verdict"], row["note"]) == (None, "untested", NOTHING_FINITE), row
    code, out, err = cli(monkeypatch, capsys, "verdict", "--store", store.path)
    assert code == 0, err
    assert [line.split()[1:3] for line in out.splitlines() if " inf " in line] == [["inf", "1"]] * 2, out
    assert out.count(NOTHING_FINITE) == 2, out
    code, out, err = cli(monkeypatch, capsys, "export", "--store", store.path, "--format", "markdown")
    assert len(re.findall(r"\| +inf", out)) == 2, out  # the rows the verdict shows


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--level", "1.5"], "--level 1.5 is not a confidence level"),
        (["--method", "nothing"], "No run in"),
        (["--table", "bleu"], "Unknown --table 'bleu'"),
    ],
)
def test_verdict_command_refuses_bad_input_in_one_sentence(store, monkeypatch, capsys, args, message):
    add(store, store.clock_, "a0000001")
    code, out, err = cli(monkeypatch, capsys, "verdict", "--store", store.path, *args)
    assert code == 2 and message in err and "Traceback" not in err


@pytest.mark.asyncio
async def test_the_results_screen_marks_each_cell_with_its_verdict(store, tmp_path, no_color):
    from rich.console import Console

    clock = store.clock_
    for seed in range(2):
        add(store, clock, f"a00000{seed:02d}", seed=seed)
        add(store, clock, f"c00000{seed + 20:02d}", seed=seed, method="ria", shift=0.15)
    add(store, clock, "d0000030", method="ace", shift=0.08)  # one seed: seed noise unknown
    async with results_screen(store, 5) as (pilot, results):
        await pilot.press("v")

        def shown() -> list[str]:
            console = Console(width=120, file=io.StringIO(), record=True, no_color=no_color)
            console.print(results.paper_table())
            return console.export_text().splitlines()

        lines = shown()
        assert any("Wanda-16" in line and "●" in line for line in lines)
        assert any("RIA-16" in line and "▼" in line for line in lines)
        assert any("CosP+VarP-16" in line and "?" in line for line in lines)
        assert any("≈ tied with it" in line for line in lines)
        # two selected runs: their paired difference on the shared windows
        results.selected = {"a0000000", "c0000020"}
        lines = shown()
        note = next(line for line in lines if line.startswith("Paired difference"))
        assert "RIA-16 0.5 c000 − Wanda-16 0.5 a000: +" in note and "p = " in note
        # g saves the Pareto figure of the chosen runs, with their intervals
        await pilot.press("g")
        while not list((tmp_path / "exports").glob("acetui-pareto-*.tex")):
            await pilot.pause(0.1)
        figure = next((tmp_path / "exports").glob("acetui-pareto-*.tex")).read_text()
        assert figure.count("\\addplot") == 2 and "error bars" in figure


@pytest.mark.asyncio
async def test_verdict_marks_stay_beside_their_numbers_at_80x24(store):
    """Six columns of intervals at 80x24 wrap each cell over lines of its own: the mark stays joined to its
    number (it was wrapped onto the line of "(n=2)", three lines under it)."""
    from textual.geometry import Region

    cells = [
        (model, sparsity, method, shift)
        for model in ("org/llama", "org/qwen")
        for sparsity in ("0.5", "0.6", "2:4")
        for method, shift in (("wanda", 0.0), ("ria", 0.15))
    ]
    for number, (model, sparsity, method, shift) in enumerate(cells * 2):  # two seeds of each cell
        seed = number // len(cells)
        add(
            store,
            store.clock_,
            f"r00000{number:02d}",
            method=method,
            seed=seed,
            shift=shift,
            model=model,
            sparsity=sparsity,
        )
    async with results_screen(store, 2 * len(cells)) as (pilot, results):
        await pilot.press("v")
        drawn = results.query_one("#paper-table")
        await pilot_wait_until(pilot, lambda: "Working out" not in str(drawn.visual), "the verdicts drawn")
        lines = [strip.text.strip() for strip in drawn.render_lines(Region(0, 0, *drawn.outer_size))]
    table = [line for line in lines if line.startswith("│")]
    assert sum(line.count("(n=2)") for line in table) == 12  # each cell wrapped: n on a line of its own
    assert not any("(n=2)" in line and "[" in line for line in table)
    marks = [(line[i - 1], mark) for line in table for i, mark in enumerate(line) if mark in "●≈▼?–"]
    assert len(marks) == 12 and all(before.isdigit() for before, _ in marks), table


def outcomes(seed: int, accuracy: float) -> tuple[dict, dict]:
    """A run's zero-shot results on two tasks of 300 documents: (TaskAccuracy fields, TaskOutcomes)."""
    rng = np.random.default_rng(2000 + seed)
    tasks, kept = {}, {}
    for task in ("boolq", "rte"):
        correct = (rng.random(300) < accuracy).astype(int).tolist()
        fields = {"acc_stderr": 0.01, "acc_norm": None, "acc_norm_stderr": None, "partial": False}
        tasks[task] = {"acc": sum(correct) / 300, "n": 300, "total": 300, "source": "local", **fields}
        kept[task] = {
            "task": task,
            "lm_eval": "0.4.9",
            "limit": None,
            "doc_ids": list(range(300)),
            "acc": correct,
            "acc_norm": None,
        }
    return tasks, kept


def test_zero_shot_verdicts_pair_the_documents(store):
    clock = store.clock_
    runs = [(f"a0{seed}", "wanda", seed, 0.7) for seed in range(3)] + [
        (f"c1{seed}", "ria", seed, 0.6) for seed in range(3)
    ]
    for run_id, method, seed, accuracy in runs:
        tasks, kept = outcomes(int(run_id[-2:]), accuracy)
        run = RunConfig(model="org/tiny", method=method, sparsity="0.5", seed=seed, evals=["zeroshot"])
        result = {"calibration": C4, "task_outcomes": kept}
        insert_run(store, clock, run_id, run, created=clock.now + 10, ppl=None, zeroshot=tasks, result=result)
    add(store, clock, "r0000004", method="ria", seed=1)  # a run without zero-shot results stays out
    runs = store.list_runs()
    table = judge(comparison(runs, measure="zeroshot"), store.evidence([r.id for r in runs]))
    assert [header for _, header in table.columns] == ["boolq", "rte", "Avg."]
    for column in table.columns:
        assert table.verdicts[("Wanda-16", column)].verdict == "best"
        assert table.verdicts[("RIA-16", column)].verdict == "worse"
    mean = judge(comparison(runs, measure="zeroshot-mean"), store.evidence([r.id for r in runs]))
    [column] = mean.columns
    low, high = mean.verdicts[("Wanda-16", column)].ci
    assert low < mean.cells[("Wanda-16", column)].value < high


def test_a_p_value_is_never_printed_across_the_threshold_of_its_verdict():
    """0.04958 printed 0.050 beside "worse"; p = 0.05 exactly was "worse" (1 - 0.95 > 0.05 in floats)."""
    from acetui_core.analysis.verdicts import alpha, p_text

    assert p_text(0.04958, 0.95) == "0.0496" and p_text(0.0504, 0.95) == "0.050"
    assert p_text(0.0123, 0.95) == "0.012" and p_text(0.0004, 0.95) == "<0.001" and p_text(None, 0.95) == "–"
    assert p_text(0.00951, 0.99) == "0.0095" and p_text(0.04996, 0.95) == "0.04996"
    assert alpha(0.95) <= 0.05


def test_an_accuracy_interval_stays_within_0_and_100_and_is_never_a_point(store):
    """Three seeds on 2 documents: a t-interval passed 100% ([11, 155]), and 2 documents right on every
    seed gave [100, 100], certainty from two documents."""
    clock = store.clock_
    for run_id, method, seed, correct in [
        *((f"a0{seed}", "wanda", seed, right) for seed, right in enumerate(([1, 1], [1, 1], [1, 0]))),
        *((f"b0{seed}", "ria", seed, [1, 1]) for seed in range(3)),
    ]:
        fields = {"acc_stderr": 0.01, "acc_norm": None, "acc_norm_stderr": None, "partial": True, "source": "local"}
        tasks = {task: {"acc": sum(correct) / 2, "n": 2, "total": 3270, **fields} for task in ("boolq", "rte")}
        kept = {
            task: {"task": task, "lm_eval": "0.4.9", "limit": 2, "doc_ids": [0, 1], "acc": correct, "acc_norm": None}
            for task in ("boolq", "rte")
        }
        run = RunConfig(model="org/tiny", method=method, sparsity="0.5", seed=seed, evals=["zeroshot"])
        result = {"calibration": C4, "task_outcomes": kept}
        insert_run(store, clock, run_id, run, created=clock.now + 10, ppl=None, zeroshot=tasks, result=result)
    runs = store.list_runs()
    table = judge(comparison(runs, measure="zeroshot-mean"), store.evidence([r.id for r in runs]))
    [column] = table.columns
    wanda, ria = (table.verdicts[(row, column)] for row in ("Wanda-16", "RIA-16"))
    assert 0 <= wanda.ci[0] < wanda.ci[1] == 100
    assert ria.verdict == "best" and 0 < ria.ci[0] < ria.ci[1] == 100
    per_task = judge(comparison(runs, measure="zeroshot"), store.evidence([r.id for r in runs]))
    assert all(v.ci is None or v.ci[0] < v.ci[1] for v in per_task.verdicts.values())
    assert wanda.verdict == "tied" and wanda.p > 0.05


def test_two_runs_zero_shot_difference_pairs_their_documents(store):
    """Two selected runs: the difference of their mean accuracies (tasks weigh equally), in points, with the
    paired test over the same documents; runs scored on other documents are not compared."""
    clock = store.clock_
    drawn = {}
    for run_id, method, seed, accuracy in (("a0000000", "wanda", 0, 0.7), ("c0000001", "ria", 1, 0.6)):
        tasks, kept = outcomes(seed, accuracy)
        drawn[run_id] = kept
        run = RunConfig(model="org/tiny", method=method, sparsity="0.5", seed=seed, evals=["zeroshot"])
        result = {"calibration": C4, "task_outcomes": kept}
        insert_run(store, clock, run_id, run, created=clock.now + 10, ppl=None, zeroshot=tasks, result=result)
    runs = {run.id: run for run in store.list_runs()}
    kept = store.evidence(list(runs))
    value, low, high, p = run_difference(runs["a0000000"], runs["c0000001"], kept, measure="zeroshot")
    per_task = [np.mean(drawn["c0000001"][t]["acc"]) - np.mean(drawn["a0000000"][t]["acc"]) for t in ("boolq", "rte")]
    assert value == pytest.approx(100 * np.mean(per_task))
    assert low < value < high < 0 and p < 0.05  # ten points lower on 600 documents
    kept["c0000001"].task_outcomes["rte"].doc_ids.reverse()  # other documents of the same task
    assert run_difference(runs["a0000000"], runs["c0000001"], kept, measure="zeroshot") == (
        "cannot be tested: the two runs were not evaluated on the same documents"
    )


@pytest.mark.asyncio
async def test_the_paper_view_shows_zero_shot_intervals_and_verdicts(store, no_color):
    from rich.console import Console

    clock = store.clock_
    runs = [("wanda", seed, 0.7) for seed in range(3)] + [("ria", seed, 0.6) for seed in range(3)]
    runs += [("ace", seed, 0.7) for seed in range(3)] + [("magnitude", 0, 0.69)]
    for number, (method, seed, accuracy) in enumerate(runs):
        tasks, kept = outcomes(number, accuracy)
        run = RunConfig(model="org/tiny", method=method, sparsity="0.5", seed=seed, evals=["zeroshot"])
        result = {"calibration": None if method == "magnitude" else C4, "task_outcomes": kept}
        run_id = f"{method[0]}000{number:04d}"
        insert_run(store, clock, run_id, run, created=clock.now + 10, ppl=None, zeroshot=tasks, result=result)
    add(store, clock, "s0000099", method="sparsegpt", shift=0.1)  # perplexity only: in the perplexity table
    async with results_screen(store, len(runs) + 1) as (pilot, results):
        await pilot.press("v")
        console = Console(width=78, file=io.StringIO(), record=True, no_color=no_color)
        console.print(results.paper_table())
        lines = console.export_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Mean zero-shot accuracy"))
    assert any(line.startswith("WikiText-2 perplexity") for line in lines[:start])
    zero_shot = {line.split("│")[1].strip(): line for line in lines[start:] if line.count("│") > 2}
    cell = r"\d+\.\d\d(.) \[\d+\.\d\d, \d+\.\d\d\]( \(n=\d\))?"  # the mark beside its number
    marks = {row: re.search(cell, line) for row, line in zero_shot.items()}
    assert {row: mark.group(1) for row, mark in marks.items() if mark} == {
        "Wanda-16": "●",  # the best mean of the two drawn at 70%
        "CosP+VarP-16": "≈",  # drawn like Wanda: tied with it
        "RIA-16": "▼",  # ten points lower on the same documents
        "Magnitude": "≈",  # one point lower, no calibration data: one run is enough to test
    }
    assert "SparseGPT" not in "".join(zero_shot)


def add_length_study(store, shapes: list[tuple[int, int]]) -> None:
    """Wanda and RIA (shifted) with two seeds at each (windows, length) calibration."""
    for method, shift in (("wanda", 0.0), ("ria", 0.1)):
        for nsamples, seqlen in shapes:
            for seed in range(2):
                run_id = f"{method[0]}{seqlen:03d}00{seed:02d}"
                calibration = {**C4, "nsamples": nsamples, "seqlen": seqlen}
                add(
                    store,
                    store.clock_,
                    run_id,
                    method=method,
                    seed=seed,
                    shift=shift,
                    calibration=calibration,
                    seqlen=seqlen,
                    nsamples=nsamples,
                )


@pytest.mark.asyncio
async def test_the_pareto_view_draws_what_g_saves(store, tmp_path, no_color):
    from textual.widgets import ContentSwitcher, Static

    from acetui.app.widgets.plots import ParetoPlot

    add_length_study(store, [(8, 16), (8, 32), (4, 128)])
    async with results_screen(store, 12) as (pilot, results):
        await pilot.press("p", "x")  # the Pareto view, against calibration tokens
        assert results.query_one("#results-views", ContentSwitcher).current == "pareto-view"
        plot = results.query_one("#pareto-overlay", ParetoPlot)
        await pilot.pause()
        drawn = plot.render().plain
        caption = str(results.query_one("#pareto-caption", Static).render())
        assert "•Wanda" in caption and "xRIA" in caption  # each method its glyph, named in the caption
        assert "calibration tokens (samples x length), log" in drawn  # and x says what it is
        assert all(tick in drawn for tick in ("128", "256", "512"))  # 8 x 16, 8 x 32, 4 x 128 tokens
        shown = {line.name: line.points for line in plot._lines}
        await pilot.press("g")
        while not list((tmp_path / "exports").glob("acetui-pareto-*.tex")):
            await pilot.pause(0.1)
    figure = next((tmp_path / "exports").glob("acetui-pareto-*.tex")).read_text()
    assert "xlabel={calibration tokens" in figure
    saved = {}
    for block in figure.split("\\addplot")[1:]:
        name = re.search(r"addlegendentry\{(.*?)\}", block).group(1)
        saved[name] = [tuple(map(float, point)) for point in re.findall(r"\(([\d.e+]+), ([\d.e+]+)\) \+=", block)]
    assert saved == {name: [(x, float(coordinate(y))) for x, y, _, _ in points] for name, points in shown.items()}
    assert [x for x, _ in saved["Wanda"]] == [128, 256, 512]


@pytest.mark.asyncio
async def test_the_pareto_view_and_the_paired_difference_read_zero_shot_accuracy(store, tmp_path, monkeypatch):
    """z puts mean zero-shot accuracy on the Pareto view's quality axis (and in the file g saves); two
    selected runs scored on the same documents get their paired accuracy difference in the paper view."""
    from rich.console import Console

    from acetui.app.widgets.plots import ParetoPlot

    monkeypatch.setenv("ACETUI_EXPORT_DIR", str(tmp_path / "exports"))
    clock = store.clock_
    for number, (method, seqlen, accuracy) in enumerate((("wanda", 16, 0.7), ("wanda", 32, 0.72), ("ria", 16, 0.6))):
        tasks, kept = outcomes(number, accuracy)
        run = RunConfig(model="org/tiny", method=method, sparsity="0.5", seqlen=seqlen, evals=["zeroshot"])
        result = {"calibration": {**C4, "nsamples": 8, "seqlen": seqlen}, "task_outcomes": kept}
        insert_run(store, clock, f"{method[0]}{number:07d}", run, created=clock.now + 10, ppl=None, zeroshot=tasks,
                   result=result)  # fmt: skip
    async with results_screen(store, 3) as (pilot, results):
        await pilot.press("p", "z")
        await pilot.pause()
        lines, _, ylabel = results.pareto()
        assert ylabel == "mean zero-shot accuracy (%)"
        assert {line.name: len(line.points) for line in lines} == {"Wanda": 2, "RIA": 1}
        assert results.query_one("#pareto-overlay", ParetoPlot)._title.endswith("(higher is better)")
        await pilot.press("g")
        while not list((tmp_path / "exports").glob("acetui-pareto-*.tex")):
            await pilot.pause(0.1)
        await pilot.press("p", "v")
        results.selected = {"w0000000", "r0000002"}
        console = Console(width=200, file=io.StringIO(), record=True)
        console.print(results.paper_table())
        paired = [line for line in console.export_text().splitlines() if line.startswith("Paired difference")]
    figure = next((tmp_path / "exports").glob("acetui-pareto-*.tex")).read_text()
    assert "ylabel={mean zero-shot accuracy" in figure
    assert len(paired) == 1  # no perplexity was measured: the accuracy line alone
    assert "RIA-16 0.5 r000 − Wanda-16 0.5 w000: -" in paired[0] and "points of mean accuracy" in paired[0]
    assert "same documents" in paired[0]


def test_figures_draw_each_method_with_its_intervals(store, tmp_path, monkeypatch, capsys):
    import importlib.util
    import re

    add_length_study(store, [(8, 16), (8, 32)])
    tex = tmp_path / "pareto.tex"
    code, out, err = cli(monkeypatch, capsys, "figure", "pareto", "--x", "tokens", "-o", tex, "--store", store.path)
    assert code == 0, err
    text = tex.read_text()
    for environment in ("tikzpicture", "axis"):
        assert text.count(f"\\begin{{{environment}}}") == text.count(f"\\end{{{environment}}}") == 1
    assert text.count("\\addplot") == 2 and "\\addlegendentry{Wanda}" in text and "\\addlegendentry{RIA}" in text
    points = re.findall(r"\(([\d.e+]+), ([\d.e+]+)\) \+= \(0, ([\d.e+-]+)\) -= \(0, ([\d.e+-]+)\)", text)
    assert [float(x) for x, *_ in points] == [128, 256, 128, 256]  # 8 samples x 16 and x 32 tokens
    assert all(float(up) > 0 and float(down) > 0 for *_, up, down in points)
    png = tmp_path / "seqlen.png"
    code, _, err = cli(monkeypatch, capsys, "figure", "seqlen", "-o", png, "--store", store.path)
    if importlib.util.find_spec("matplotlib") is None:
        assert code == 2 and "pip install 'acetui[figures]'" in err
    else:
        assert code == 0 and png.read_bytes().startswith(b"\x89PNG")
    code, _, err = cli(monkeypatch, capsys, "figure", "bars", "-o", tex, "--store", store.path)
    assert code == 2 and "Unknown figure 'bars'; choose one of: pareto, seqlen" in err


def test_a_method_without_calibration_tokens_is_named_not_drawn_at_zero_on_a_log_axis(
    store, tmp_path, monkeypatch, capsys
):
    """Magnitude reads no calibration tokens: the figure put it at x = 0 under xmode=log, which pgfplots
    drops without a word. It is left out, and the file and the command say so."""
    clock = store.clock_
    for seed in range(2):
        add(store, clock, f"a00000{seed:02d}", seed=seed)
    add(store, clock, "m0000009", method="magnitude", calibration=None, shift=1.5)
    tex = tmp_path / "pareto.tex"
    code, _, err = cli(monkeypatch, capsys, "figure", "pareto", "--x", "tokens", "-o", tex, "--store", store.path)
    assert code == 0, err
    text = tex.read_text()
    assert "\\addlegendentry{Magnitude}" not in text and "\n  (0, " not in text
    assert "% Not on the log x axis (at x = 0): Magnitude." in text
    assert "Not on the log x axis (at x = 0): Magnitude." in err
    code, _, err = cli(monkeypatch, capsys, "figure", "pareto", "-o", tmp_path / "s.tex", "--store", store.path)
    assert code == 0 and "Magnitude" in (tmp_path / "s.tex").read_text() and "Not on" not in err  # seconds: drawn
    only = ["--runs", "m0000009"]  # magnitude alone: nothing on a log axis of tokens, and no empty figure
    code, _, err = cli(monkeypatch, capsys, "figure", "pareto", "--x", "tokens", "-o", tmp_path / "m.tex", *only,
                       "--store", store.path)  # fmt: skip
    assert code == 2 and "none off x = 0 on the log axis" in err and not (tmp_path / "m.tex").exists()


def test_a_length_study_with_fewer_long_windows_keeps_one_series_per_method(store, tmp_path, monkeypatch, capsys):
    import re

    add_length_study(store, [(8, 16), (8, 32), (4, 128)])  # the matched-compute study's shape
    tex = tmp_path / "pareto.tex"
    code, _, err = cli(monkeypatch, capsys, "figure", "pareto", "--x", "tokens", "-o", tex, "--store", store.path)
    assert code == 0, err
    text = tex.read_text()
    assert text.count("\\addplot") == 2
    assert "\\addlegendentry{Wanda}" in text and "\\addlegendentry{RIA}" in text
    points = re.findall(r"\(([\d.e+]+), [\d.e+]+\) \+=", text)
    assert [float(x) for x in points] == [128, 256, 512] * 2
    table = comparison(store.list_runs(), columns="seqlen")
    assert table.rows == ["Wanda", "RIA"] and [h for _, h in table.columns] == ["8x16", "8x32", "4x128"]


def test_the_layers_figure_draws_each_runs_layers(store, tmp_path, monkeypatch, capsys):
    add(store, store.clock_, "a0000001")
    add(store, store.clock_, "b0000002", method="ria")
    tex = tmp_path / "layers.tex"
    code, _, err = cli(monkeypatch, capsys, "figure", "layers", "-o", tex, "--store", store.path)
    assert code == 0, err
    text = tex.read_text()
    assert text.count("\\addplot") == 2 and "xmode=normal" in text
    assert "\\addlegendentry{Wanda-16 0.5 a000 sparsity}" in text
    assert "(0, 0.5)" in text and "(1, 0.5)" in text  # two layers at the sparsity the runs recorded


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda w: {**w, "nll": w["nll"][:-1]}, "31 losses for 32 windows"),
        (lambda w: {**w, "tokens": [0] * len(w["tokens"])}, "a window of 0 tokens"),
        (lambda w: {**w, "nll": [float("nan")] * len(w["nll"])}, "infinite or NaN"),  # the model's, not the store's
        (lambda w: {"nll": "broken"}, "cannot be read"),
    ],
    ids=["fewer-losses", "zero-tokens", "nan", "unreadable"],
)
def test_a_damaged_window_record_makes_its_run_untested_with_the_reason(store, monkeypatch, capsys, damage, reason):
    clock = store.clock_
    for seed in range(2):
        add(store, clock, f"a00000{seed:02d}", seed=seed)
        add(store, clock, f"b00000{seed + 10:02d}", seed=seed, method="ria", shift=0.15)
    with sqlite3.connect(store.path) as db:
        [(text,)] = db.execute("SELECT record FROM evidence WHERE run_id = 'b0000010'").fetchall()
        db.execute("UPDATE evidence SET record = ? WHERE run_id = 'b0000010'", (json.dumps(damage(json.loads(text))),))
    db.close()
    found = verdicts(store)
    assert found["RIA-16"].verdict == "untested"
    assert ("damaged" in found["RIA-16"].note) != (reason == "infinite or NaN") and reason in found["RIA-16"].note
    code, out, err = cli(monkeypatch, capsys, "verdict", "--store", store.path)
    assert code == 0 and "untested" in out and reason in out and "Traceback" not in err
    code, out, _ = cli(monkeypatch, capsys, "runs", "show", "b0000010", "--store", store.path)
    assert code == 0 and reason in out


def test_a_repeated_seed_is_one_sample_and_every_table_says_so(store, monkeypatch, capsys, tmp_path):
    """The issue's case: the same one-seed grid run twice into one store is one seed, not two."""
    clock = store.clock_
    for repeat in range(2):  # each run of a seed differs a little (another run id: another noise draw)
        add(store, clock, f"a00000{repeat:02d}", seed=0)
        add(store, clock, f"b00000{repeat + 10:02d}", seed=0, method="ria", shift=0.15)
        add(store, clock, f"c00000{repeat + 20:02d}", method="magnitude", calibration=None, shift=1.5)
    found = verdicts(store)
    assert found["RIA-16"].verdict == "unknown" and found["RIA-16"].p is None  # not "worse" on n=2
    table = comparison(store.list_runs())
    ria = table.cells[("RIA-16", table.columns[0])]
    assert (
        len(ria.values) == 1
        and [r.id for r in ria.runs] == ["b0000011"]
        and [r.id for r in ria.repeats] == ["b0000010"]
    )
    assert len(table.cells[("Magnitude", table.columns[0])].values) == 1  # no calibration: every run is one sample
    code, out, _ = cli(monkeypatch, capsys, "verdict", "--store", store.path, "--json")
    data = json.loads(out)
    assert all(row["n"] == 1 for row in data["columns"][0]["rows"])
    assert "3 repeated run(s) of a seed already counted are left out" in data["repeats"]
    code, out, _ = cli(monkeypatch, capsys, "export", "--store", store.path, "--format", "markdown", "--ci", "pm")
    assert "(n=2)" not in out and "repeated run(s) of a seed" in out
    code, out, _ = cli(monkeypatch, capsys, "export", "--store", store.path)
    assert "repeat of seed 0, not counted" in out
    figure = tmp_path / "f.tex"
    assert cli(monkeypatch, capsys, "figure", "pareto", "-o", str(figure), "--store", store.path)[0] == 0
    assert "RIA (repeats of a seed counted once)" in figure.read_text()


def test_a_repeat_of_a_seed_that_disagrees_is_named_with_both_values(store, monkeypatch, capsys):
    """A seed run again replaced its first run in every table silently, whatever it measured: a re-run on
    another machine or version that moved the perplexity by a fifth read as the method's number. The same
    seed should give the same number; where the two would print apart, the note names both."""
    clock = store.clock_
    add(store, clock, "a0000001", seed=0)
    add(store, clock, "a0000002", seed=1)
    add(store, clock, "b0000001", method="ria", seed=0)
    add(store, clock, "b1000001", method="ria", seed=0)  # the same losses again: agrees to the digit
    add(store, clock, "a0000011", seed=0, shift=0.2)  # Wanda's seed 0 again, 22% higher
    runs = store.list_runs()
    note = comparison(runs).repeats_note()
    first, again = (np.exp(np.mean(losses(seed, shift)["nll"]) / SEQLEN) for seed, shift in ((1, 0.0), (11, 0.2)))
    assert note.startswith("2 repeated run(s) of a seed already counted are left out") and note.endswith(
        f"1 of them differ from the run counted for their seed: Wanda-16 seed 0: {first:.2f} (run a0000001), "
        f"counted {again:.2f} (run a0000011)."
    )
    code, out, _ = cli(monkeypatch, capsys, "export", "--store", store.path, "--format", "markdown")
    assert code == 0 and f"{first:.2f} (run a0000001)" in out


def test_runs_evaluated_on_other_windows_are_never_ranked_against_each_other(store, monkeypatch, capsys):
    """The issue's case: Wanda and Magnitude evaluated on 32-token windows, RIA on 64-token windows (its
    perplexity lower): RIA was bolded as the column's best and the others got ratios to it."""
    clock = store.clock_
    for seed in range(2):
        add(store, clock, f"a00000{seed:02d}", seed=seed)
        add(store, clock, f"b00000{seed + 10:02d}", seed=seed, method="ria", shift=-0.5, windows=(16, 64))
    add(store, clock, "c0000020", method="magnitude", calibration=None, shift=1.5)
    table = judge(comparison(store.list_runs()), store.evidence([r.id for r in store.list_runs()]))
    assert table.models == ["tiny, eval 32x16", "tiny, eval 16x64"]
    ria_column, wanda_column = ("tiny, eval 16x64", "50%"), ("tiny, eval 32x16", "50%")
    assert table.best == {("RIA-16", ria_column), ("Wanda-16", wanda_column)}
    assert table.verdicts[("Magnitude", wanda_column)].ratio > 1
    assert ("RIA-16", wanda_column) not in table.cells and ("Wanda-16", ria_column) not in table.cells
    code, out, _ = cli(monkeypatch, capsys, "verdict", "--store", store.path)
    assert code == 0 and "50% (tiny, eval 32x16)" in out and "50% (tiny, eval 16x64)" in out
    code, out, _ = cli(monkeypatch, capsys, "export", "--store", store.path, "--format", "markdown")
    assert out.count("**") == 4  # one best per evaluation, RIA's not over Wanda's
    assert "tiny, eval 32x16 50%" in out and "tiny, eval 16x64 50%" in out


def test_runs_evaluated_on_another_copy_of_the_test_text_are_never_ranked_or_paired_with_these(
    store, monkeypatch, capsys
):
    """Perplexity windows of the same count and length cut from another WikiText-2 text (an edited copy in
    another ACETUI_DATA_DIR) shared a column and were paired window by window. A run recorded before the
    text was kept is counted with the text its model's other runs read."""
    clock = store.clock_
    for seed in range(2):
        add(store, clock, f"a00000{seed:02d}", seed=seed, text="aaaaaaaaaaaaaaaa")
        add(store, clock, f"b00000{seed + 10:02d}", seed=seed, method="ria", shift=-0.5, text="bbbbbbbbbbbbbbbb")
    add(store, clock, "c0000020", method="magnitude", calibration=None, shift=1.5, text="aaaaaaaaaaaaaaaa")
    runs = store.list_runs()
    table = judge(comparison(runs), store.evidence([r.id for r in runs]))
    assert table.models == ["tiny, eval 32x16 text aaaaaa", "tiny, eval 32x16 text bbbbbb"]
    assert {row for row, _ in table.best} == {"Wanda-16", "RIA-16"}  # one best per text: RIA's not over Wanda's
    first, other = (next(r for r in runs if r.id == run_id) for run_id in ("a0000000", "b0000010"))
    said = run_difference(first, other, store.evidence([first.id, other.id]))
    assert said == "cannot be tested: the two runs were evaluated on different copies of the WikiText-2 test text"
    code, out, _ = cli(monkeypatch, capsys, "export", "--store", store.path, "--format", "markdown")
    assert code == 0 and out.count("**") == 4, out

    # runs recorded before the text was kept: counted with the one text their model's other runs read, apart
    # where those read two
    add(store, clock, "d0000030", method="ria", seed=2, shift=-0.5)
    add(store, clock, "e0000040", model="org/other", seed=0, text="cccccccccccccccc")
    add(store, clock, "e0000041", model="org/other", seed=1)
    table = comparison(store.list_runs())
    assert table.models == [
        "tiny, eval 32x16 text aaaaaa",
        "tiny, eval 32x16 text bbbbbb",
        "tiny, eval 32x16 text unrecorded",
        "other",
    ]
    assert table.cells[("RIA-16", ("tiny, eval 32x16 text unrecorded", "50%"))].runs[0].id == "d0000030"
    assert len(table.cells[("Wanda-16", ("other", "50%"))].values) == 2


def test_seeds_pruned_on_a_cpu_and_on_a_gpu_are_rows_apart(store):
    """A seed pruned on the CPU and two on GPUs of the same dtype shared a cell: its prune seconds were the
    mean of a CPU's and a GPU's, and the Pareto against seconds placed the method between the two."""
    clock = store.clock_
    add(store, clock, "a0000000", seed=0, device="cpu")
    add(store, clock, "a0000001", seed=1, device="cuda:0")
    add(store, clock, "a0000002", seed=2, device="cuda:1")  # another GPU of the same kind: the same row
    table = comparison(store.list_runs())
    assert sorted(table.rows) == ["Wanda-16 (on cpu)", "Wanda-16 (on cuda)"]
    column = table.columns[0]
    assert [run.id for run in table.cells[("Wanda-16 (on cuda)", column)].runs] == ["a0000001", "a0000002"]


def test_two_models_of_one_name_are_never_ranked_or_paired_together(store):
    """Another quantisation in another folder, named as the first: its runs were ranked in the first's
    column (its best taken for the column's), and two runs of them were paired window by window."""
    clock = store.clock_
    for seed in range(2):
        add(store, clock, f"a00000{seed:02d}", seed=seed, model="/models/q4/tiny")
        add(store, clock, f"b00000{seed + 10:02d}", seed=seed, method="ria", model="/models/q8/tiny", shift=-0.5)
    add(store, clock, "c0000020", method="magnitude", calibration=None, model="org/tiny", shift=1.5)
    runs = store.list_runs()
    table = judge(comparison(runs), store.evidence([r.id for r in runs]))
    assert sorted(table.models) == ["org/tiny", "q4/tiny", "q8/tiny"]
    from acetui_core.analysis.rowlabels import model_columns

    gguf, folder = (replace(runs[0], id=run_id) for run_id in ("x1", "x2"))
    gguf.config, folder.config = (replace(runs[0].config, model=model) for model in ("/m/x.gguf", "/m/x"))
    assert set(model_columns([gguf, folder]).values()) == {"/m/x.gguf", "/m/x"}  # never one name for two
    assert {row for row, _ in table.best} == {"Wanda-16", "RIA-16", "Magnitude"}
    first, other = (next(r for r in runs if r.id == run_id) for run_id in ("a0000000", "b0000010"))
    assert "different models" in run_difference(first, other, store.evidence([first.id, other.id]))


def test_a_figure_draws_each_sparsity_of_a_method_as_a_series_of_its_own(store):
    """With the sparsity a column group of its own, Wanda at 0.5 and at 2:4 became one line through both."""
    from acetui_core.analysis.figures import figure_series

    clock = store.clock_
    for number, sparsity in enumerate(("0.5", "2:4")):
        add(store, clock, f"a00000{number:02d}", sparsity=sparsity, shift=0.3 * number)
    runs = store.list_runs()
    lines, _, _ = figure_series(runs, store.evidence([r.id for r in runs]), "pareto")
    assert sorted((line.name, len(line.points)) for line in lines) == [("Wanda (2:4)", 1), ("Wanda (50%)", 1)]
