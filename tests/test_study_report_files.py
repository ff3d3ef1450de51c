"""The files of ``acetui study report``: a report of runs that have no perplexity has its zero-shot tables
and figures, and one of runs with no evaluation neither (its summary lists the runs); a refused report
makes nothing, and one cut short leaves a folder ``--overwrite`` can redo; the study file's copy is byte
for byte; a cell without an interval is drawn without an error bar (the report's runs here are recorded
through the store's API: no model runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runhelpers import Clock, cli, insert_run

from acetui_core.analysis.figures import Series, to_pgfplots
from acetui_core.storage.store import Store
from acetui_core.studies import studyreport
from acetui_core.studies.study import load_study
from acetui_core.studies.studyreport import MANIFEST

TEXTS = {"environment.md", "study.toml", "summary.md", MANIFEST}
ZERO_SHOT_TABLE = {f"table-zeroshot-mean.{suffix}" for suffix in ("tex", "md", "csv")} | {"verdicts-zeroshot-mean.txt"}


def _recorded_study(
    folder: Path, model: Path, calib: str, evals: str, *, newline: str = "\n", more: tuple[str, ...] = ()
) -> tuple[Path, Path]:
    """A study of Wanda (two seeds) and magnitude, its three cells finished in a store: with zero-shot results
    alone (``evals = "zeroshot"``), or nothing measured (``"none"``), or a perplexity (``"wikitext2"``);
    ``more``: lines of other settings."""
    from test_verdicts import outcomes

    lines = [
        f'model = "{model}"',
        'method = ["wanda", "magnitude"]',
        "seed = [0, 1]",
        f'calib = "{calib}"',
        "nsamples = 4",
        f'evals = "{evals}"',
        'tasks = "boolq,rte"',
        *more,
    ]
    (folder / "study").mkdir()
    study = folder / "study" / "study.toml"  # a folder of its own: a report may go into it
    study.write_bytes(newline.join([*lines, ""]).encode())
    clock = Clock()
    store = Store(folder / "runs.db", clock=clock)
    for number, cell in enumerate(load_study(study).cells(store.path)):
        tasks, kept = outcomes(number, 0.6 + 0.05 * number) if evals == "zeroshot" else (None, {})
        insert_run(
            store,
            clock,
            f"c{number:07d}",
            cell,
            created=1_700_000_000.0 + 60 * number,
            ppl=30.0 + number if evals == "wikitext2" else None,
            zeroshot=tasks,
            result={"task_outcomes": kept} if tasks else None,
        )
    return study, store.path


def _files(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*")}


ZERO_SHOT_FIGURES = {"figures"} | {
    f"figures/accuracy_{name}.tex" for name in ("pareto_seconds", "pareto_tokens", "vs_seqlen")
}


@pytest.mark.parametrize(("evals", "tables"), [("zeroshot", ZERO_SHOT_TABLE | ZERO_SHOT_FIGURES), ("none", set())])
def test_a_study_without_perplexity_is_reported_with_its_zero_shot_figures_or_none(
    tmp_path, monkeypatch, capsys, make_tiny_model, calib_file, evals, tables
):
    """It was refused ("nothing to draw", exit 2) after the tables were written, with no list of the report's
    files: every later --overwrite into that folder was refused too. Then its zero-shot accuracies were in
    its tables only: every figure was of perplexity."""
    study, store = _recorded_study(tmp_path, make_tiny_model("llama"), calib_file, evals)
    report = tmp_path / "report"
    args = ("study", "report", str(study), "-o", str(report), "--store", str(store))
    code, out, err = cli(monkeypatch, capsys, *args)
    assert (code, err) == (0, "")
    assert _files(report) == TEXTS | tables  # no evaluation: no figures/, not even empty
    shown = (TEXTS | tables) - {MANIFEST, "figures"}
    assert sorted(out.splitlines()) == sorted(str(report / name) for name in shown)
    if evals == "zeroshot":  # each method's point is its table cell: the mean accuracy over its seeds
        import csv
        import re

        figure = (report / "figures/accuracy_pareto_seconds.tex").read_text()
        assert "ylabel={mean zero-shot accuracy (\\%)}" in figure
        drawn = [float(y) for y in re.findall(r"\(30, ([0-9.]+)\)", figure)]
        with open(report / "table-zeroshot-mean.csv") as table:
            cells = [float(row["value"]) for row in csv.DictReader(table)]
        assert drawn == pytest.approx(list(dict.fromkeys(cells)), abs=1e-6) and len(drawn) == 2
    code, _, err = cli(monkeypatch, capsys, *args, "--overwrite")
    assert (code, err) == (0, "")
    assert _files(report) == TEXTS | tables


@pytest.mark.parametrize("more", [(), ('moe_calibration = "all"',)], ids=["plain", "setting-the-model-put-back"])
def test_status_and_report_of_a_finished_study_need_no_model(
    tmp_path, monkeypatch, capsys, make_tiny_model, calib_file, more
):
    """Once the model's folder was moved away after the study, status and report stopped at "Model path ...
    does not exist." (exit 2), though the report is the store's. They read the stored runs, saying the model's
    files went unchecked; a run needs the model and is refused. ``moe_calibration`` on a dense model: the
    model put it back to its default in the runs, so it is theirs that counts."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(make_tiny_model("llama"), model)
    study, store = _recorded_study(tmp_path, model, calib_file, "wikitext2", more=more)
    shutil.rmtree(model)
    note = (
        f"The model {model} does not exist any more: its cells are matched to the store's runs by their settings "
        f"alone, its files not compared with those the runs read (acetui study run needs it back).\n"
    )
    code, out, err = cli(monkeypatch, capsys, "study", "status", str(study), "--store", str(store), "--json")
    assert (code, err) == (0, note)
    assert [cell["state"] for cell in json.loads(out)] == ["done"] * 3
    report = tmp_path / "report"
    code, out, err = cli(monkeypatch, capsys, "study", "report", str(study), "-o", str(report), "--store", str(store))
    assert (code, err) == (0, note)
    table = (report / "table-ppl.md").read_text()
    assert "| Wanda-16  | **30.50** ± 0.71 (n=2) |" in table and "| Magnitude |                 32.00? |" in table
    code, _, err = cli(monkeypatch, capsys, "study", "run", str(study), "--store", str(store))
    assert (code, err) == (2, f"acetui: study.toml: Model path {model} does not exist.\n")


def test_a_done_cell_is_listed_with_its_finished_run(tmp_path, monkeypatch, capsys, make_tiny_model, calib_file):
    """A run of a done cell's settings stopped since (acetui prune, then SIGTERM) was the one status named,
    with its error, and --json's "run" of the done cell was that cancelled run: a script following it
    found no result. The cell is listed with the finished run its report reads."""
    import time

    study, store = _recorded_study(tmp_path, make_tiny_model("llama"), calib_file, "wikitext2")
    clock = Clock()
    opened = Store(store, clock=clock)
    first = load_study(study).cells(store)[0]
    stopped = "Stopped by SIGTERM during the WikiText-2 evaluation."
    later = time.time() + 60  # after the calibration file was written: a run of the cell as it is now
    insert_run(opened, clock, "d0000000", first, created=later, status="cancelled", error=stopped)
    args = ("study", "status", str(study), "--store", str(store))
    code, out, err = cli(monkeypatch, capsys, *args, "--json")
    assert code == 0, err
    assert [(cell["state"], cell["run"]) for cell in json.loads(out)][0] == ("done", "c0000000")
    code, out, _ = cli(monkeypatch, capsys, *args)
    assert out.splitlines()[0].split(None, 2)[:2] == ["done", "c0000000"] and stopped not in out


def test_the_summary_of_a_study_that_evaluates_nothing_lists_its_runs(
    tmp_path, monkeypatch, capsys, make_tiny_model, calib_file
):
    """summary.md introduced "Each row against its column's best: ..." with no row after it: a study of
    ``evals = "none"`` has no numbers to compare. It says so, and lists the runs."""
    model = make_tiny_model("llama")
    study, store = _recorded_study(tmp_path, model, calib_file, "none")
    report = tmp_path / "report"
    code, _, err = cli(monkeypatch, capsys, "study", "report", str(study), "-o", str(report), "--store", str(store))
    assert (code, err) == (0, "")
    assert (report / "summary.md").read_text() == (
        "# Summary\n\nAll 3 cells of the study have a finished run.\n\n"
        'No run of the study was evaluated (`evals = "none"`), so there is nothing to compare: no tables, '
        "verdicts or figures. Its finished runs:\n\n"
        f"- c0000000: Wanda-16 at 0.5 on {model.name}, {calib_file}, seed 0\n"
        f"- c0000001: Wanda-16 at 0.5 on {model.name}, {calib_file}, seed 1\n"
        f"- c0000002: Magnitude at 0.5 on {model.name}, no calibration\n"
    )


def test_a_report_cut_short_leaves_a_folder_overwrite_can_redo(
    tmp_path, monkeypatch, capsys, make_tiny_model, calib_file
):
    """A figure that could not be written (a full disk) left the tables without the report's list of its files,
    and --overwrite then refused the folder as not a report's."""
    study, store = _recorded_study(tmp_path, make_tiny_model("llama"), calib_file, "wikitext2")
    report = tmp_path / "report"
    args = ("study", "report", str(study), "-o", str(report), "--store", str(store))

    def disk_full(*_, **__):
        raise OSError(28, "No space left on device", "figure")

    with monkeypatch.context() as patched:
        patched.setattr(studyreport, "write_figure", disk_full)
        code, _, err = cli(monkeypatch, capsys, *args)
    assert code == 2 and err.startswith("acetui: ") and "No space left on device" in err, err
    assert (report / MANIFEST).is_file()
    code, _, err = cli(monkeypatch, capsys, *args, "--overwrite")
    assert (code, err) == (0, "")
    assert {"figures/pareto_seconds.tex", "table-ppl.md"} <= _files(report)


def test_a_refused_report_makes_nothing(tmp_path, monkeypatch, capsys, make_tiny_model, calib_file):
    """A report refused for a file of the user's in its folder, or for the study file in it, left an empty
    figures/ folder behind."""
    study, store = _recorded_study(tmp_path, make_tiny_model("llama"), calib_file, "wikitext2")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "summary.md").write_text("mine\n")
    code, _, err = cli(monkeypatch, capsys, "study", "report", str(study), "-o", str(mine), "--store", str(store))
    assert (code, err) == (2, f"acetui: -o {mine / 'summary.md'} exists; pass --overwrite to replace it.\n")
    assert _files(mine) == {"summary.md"}
    args = ("study", "report", str(study), "-o", str(study.parent), "--store", str(store))
    code, _, err = cli(monkeypatch, capsys, *args)
    assert code == 2 and "is the study file" in err, err
    assert _files(study.parent) == {"study.toml"}


def test_the_reports_study_file_is_the_file_byte_for_byte(tmp_path, monkeypatch, capsys, make_tiny_model, calib_file):
    """A study file with CRLF line ends was copied with LF ones."""
    study, store = _recorded_study(tmp_path, make_tiny_model("llama"), calib_file, "wikitext2", newline="\r\n")
    report = tmp_path / "report"
    code, _, err = cli(monkeypatch, capsys, "study", "report", str(study), "-o", str(report), "--store", str(store))
    assert (code, err) == (0, "")
    assert (report / "study.toml").read_bytes() == study.read_bytes()
    environment = (report / "environment.md").read_bytes()
    assert b"\r" not in environment and b'method = ["wanda", "magnitude"]\nseed = [0, 1]\n' in environment


def test_a_cell_without_an_interval_is_drawn_without_an_error_bar(
    tmp_path, monkeypatch, capsys, make_tiny_model, calib_file
):
    """A cell with no interval (no evaluation windows kept, one window, one seed) was drawn with a bar of
    no width, ``+= (0, 0) -= (0, 0)``: its value drawn as exact, where the table says "–"."""
    figure = to_pgfplots([Series("Wanda", [(1.0, 30.0, 30.0, 30.0), (2.0, 31.0, 29.5, 33.0)])], "x", "y", log_x=False)
    points = [line for line in figure.splitlines() if line.startswith("  (")]
    assert points == ["  (1, 30)", "  (2, 31) += (0, 2) -= (0, 1.5)"]  # pgfplots draws no bar for the first
    study, store = _recorded_study(tmp_path, make_tiny_model("llama"), calib_file, "wikitext2")
    report = tmp_path / "report"
    code, _, err = cli(monkeypatch, capsys, "study", "report", str(study), "-o", str(report), "--store", str(store))
    assert (code, err) == (0, "")
    for name in ("pareto_seconds", "ppl_vs_source"):  # no window kept; magnitude's one seed
        text = (report / "figures" / f"{name}.tex").read_text()
        assert "+= (0, 0) -= (0, 0)" not in text and "  (" in text
