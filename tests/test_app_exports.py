"""The app's exports and what it says about them: the folders an export is refused in, the paper table in
the CLI's layout whatever the Results table's sort, notices that count what the table holds and paths that
read at 80 columns."""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import re
import sqlite3
from pathlib import Path

import pytest
from rich.console import Console
from runhelpers import Clock, cli, insert_run, pilot_wait_until
from textual.widgets import DataTable, Static

from acetui.app import exports, make_app, paper
from acetui.app.screens import results_export
from acetui_core.run.config import RunConfig
from acetui_core.storage.store import Store

SIZE = (80, 24)
T0 = 1_700_000_000.0


def toasts(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


def add(store: Store, run_id: str, method: str, sparsity: str, ppl: float, *, seed: int = 0, at: float = 0.0) -> None:
    config = RunConfig(model="tiny-llama", method=method, sparsity=sparsity, seed=seed)
    insert_run(store, Clock(), run_id, config, created=T0 + at, ppl=ppl)


@pytest.fixture
def store(tmp_path) -> Store:
    """Four finished runs, recorded in an order that neither the PPL sort nor the Sparsity sort follows."""
    store = Store(tmp_path / "store" / "runs.db")
    add(store, "aaaa0001", "wanda", "0.5", 9.0, at=1)
    add(store, "bbbb0002", "magnitude", "0.5", 30.0, at=2)
    add(store, "cccc0003", "wanda", "2:4", 12.0, at=3)
    add(store, "dddd0004", "ace", "2:4", 8.0, at=4)
    return store


@contextlib.asynccontextmanager
async def results(store: Store, rows: int = 4):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f3")
        await pilot_wait_until(pilot, lambda: app.screen.query_one("#results").row_count == rows, "the results")
        yield app, pilot


# ---- 1. the export folder ----


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["the working folder", "the run store's folder"])
async def test_an_export_is_refused_in_the_working_folder_and_the_stores_folder(store, tmp_path, monkeypatch, where):
    work = tmp_path / "checkout"
    work.mkdir()
    monkeypatch.chdir(work)
    folder = work if where == "the working folder" else store.folder
    monkeypatch.setenv(exports.EXPORT_DIR_ENV, "." if folder == work else str(folder))
    before = sorted(folder.iterdir())
    async with results(store) as (app, pilot):
        for key in ("e", "l"):
            await pilot.press(key)
            await pilot_wait_until(pilot, lambda: any("Could not save" in t for t in toasts(app)), "the refusal")
        refusals = [t for t in toasts(app) if "Could not save" in t]
        assert len(refusals) == 2 and f"is {where}" in refusals[0] and exports.EXPORT_DIR_ENV in refusals[0]
    assert sorted(folder.iterdir()) == before  # nothing written beside the store's database, nor in the checkout


@pytest.mark.asyncio
@pytest.mark.parametrize("under", [False, True])
async def test_an_export_folder_that_is_a_file_is_refused_in_a_sentence(store, monkeypatch, under):
    """``ACETUI_EXPORT_DIR`` naming a file (the run store, a log), or a folder under one: the notice read
    ``[Errno 17] File exists: '/tmp/x/runs.db'`` (or ``[Errno 20] Not a directory``)."""
    folder = store.path / "exports" if under else store.path
    monkeypatch.setenv(exports.EXPORT_DIR_ENV, str(folder))
    async with results(store) as (app, pilot):
        await pilot.press("e")
        await pilot_wait_until(pilot, lambda: any("Could not save" in t for t in toasts(app)), "the refusal")
    refusal = next(t for t in toasts(app) if "Could not save" in t)
    what = f"is under {store.path}, a file" if under else "is a file"
    assert refusal == (
        f"Could not save the export: The export folder {exports.EXPORT_DIR_ENV}={folder} {what}, not a folder; "
        f"{exports.EXPORT_DIR_ADVICE}"
    ), refusal
    assert store.path.is_file() and store.list_runs()


@pytest.mark.asyncio
@pytest.mark.parametrize("fails", ["choosing the file", "writing it"])
async def test_an_export_the_os_refuses_is_said_in_a_sentence(store, tmp_path, monkeypatch, fails):
    """A read-only export folder (or a full disk) refused the export as ``[Errno 13] Permission denied:
    '/x/acetui-....csv'``: the notice says it as the CLI does, the path and the reason."""
    monkeypatch.setenv(exports.EXPORT_DIR_ENV, str(tmp_path / "exports"))
    chosen = results_export.reserve_new_file

    def refused(folder, stem, suffix, *args):
        if fails == "choosing the file":
            raise PermissionError(13, "Permission denied", str(folder / f"{stem}{suffix}"))
        path = chosen(folder, stem, suffix, *args)
        path.unlink()
        path.mkdir()  # the write that follows fails as a read-only file would
        return path

    monkeypatch.setattr(results_export, "reserve_new_file", refused)
    async with results(store) as (app, pilot):
        await pilot.press("e")
        await pilot_wait_until(pilot, lambda: any("Could not save" in t for t in toasts(app)), "the refusal")
    refusal = next(t for t in toasts(app) if "Could not save" in t)
    reason = "Permission denied" if fails == "choosing the file" else "Is a directory"
    assert re.fullmatch(
        rf"Could not save the export\. Cannot use {tmp_path}/exports/acetui-[0-9-]+\.csv: {reason}\.", refusal
    )
    assert "Errno" not in refusal and store.list_runs()


@pytest.mark.asyncio
async def test_an_export_on_a_full_disk_leaves_no_file_cut_short(store, tmp_path, monkeypatch):
    """A full disk left the export cut mid-row under its own name (8192 bytes of a CSV), with a notice that
    named no file: now nothing is left, and the notice says which file could not be written and why."""
    folder = tmp_path / "exports"
    monkeypatch.setenv(exports.EXPORT_DIR_ENV, str(folder))
    real_open = builtins.open

    class FullDisk:
        """A file of the export folder that takes the first 100 characters, then has no room left."""

        def __init__(self, file):
            self.file = file

        def write(self, text: str) -> int:
            self.file.write(text[:100])
            self.file.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __getattr__(self, name):
            return getattr(self.file, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc_info) -> None:
            self.file.close()

    def in_export_folder(opened) -> bool:
        if isinstance(opened, int):  # an open descriptor: the file of the folder it is
            return any(os.path.samestat(os.fstat(opened), entry.stat()) for entry in folder.iterdir())
        return Path(opened).parent == folder

    def full_disk_open(file, mode="r", *args, **kwargs):
        opened = real_open(file, mode, *args, **kwargs)
        return FullDisk(opened) if "w" in mode and in_export_folder(file) else opened

    monkeypatch.setattr(builtins, "open", full_disk_open)
    async with results(store) as (app, pilot):
        await pilot.press("e")
        await pilot_wait_until(pilot, lambda: any("Could not save" in t for t in toasts(app)), "the refusal")
    assert list(folder.iterdir()) == [], "no file, whole or cut short, and no partial beside it"
    refusal = next(t for t in toasts(app) if "Could not save" in t)
    assert re.fullmatch(
        rf"Could not save the export\. Cannot use {folder}/acetui-[0-9-]+\.csv: No space left on device\.", refusal
    ), refusal


@pytest.mark.asyncio
async def test_an_export_folder_under_the_working_folder_is_taken(store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(exports.EXPORT_DIR_ENV, "exports")
    async with results(store) as (app, pilot):
        await pilot.press("e")
        await pilot_wait_until(pilot, lambda: list((tmp_path / "exports").glob("*.csv")), "the CSV")


# ---- 2. the paper table in the CLI's layout ----


@pytest.mark.asyncio
async def test_the_apps_latex_table_is_the_clis_whatever_the_sort(store, tmp_path, monkeypatch, capsys):
    code, cli_table, _ = cli(monkeypatch, capsys, "export", "--format", "latex", "--store", str(store.path))
    assert code == 0 and re.search(r"Method & 50\\% & 2:4", cli_table)
    monkeypatch.setenv(exports.EXPORT_DIR_ENV, str(tmp_path / "exports"))
    async with results(store) as (app, pilot):
        tables: list[str] = []
        for sort in ("", "S", "r"):  # PPL ↑ (the default), Sparsity ↑, Sparsity ↓
            if sort:
                await pilot.press(sort)
            await pilot.press("l")
            await pilot_wait_until(
                pilot, lambda n=len(tables) + 1: len(list((tmp_path / "exports").glob("*.tex"))) == n, "the table"
            )
            tables.append(sort)
        assert "by Sparsity ↓" in str(app.screen.query_one("#results-info").render())
    for saved in (tmp_path / "exports").glob("*.tex"):
        assert saved.read_text() == cli_table, saved.name


def test_the_paper_view_follows_the_store_not_the_order_it_is_given(store):
    runs = store.list_runs()
    kept = store.evidence([r.id for r in runs])

    def text(given) -> str:
        console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
        console.print(paper.view(given, kept, "listed", []))
        return console.export_text()

    in_store_order = text(runs)
    assert in_store_order.index("50%") < in_store_order.index("2:4")
    assert in_store_order.index("Wanda") < in_store_order.index("Magnitude")
    for shuffled in (runs[::-1], sorted(runs, key=lambda r: r.ppl or 0)):
        assert text(shuffled) == in_store_order


@pytest.mark.asyncio
async def test_zero_shot_accuracy_over_part_of_a_task_is_marked_as_partial_perplexity_is(store):
    """Results showed 50.0 for 4 examples a task exactly as a full task's accuracy; the paper view marked it."""
    task = {"acc_stderr": 0.1, "acc_norm": None, "acc_norm_stderr": None, "total": 3270, "source": "local"}
    for run_id, n in (("eeee0005", 4), ("ffff0006", 3270)):
        config = RunConfig(model="tiny-llama", method="ria", sparsity="0.6", evals=["zeroshot"], tasks=["boolq"])
        accuracy = {"boolq": {**task, "acc": 0.5, "n": n, "partial": n < 3270}}
        insert_run(store, Clock(), run_id, config, created=T0 + 9, zeroshot=accuracy)
    async with results(store, rows=6) as (app, pilot):
        table = app.screen.query_one("#results", DataTable)
        column = [str(c.label) for c in table.ordered_columns].index("0-shot%")
        shown = {key.value: str(table.get_cell(key, table.ordered_columns[column].key)) for key in table.rows}
        assert (shown["eeee0005"], shown["ffff0006"]) == ("50.0†", "50.0")
        assert str(app.screen.query_one("#results-info", Static).render()).endswith("† partial 0-shot")


@pytest.mark.asyncio
async def test_a_run_whose_settings_are_damaged_is_left_out_of_results_and_its_exports(store, tmp_path, monkeypatch):
    """Its numbers cannot be placed in a cell (its settings are unknown): Results lists the other runs and
    says in one line what it left out, its exports and paper view are the CLI's, and Runs still lists it."""
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE runs SET config = '{bad' WHERE id = 'bbbb0002'")
    db.close()
    monkeypatch.setenv(exports.EXPORT_DIR_ENV, str(tmp_path / "exports"))
    async with results(store, rows=3) as (app, pilot):
        note = str(app.screen.query_one("#results-left-out").render())
        assert note == "Left out 1 damaged run (bbbb0002): its settings cannot be read; Runs (F4) lists it.", note
        assert app.screen.query_one("#results-left-out").display
        await pilot.press("l")
        await pilot_wait_until(pilot, lambda: list((tmp_path / "exports").glob("*.tex")), "the table")
        latex = next((tmp_path / "exports").glob("*.tex")).read_text()
        assert "Magnitude" not in latex and "Wanda-16" in latex
        console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
        console.print(app.screen.paper_table())  # the paper view, built without it
        assert "Wanda" in console.export_text() and "Magnitude" not in console.export_text()
        await pilot.press("f4")
        await pilot_wait_until(pilot, lambda: app.screen.query_one("#runs").row_count == 4, "the Runs screen")


# ---- 4. notices that count what the table holds, paths that read ----


@pytest.mark.asyncio
async def test_the_copy_notice_counts_the_tables_runs_and_names_the_repeat_left_out(store, monkeypatch):
    add(store, "eeee0005", "wanda", "0.5", 9.5, at=5)  # seed 0 again: the latest counts, the first is left out
    monkeypatch.setattr("acetui.app.screens.results_export.tmux_drops_clipboard", lambda: False)
    async with results(store, rows=5) as (app, pilot):
        await pilot.press("y")
        await pilot_wait_until(pilot, lambda: any("copied" in t for t in toasts(app)), "the notice")
        notice = next(t for t in toasts(app) if "copied" in t)
        assert "LaTeX table of 4 run(s)" in notice and "1 repeated run of a seed left out" in notice, notice


@pytest.mark.asyncio
async def test_the_saved_notice_puts_the_file_and_its_folder_on_lines_of_their_own(store, monkeypatch):
    home = store.folder.parent
    monkeypatch.setenv("HOME", str(home))
    folder = home / "Documents" / "acetui with a long folder name for the eighty columns"
    monkeypatch.setenv(exports.EXPORT_DIR_ENV, str(folder))
    async with results(store) as (app, pilot):
        await pilot.press("e")
        await pilot_wait_until(pilot, lambda: list(folder.glob("*.csv")), "the CSV")
        saved = next(folder.glob("*.csv"))
        await pilot_wait_until(pilot, lambda: any(t.startswith("Saved") for t in toasts(app)), "the notice")
        notice = next(t for t in toasts(app) if t.startswith("Saved"))
        assert notice.splitlines() == [f"Saved {saved.name}", f"in ~/{folder.relative_to(home)}"]


@pytest.mark.asyncio
async def test_a_selected_run_removed_elsewhere_leaves_the_selection_with_a_word(store):
    """The one selected run removed by ``acetui runs rm``: ``e`` then exported every listed run, and nothing
    had said the selection was empty (app audit)."""
    async with results(store) as (app, pilot):
        app.screen.selected = {"aaaa0001"}
        store.delete_runs(["aaaa0001"])
        said = "Run aaaa0001 was removed from the store and left the selection; none is selected now"
        await pilot_wait_until(pilot, lambda: any(t.startswith(said) for t in toasts(app)), "the notice")
        assert app.screen.selected == set()


def test_the_paper_views_two_tables_label_a_run_alike_and_name_its_model_alike(tmp_path):
    """Each table worked out its labels from its own runs: the OWL run scored zero-shot read "Wanda-16" in
    that table, alone there, and "Wanda-16 (OWL)" in the perplexity table beside a uniform run; and the
    zero-shot table's headers named no model while the perplexity table's (two models) did."""
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    scores = {
        task: {"acc": acc, "acc_stderr": 0.01, "acc_norm": None, "acc_norm_stderr": None, "n": 277, "total": 277}
        | {"partial": False, "source": "local"}
        for task, acc in (("boolq", 0.62), ("rte", 0.55))
    }
    calibration = {"source": "c4", "nsamples": 128, "seqlen": 16, "seed": 0, "fingerprint": "6553273:1"}
    runs = [
        ("/models/tiny-llama-2", {}, None),
        ("/models/tiny-llama-2", {"allocation": "owl"}, scores),
        ("/models/opt-1.3b", {}, None),  # a second model: the perplexity table's headers name the model
    ]
    for number, (model, changes, zeroshot) in enumerate(runs):
        config = RunConfig(model=model, method="wanda", sparsity="0.5", seqlen=16, **changes)
        insert_run(store, clock, f"p000000{number}", config, created=1.7e9 + number, ppl=11.0 + number,
                   zeroshot=zeroshot, result={"calibration": calibration})  # fmt: skip
    records = store.list_runs()
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(paper.view(records, store.evidence([r.id for r in records]), "listed", []))
    text = console.export_text()
    perplexity, zeroshot = text.split("Mean zero-shot accuracy")
    assert "Wanda-16 (OWL)" in perplexity and "Wanda-16 (uniform)" in perplexity, perplexity
    assert "Wanda-16 (OWL)" in zeroshot, zeroshot
    assert "tiny-llama-2 50%" in perplexity and "tiny-llama-2 50%" in zeroshot, text
