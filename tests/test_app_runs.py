"""The Runs screen and what the app does with a run (issue 23, section 4): newest first as in the CLI,
filters by status, model and method, sorting by column, re-run or duplicate into the New run form,
force-kill of a run that ignores cancel, the empty Results screen, layers numbered from 0."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from runhelpers import cli, layer_event, pilot_wait_until, screen_shown, send_in_one_read
from textual.widgets import Checkbox, DataTable, Input, Static, TabbedContent

from acetui.app import make_app
from acetui.app.runview import describe_stage
from acetui.app.screens.new_run import NewRunScreen
from acetui.app.screens.run import RunScreen
from acetui_core.execution.kill import KILLED
from acetui_core.run.config import RunConfig
from acetui_core.storage.store import Store

SIZE = (80, 24)
CONFIG = RunConfig(model="org/llama-tiny", method="wanda", sparsity="0.5", nsamples=4, seqlen=16, device="cpu")


class Ticks:
    """A store clock one minute apart per call: distinct creation times in a known order."""

    def __init__(self) -> None:
        self.now = 1_714_564_800.0

    def __call__(self) -> float:
        self.now += 60
        return self.now


@pytest.fixture
def store(tmp_path) -> Store:
    """Five runs, created in this order: wanda/llama finished, ria/opt failed, ace/llama finished,
    wanda/opt cancelled, magnitude/llama finished."""
    store = Store(tmp_path / "runs.db", clock=Ticks())
    for model, method, status in (
        ("org/llama-tiny", "wanda", "finished"),
        ("org/opt-tiny", "ria", "failed"),
        ("org/llama-tiny", "ace", "finished"),
        ("org/opt-tiny", "wanda", "cancelled"),
        ("org/llama-tiny", "magnitude", "finished"),
    ):
        run_id = store.create_run(replace(CONFIG, model=model, method=method))
        if status == "finished":  # finished without results is enough for the lists
            with store._db(write=True) as db:
                db.execute("UPDATE runs SET status = 'finished', finished = ? WHERE id = ?", (store.clock(), run_id))
        else:
            store.set_status(run_id, status, error="on purpose")
    return store


def listed(app) -> list[str]:
    table = app.screen.query_one("#runs", DataTable)
    return [table.coordinate_to_cell_key((row, 0)).row_key.value for row in range(table.row_count)]


def test_the_cli_lists_runs_newest_first(store, monkeypatch, capsys):
    code, out, _ = cli(monkeypatch, capsys, "runs", "--store", store.path)
    ids = [line.split()[0] for line in out.splitlines()[1:] if line.strip()]
    assert code == 0 and ids == [run.id for run in store.list_runs()][::-1]
    code, out, _ = cli(monkeypatch, capsys, "runs", "--store", store.path, "--last", "2")
    assert [line.split()[0] for line in out.splitlines()[1:]] == [run.id for run in store.list_runs()][:-3:-1]


async def results_table(pilot) -> DataTable:
    """F3, and the Results table once it lists the runs."""
    await pilot.press("f3")
    rows = pilot.app.screen.query_one("#results", DataTable)
    await pilot_wait_until(pilot, lambda: rows.row_count > 1, "the runs")
    return rows


@pytest.mark.asyncio
async def test_a_store_moved_away_while_the_app_has_it_is_said_and_never_made_again(store):
    """The app's next read made a new, empty runs.db at the old path and said SQLite's "no such table:
    runs"; the store moved back, its runs were there, but a process started meanwhile wrote to the empty one."""
    path = Path(store.path)
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f4")
        await pilot_wait_until(pilot, lambda: len(listed(app)) == 5, "the runs")
        path.rename(path.with_name("moved.db"))
        said = lambda: any("is no longer there" in str(n.message) for n in app._notifications)  # noqa: E731
        await pilot_wait_until(pilot, said, "the store's sentence")
        assert not path.exists()
        assert not any("no such table" in str(n.message) for n in app._notifications)


@pytest.mark.asyncio
async def test_runs_newest_first_filtered_by_status_model_method_and_sorted_by_column(store):
    newest_first = [run.id for run in store.list_runs()][::-1]
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f4")
        await pilot_wait_until(pilot, lambda: len(listed(app)) == 5, "the runs")
        assert listed(app) == newest_first  # the CLI's order

        by_id = {run.id: run for run in store.list_runs()}
        query = app.screen.query_one("#runs-filter", Input)
        for text, wanted in (
            ("status:finished", lambda r: r.status == "finished"),
            ("model:opt", lambda r: "opt" in r.config.model),
            ("wanda", lambda r: r.config.method == "wanda"),
            ("wanda opt", lambda r: r.config.method == "wanda" and "opt" in r.config.model),
            ("method:magn", lambda r: r.config.method == "magnitude"),
        ):
            query.value = text
            await pilot.pause()
            assert listed(app) == [i for i in newest_first if wanted(by_id[i])], text
        query.value = "nothing-like-this"
        await pilot.pause()
        assert listed(app) == []
        assert str(app.screen.query_one("#run-detail", Static).render()) == "No run matches the filter: / edits it."

        query.value = ""
        app.screen.query_one("#runs", DataTable).focus()
        await pilot.press("s", "s", "s")  # Created -> Run -> Status -> Method
        assert str(app.screen.query_one("#runs-info", Static).render()) == "5 of 5 · by Method ↑"
        assert [by_id[i].label for i in listed(app)] == sorted(by_id[i].label for i in newest_first)
        await pilot.press("r")
        assert [by_id[i].label for i in listed(app)] == sorted((by_id[i].label for i in newest_first), reverse=True)
        await pilot.click("#runs", offset=(12, 0))  # the Status header
        assert [by_id[i].status for i in listed(app)] == ["finished"] * 3 + ["failed", "cancelled"]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("screen_key", "field", "table", "shown"), [("f4", "#runs-filter", "#runs", 5), ("f3", "#filter", "#results", 3)]
)
async def test_keys_typed_at_once_after_slash_all_reach_the_filter(store, screen_key, field, table, shown):
    """tmux (or a fast typist over SSH) hands the app ``/`` and the words after it in one read: the filter
    gets every key, none goes to the table (where ``s`` sorts, ``d`` deletes, ``k`` kills)."""
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(screen_key)
        await pilot_wait_until(pilot, lambda: app.screen.query_one(table, DataTable).row_count == shown, "the runs")
        screen = app.screen
        order = (screen.sort_column, screen.descending)
        burst = [("slash", "/"), ("s", "s"), ("d", "d"), ("l", "l"), ("slash", "/"), ("x", "x")]
        send_in_one_read(app, burst)
        await pilot_wait_until(pilot, lambda: app.screen.query_one(field, Input).value == "sdl/x", "the typed filter")
        assert app.screen is screen and (screen.sort_column, screen.descending) == order  # nothing deleted or sorted


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("screen_key", "field", "table", "shown"), [("f4", "#runs-filter", "#runs", 5), ("f3", "#filter", "#results", 3)]
)
async def test_a_table_key_in_a_burst_acts_on_the_table_it_was_typed_into(store, screen_key, field, table, shown):
    """One read: ``/``, "sd" in the filter, tab to the table, ``r`` (reverse the sort), shift+tab back, "l".
    Focus is back in the filter before the ``r`` has bubbled up to the app, where Textual looks up the
    screen's bindings from the field focused then, which takes ``r`` as text: the reversal was lost."""
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(screen_key)
        await pilot_wait_until(pilot, lambda: app.screen.query_one(table, DataTable).row_count == shown, "the runs")
        screen = app.screen
        descending = screen.descending
        burst = [("slash", "/"), ("s", "s"), ("d", "d"), ("tab", None), ("r", "r"), ("shift+tab", None), ("l", "l")]
        send_in_one_read(app, burst)
        await pilot_wait_until(pilot, lambda: app.screen.query_one(field, Input).value == "sdl", "the typed filter")
        await pilot.pause()
        assert screen.descending is not descending


@pytest.mark.asyncio
@pytest.mark.parametrize(("screen_key", "table"), [("f4", "#runs"), ("f3", "#results")])
async def test_keys_after_enter_in_a_burst_reach_the_run_it_opens(store, screen_key, table):
    """One read on a run table: enter (open the highlighted run) then ``i`` (the Run screen's Config tab).
    Enter was the table's key, handled after ``i`` had reached the table (where it does nothing, or ``l``
    exported LaTeX); it is now run, and the Run screen composed, as the app reads it. A double click on
    the highlighted row opens it too (a click on its highlighted cell: the first moves to the cell)."""
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(screen_key)
        rows = app.screen.query_one(table, DataTable)
        await pilot_wait_until(pilot, lambda: rows.row_count > 1, "the runs")
        highlighted = app.screen.cursor_run(rows).id
        send_in_one_read(app, [("enter", "\r"), ("i", "i")])
        await pilot_wait_until(pilot, lambda: screen_shown(app, RunScreen), "the Run screen")
        await pilot.pause()
        assert app.followed == highlighted
        assert app.screen.query_one("#plots", TabbedContent).active == "config"

        await pilot.press(screen_key)
        await pilot.double_click(table, offset=(6, 1))  # the highlighted (first) row, its second column
        await pilot_wait_until(pilot, lambda: screen_shown(app, RunScreen), "the Run screen, by a click")
        assert app.followed == highlighted

        # ``down enter`` in one read: enter opened the run highlighted before the arrow, which was still on
        # its way through the table, a run the user did not pick
        await pilot.press(screen_key)
        send_in_one_read(app, [("down", None), ("enter", "\r")])
        await pilot_wait_until(pilot, lambda: screen_shown(app, RunScreen) and app.followed != highlighted, "the next")
        await pilot.press(screen_key)
        assert app.screen.cursor_run(rows).id == app.followed  # the row the arrow moved to


@pytest.mark.asyncio
@pytest.mark.parametrize("view", ["p", "f", "m"])
async def test_the_results_table_has_the_keys_again_after_a_plot(store, view):
    """``p p`` (or ``f f``, ``m m``): the plot and back. The table, hidden with the plot, had lost the focus:
    no cursor, arrows did nothing, and ``space`` selected a row the user could not see."""
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        rows = await results_table(pilot)
        await pilot.press(view, view)
        assert app.focused is rows
        before = rows.cursor_row
        await pilot.press("down")
        assert rows.cursor_row == before + 1


@pytest.mark.asyncio
async def test_the_pareto_view_names_every_series_at_80_columns(store):
    """At 80 columns the line under the x axis cannot hold six series' names (it was blank): the caption,
    which wraps, names each by its glyph; of more series than it has colours, it says how many it draws
    and that ``g`` saves them all (it said the saved figure held the series shown)."""
    from runhelpers import Clock, insert_run

    from acetui.app.widgets.plots import SERIES_MARKERS

    methods = ("wanda", "ria", "ace", "cosp", "varp")
    for index, (method, sparsity) in enumerate([(m, s) for m in methods for s in ("0.5", "2:4")]):
        config = replace(CONFIG, method=method, sparsity=sparsity)
        insert_run(store, Clock(), f"b000000{index}", config, created=1.7e9 + index, ppl=10.0 + index)
    app = make_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await results_table(pilot)
        await pilot.press("p")
        series, _, _ = app.screen.pareto()
        caption = str(app.screen.query_one("#pareto-caption", Static).render())
    assert len(series) == 10
    for line, marker in zip(series, SERIES_MARKERS, strict=False):
        assert f"{marker}{line.name}" in caption, caption
    assert "p: back. The first 8 of 10 methods are shown; g saves every one." in " ".join(caption.split())


@pytest.mark.asyncio
@pytest.mark.parametrize(("screen_key", "table_id"), [("f4", "#runs"), ("f3", "#results")])
async def test_home_and_end_go_to_the_first_and_last_run(store, screen_key, table_id):
    """DataTable's home and end move a column cursor: on a table of runs (a row cursor) they did nothing."""
    app = make_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(screen_key)
        rows = app.screen.query_one(table_id, DataTable)
        await pilot_wait_until(pilot, lambda: rows.row_count > 2, "the runs")
        await pilot.press("end")
        assert rows.cursor_row == rows.row_count - 1
        await pilot.press("home")
        assert rows.cursor_row == 0


@pytest.mark.asyncio
@pytest.mark.parametrize(("screen_key", "table_id"), [("f4", "#runs"), ("f3", "#results")])
@pytest.mark.parametrize(("wide", "narrow"), [((120, 30), (80, 24)), ((100, 24), (80, 24))])
async def test_a_resize_keeps_the_highlighted_run(store, screen_key, table_id, wide, narrow):
    """A resize that changes which columns fit rebuilds the table's columns, which emptied it first: the Runs
    table's cursor went back to its first row, and enter (or d, c, k, u) then acted on a run the user had
    not picked."""
    app = make_app(store)
    async with app.run_test(size=wide) as pilot:
        await pilot.press(screen_key)
        rows = app.screen.query_one(table_id, DataTable)
        await pilot_wait_until(pilot, lambda: rows.row_count > 2, "the runs")
        await pilot.press("down", "down")
        highlighted = app.screen.cursor_run(rows).id
        columns = [str(column.label) for column in rows.ordered_columns]
        await pilot.resize_terminal(*narrow)
        await pilot_wait_until(
            pilot, lambda: [str(column.label) for column in rows.ordered_columns] != columns, "the narrower columns"
        )
        assert app.screen.cursor_run(rows).id == highlighted
        await pilot.press("enter")
        await pilot_wait_until(pilot, lambda: screen_shown(app, RunScreen), "the Run screen")
        assert app.followed == highlighted


@pytest.mark.asyncio
async def test_escape_leaves_the_paper_view_and_the_plots_for_the_table(store):
    """Escape did nothing in the paper view and the plots: only their own key again went back."""
    from textual.widgets import ContentSwitcher

    app = make_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        rows = await results_table(pilot)
        views = app.screen.query_one("#results-views", ContentSwitcher)
        for key in ("v", "p", "f", "m"):
            await pilot.press(key)
            assert views.current != "results"
            await pilot.press("escape")
            assert views.current == "results" and app.focused is rows, key
        await pilot.press("slash", "escape")  # from the filter, escape still goes to the table
        assert app.focused is rows and views.current == "results"


@pytest.mark.asyncio
async def test_the_pareto_view_says_which_method_has_no_place_on_a_log_axis_of_tokens(store):
    """Magnitude reads no calibration tokens: against tokens (x) its points at 0 have no place on the log axis
    and were left out without a word, its glyph still named."""
    from runhelpers import Clock, insert_run

    for index, (method, calibration) in enumerate((("wanda", {}), ("magnitude", {"calibration": None}))):
        config = replace(CONFIG, method=method)
        insert_run(store, Clock(), f"t000000{index}", config, created=1.7e9 + index, ppl=20.0, result=calibration)
    app = make_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await results_table(pilot)
        caption = app.screen.query_one("#pareto-caption", Static)
        await pilot.press("p")
        assert "against prune time (s)" in str(caption.render()) and "Not on the log axis" not in str(caption.render())
        await pilot.press("x")
        await pilot.pause()
        text = str(caption.render())
    assert "against calibration tokens" in text and "Not on the log axis at 0: Magnitude." in text, text


@pytest.mark.asyncio
async def test_a_plot_with_nothing_to_draw_shows_only_why(store):
    """``m`` with no two runs selected, ``p z`` over runs without zero-shot accuracy, and ``f`` over runs
    without fidelity drew empty axes (``, log`` for an x label) under the sentence that says why."""
    from runhelpers import Clock, insert_run

    from acetui.app.widgets.plots import DepthPlot, ParetoPlot

    for index, method in enumerate(("wanda", "ace")):  # beside the store's three
        insert_run(store, Clock(), f"c000000{index}", replace(CONFIG, method=method), created=1.7e9 + index, ppl=20.0)
    app = make_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await results_table(pilot)
        results = app.screen
        for keys, view, plot_type, why in (
            (("m",), "overlap", DepthPlot, "Select exactly two runs"),
            (("m", "f"), "fidelity", DepthPlot, "None of the chosen runs recorded output fidelity"),
            (("f", "p", "z"), "pareto", ParetoPlot, "None of the 5 run(s) has finished with mean zero-shot accuracy"),
        ):
            await pilot.press(*keys)
            await pilot.pause()
            assert str(results.query_one(f"#{view}-caption", Static).render()).startswith(why)
            assert not results.query_one(f"#{view}-overlay", plot_type).display, f"{view}: empty axes drawn"
        await pilot.press("z")  # back to perplexity, which both runs have: the plot is drawn again
        await pilot.pause()
        assert results.query_one("#pareto-overlay", ParetoPlot).display


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", ["run", "results", "runs"])
async def test_quitting_while_a_screen_is_composed_ends_cleanly(store, mode):
    """A screen switch nothing waits on (the Run screen opened once a start's checks pass, the first screen
    of ``acetui --study``) and a quit at once: Textual mounts nothing into a screen of an exiting app but
    still sends it Mount, whose queries raised NoMatches (a traceback on the way out); now it ends with 0."""
    app = make_app(store)
    async with app.run_test(size=SIZE):
        app.switch_mode(mode)
        app.exit()
    assert app.return_code == 0


@pytest.mark.asyncio
async def test_rerun_fills_the_new_run_form_and_starts_the_same_settings(store, monkeypatch):
    fidelity = store.create_run(replace(CONFIG, method="ria", sparsity="2:4", seed=3, fidelity=True))
    store.set_status(fidelity, "failed", error="on purpose")
    started = []
    monkeypatch.setattr("acetui.app.app.AceApp.start_runs", lambda self, configs: started.extend(configs))
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f4")
        await pilot_wait_until(pilot, lambda: len(listed(app)) == 6, "the runs")
        assert listed(app)[0] == fidelity
        await pilot.press("u")
        await pilot_wait_until(pilot, lambda: screen_shown(app, NewRunScreen), "the New run form")
        screen = app.screen
        assert screen.query_one("#sparsity", Input).value == "2:4"
        assert screen.query_one("#seed", Input).value == "3"
        assert screen.query_one("#fidelity", Checkbox).value  # an advanced setting, carried over too
        assert not any("Not carried over" in str(n.message) for n in app._notifications)
        await pilot.press("ctrl+r")
        await pilot_wait_until(pilot, lambda: started, "the launcher's thread")
    assert started == [store.get_run(fidelity).config]  # the form holds every setting


@pytest.mark.asyncio
async def test_a_run_whose_settings_are_damaged_opens_and_says_so(store):
    """Opening it (enter on Runs, F2, attach) ended the app with a traceback: the Config tab parsed its
    stand-in sparsity ``?``. Runs lists it as ``(damaged)`` with what is damaged, as ``acetui runs`` does;
    its Run screen says its settings cannot be read; re-run refuses instead of filling the form with ``?``."""
    damaged = store.list_runs()[-1].id  # the newest: the first row, and what F2 opens
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE runs SET config = '{bad' WHERE id = ?", (damaged,))
    db.close()
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f4")
        await pilot_wait_until(pilot, lambda: len(listed(app)) == 5, "the runs")
        table = app.screen.query_one("#runs", DataTable)
        assert listed(app)[0] == damaged and str(table.get_cell_at((0, 1))) == "finished (damaged)"
        detail = str(app.screen.query_one("#run-detail", Static).render())
        assert "settings unreadable" in detail and "damaged in the run store: unreadable config" in detail, detail
        await pilot.press("u")
        await pilot_wait_until(
            pilot, lambda: any("nothing to re-run" in str(n.message) for n in app._notifications), "the refusal"
        )
        assert not screen_shown(app, NewRunScreen)
        await pilot.press("enter")
        await pilot_wait_until(pilot, lambda: screen_shown(app, RunScreen), "the Run screen")
        config = app.screen.query_one("#config-text", Static)
        await pilot_wait_until(pilot, lambda: "cannot be read" in str(config.render()), "its Config tab")
        assert str(app.screen.query_one("#run-title", Static).render()).startswith("settings unreadable · finished")
        assert app.is_running


@pytest.fixture
def stubborn(store):
    """A process that ignores SIGTERM (a run stuck where cancel is never seen), owning a running run
    (cancel already asked) and a queued one of the same worker; killed at the end whatever happens."""
    process = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"]
    )
    running = store.create_run(replace(CONFIG, method="ace"))
    queued = store.create_run(replace(CONFIG, method="ria"))
    store.claim(running, pid=process.pid)
    store.record_event(running, layer_event(0, 2))
    store.set_owner(queued, process.pid)
    store.request_cancel(running)
    yield process, running, queued
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    process.wait()


@pytest.mark.asyncio
async def test_kill_a_run_that_ignores_cancel_after_confirming(store, stubborn):
    process, running, queued = stubborn
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f4")
        await pilot_wait_until(pilot, lambda: len(listed(app)) == 7, "the runs")
        assert listed(app)[1] == running
        await pilot.press("down")
        assert app.screen.check_action("cancel_run", ()) is False  # cancel was asked: kill is offered instead
        await pilot.press("k", "n")  # declined: nothing happens
        await pilot.pause()
        assert process.poll() is None and store.get_run(running).status == "running"
        await pilot.press("k", "y")
        await pilot_wait_until(pilot, lambda: process.poll() is not None, "the process to end")  # SIGTERM would not do
    for run_id in (running, queued):
        run = store.get_run(run_id)
        assert (run.status, run.error) == ("cancelled", KILLED)
    assert store.get_run(running).layers_done == 1  # the layer done is kept


@pytest.mark.asyncio
async def test_the_run_screen_offers_kill_once_cancel_was_ignored(store, stubborn):
    _, running, _ = stubborn
    app = make_app(store, attach=running)
    async with app.run_test(size=SIZE) as pilot:
        await pilot_wait_until(pilot, lambda: app.screen._run is not None, "the run")
        assert app.screen.check_action("kill_run", ()) is True
        assert app.screen.check_action("cancel_run", ()) is False
        await pilot.press("k")
        await pilot.pause()
        assert "Kill run" in str(app.screen.query_one("Static").render())
        await pilot.press("n")
    assert psutil.pid_exists(stubborn[0].pid)


@pytest.mark.asyncio
async def test_empty_results_say_what_to_do(tmp_path):
    app = make_app(Store(tmp_path / "empty.db"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f3")
        empty = app.screen.query_one("#results-empty", Static)
        await pilot_wait_until(pilot, lambda: empty.display, "the empty notice")
        assert str(empty.render()).startswith("No finished runs yet: start one on New run (F1)")


def test_layers_are_numbered_from_0_everywhere():
    layer = layer_event(0, 2).layer
    assert layer.line == "layer 0 pruned (1/2 done): 7 linears, sparsity 0.5000, 0.50 s"
    run = type("Run", (), {"status": "running", "active": True, "current_layer": 1, "num_layers": 2, "layers_done": 1})
    assert describe_stage(run) == "layer 1 · 1/2 done"


def typed(text: str) -> list[tuple[str, str | None]]:
    """The keys of ``text`` as a terminal reads them (``:`` is ``colon``)."""
    return [({":": "colon", " ": "space"}.get(c, c), c) for c in text]


FILTER_BURSTS = [
    # (screen, filter before, keys after it, what the burst does)
    ("f4", "", [("slash", "/"), ("ctrl+u", None), *typed("magnitude"), ("enter", "\r"), ("enter", "\r")], "opens"),
    ("f4", "", [("slash", "/"), *typed("model:opt"), ("enter", "\r"), ("end", None)], "end"),
    (
        "f4",
        "wanda",
        [("slash", "/"), ("ctrl+u", None), ("enter", "\r"), ("home", None), ("d", "d"), ("y", "y")],
        "deletes",
    ),
    ("f3", "", [("slash", "/"), ("ctrl+u", None), *typed("opt"), ("escape", None), ("space", " ")], "selects"),
    ("f4", "", [("slash", "/"), *typed("magnitude"), ("tab", None), ("enter", "\r")], "opens"),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("screen_key", "before", "burst", "does"), FILTER_BURSTS)
async def test_keys_after_a_filter_edit_in_a_burst_act_on_the_filtered_table(store, screen_key, before, burst, does):
    """Leaving the filter (enter, escape, tab) and the table keys after it in one burst act on the table the
    filter shows. The table was refiltered only when the field's Changed message reached the screen, after
    enter had gone back to the table and the keys after it had acted on the old rows: ``/ C-u magnitude
    Enter Enter`` opened the Wanda run the filter hides, ``End`` went to the old last row, ``/ C-u Enter
    Home d y`` deleted the run highlighted under the old filter, ``space`` on Results (filtered by model)
    selected a run the filter hides."""
    ria = next(run.id for run in store.list_runs() if run.config.method == "ria")
    with store._db(write=True) as db:  # the one finished run of org/opt-tiny on Results
        db.execute("UPDATE runs SET status = 'finished', finished = ? WHERE id = ?", (store.clock(), ria))
    by_method = {run.config.method: run.id for run in store.list_runs() if run.status == "finished"}
    deleted_before = {run.id for run in store.list_runs()}
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(screen_key)
        table = app.screen.query_one("#runs" if screen_key == "f4" else "#results", DataTable)
        field = app.screen.query_one("#runs-filter" if screen_key == "f4" else "#filter", Input)
        await pilot_wait_until(pilot, lambda: table.row_count >= 3, "the runs")
        field.value = before
        await pilot.pause()
        keys = [table.coordinate_to_cell_key((row, 0)).row_key.value for row in range(table.row_count)]
        table.move_cursor(row=keys.index(by_method["wanda"]))  # a run the new filter hides
        screen = app.screen
        send_in_one_read(app, burst)
        if does == "opens":
            await pilot_wait_until(pilot, lambda: screen_shown(app, RunScreen), "the Run screen")
            assert app.followed == by_method["magnitude"]
        elif does == "end":
            await pilot_wait_until(pilot, lambda: app.focused is table and table.row_count == 2, "the filtered table")
            await pilot.pause()
            assert listed(app)[table.cursor_row] == listed(app)[-1]
        elif does == "deletes":
            top = [run.id for run in store.list_runs()][-1]  # newest first: the top row of the whole table
            await pilot_wait_until(pilot, lambda: {r.id for r in store.list_runs()} != deleted_before, "a delete")
            assert deleted_before - {r.id for r in store.list_runs()} == {top}
        else:
            await pilot_wait_until(pilot, lambda: screen.selected, "a selection")
            assert screen.selected == {ria}


@pytest.mark.asyncio
async def test_every_runs_header_reads_whole_at_80_columns(tmp_path):
    """Finished runs with partial perplexities, a long method name (CosP+VarP-16), a cancelled row, two models:
    the shortened columns were still wider than the screen (the model column kept 8 characters) and the
    header read ``... Model    Create``. The model column goes (the line under the table names the
    highlighted run's model); every other column's title is read whole."""
    from test_app_snapshots import add_run

    store = Store(tmp_path / "runs.db")
    add_run(store, "ace", "0.5", ppl=12345.67, windows=4, model="/models/llama-7b")
    add_run(store, "wanda", "2:4", ppl=1234.56, windows=4, model="/models/opt-125m-long-name")
    add_run(store, "sparsegpt", "0.6", status="cancelled", layers=2, model="/models/llama-7b")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f4")
        table = app.screen.query_one("#runs", DataTable)
        await pilot_wait_until(pilot, lambda: table.row_count == 3, "the runs")
        await pilot.pause()
        widths = sum(column.get_render_width(table) for column in table.columns.values())
        titles = [str(column.label) for column in table.columns.values()]
        assert widths <= table.scrollable_content_region.width, (titles, widths)
        assert "Created" in titles and "Model" not in titles
        detail = str(app.screen.query_one("#run-detail", Static).render())
        assert "llama-7b" in detail or "opt-125m-long-name" in detail
