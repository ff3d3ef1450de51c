"""The app in a real terminal (issue 22, item 16): NO_COLOR plots whose series are told apart by glyph,
legends under the data, titles that fit, no stray scrollbar marks, the active tab underlined, no hang
without a terminal, the tmux clipboard, the model field emptied, exports in the documented folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from rich.style import Style
from rich.text import Text
from runhelpers import pilot_wait_until
from test_app_snapshots import add_run
from textual.app import App
from textual.widgets import DataTable, Input, Static, Tab

from acetui.app import exports, make_app
from acetui.app.widgets.plots import SERIES_MARKERS, DepthPlot
from acetui_core.storage.store import Store

SIZE = (80, 24)


@pytest.fixture
def store(tmp_path) -> Store:
    """Two finished runs and one cancelled (no process behind any of them)."""
    store = Store(tmp_path / "runs.db")
    add_run(store, "wanda", "0.5", ppl=7.89)
    add_run(store, "ace", "0.5", ppl=7.11)
    add_run(store, "ria", "0.5", layers=2, status="cancelled", error="Stopped on request between layers.")
    return store


def toasts(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


def test_without_a_terminal_the_app_says_so_instead_of_hanging(store):
    done = subprocess.run(
        [sys.executable, "-m", "acetui", "--store", str(store.path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "acetui: The workbench needs a terminal (its input or screen is a pipe or a file here); "
        "in scripts and cron use acetui prune, compare, runs or export.\n"
    )


class OnePlot(App):
    def __init__(self, plot: DepthPlot) -> None:
        super().__init__()
        self.plot = plot

    def compose(self):
        yield self.plot


@pytest.mark.asyncio
async def test_each_series_has_its_own_glyph_named_under_the_plot_not_over_it(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    plot = DepthPlot("a title much longer than the forty columns this plot is given here", id="p")
    series = {name: [(x, 0.1 * (i + 1) + 0.01 * x) for x in range(6)] for i, name in enumerate(("q", "k", "v"))}
    async with OnePlot(plot).run_test(size=(40, 16)) as pilot:
        plot.show(6, series)
        await pilot.pause()
        lines = Text.from_ansi(plot.plt.build()).plain.splitlines()
    plotted = "\n".join(lines[2:-3])  # inside the frame
    glyphs = SERIES_MARKERS[:3]
    assert len(set(glyphs)) == 3 and all(glyph in plotted for glyph in glyphs)
    assert lines[-1].strip() == "layer │ •q  xk  +v"  # the legend, under the x axis
    assert not any(name in plotted for name in ("q", "k", "v"))  # nothing written over the data
    assert lines[0].strip() == "a title much longer than the forty…"  # cut to fit, not dropped


@pytest.mark.asyncio
async def test_no_color_hides_scrollbars_and_the_active_tab_is_underlined(store, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app(store, attach="run00002")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        log = app.screen.query_one("#log")
        assert (log.styles.scrollbar_size_vertical, log.styles.scrollbar_size_horizontal) == (0, 0)
        active = app.screen.query_one("Tab.-active", Tab)
        assert active.styles.text_style.underline and active.styles.text_style.bold
    monkeypatch.delenv("NO_COLOR")
    app = make_app(store, theme="ansi", attach="run00002")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.screen.query_one("#log").styles.scrollbar_size_vertical > 0  # colours: scrollbars stay
        rendered = app.screen.query_one("Tab.-active", Tab).rich_style
        assert isinstance(rendered, Style) and rendered.underline


@pytest.mark.asyncio
async def test_no_color_marks_every_focused_widget_and_the_table_cursor_apart_from_bold(store, monkeypatch):
    """Under NO_COLOR the focused evaluation tick, the Metrics list's row and the Advanced header were only bold,
    as ticked marks and headings are, and a run table's cursor row too, as its header: focus was invisible.
    The focused ones are underlined (as a focused field is), the cursor row reversed."""
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        for selector, component in (
            ("#eval-wikitext2", "toggle--label"),
            ("#eval-zeroshot", "toggle--label"),
            ("#metrics", "option-list--option-highlighted"),
            ("#advanced CollapsibleTitle", None),
        ):
            widget = screen.query_one(selector)
            widget.focus()
            await pilot.pause()
            style = widget.get_component_rich_style(component) if component else widget.rich_style
            assert style.underline, selector
        for key, selector in (("f4", "#runs"), ("f3", "#results"), ("f2", "#layers")):
            await pilot.press(key)
            table = app.screen.query_one(selector, DataTable)
            await pilot_wait_until(pilot, lambda: table.row_count > 0, f"the rows of {selector}")  # noqa: B023
            table.focus()
            await pilot.pause()
            cursor, header = (table.get_component_rich_style(c) for c in ("datatable--cursor", "datatable--header"))
            assert cursor.reverse and not header.reverse, selector


@pytest.mark.asyncio
async def test_the_model_field_can_be_emptied_and_stays_empty(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        model = app.screen.query_one("#model", Input)
        model.value = "org/some-model"
        model.focus()
        await pilot.press("ctrl+u")
        await pilot.pause(0.5)  # the candidates arrive from their thread meanwhile
        await pilot.press("f4", "f1", "ctrl+r")
        await pilot.pause()
        assert model.value == ""
        assert str(app.screen.query_one("#model-error", Static).render()).startswith("Choose a model:")
        assert store.list_runs(status="queued") == []


def test_exports_go_to_the_documented_folder(tmp_path, monkeypatch):
    import platformdirs

    monkeypatch.delenv(exports.EXPORT_DIR_ENV, raising=False)
    monkeypatch.setattr(platformdirs, "user_documents_path", lambda: tmp_path / "Documents")
    assert exports.export_dir() == tmp_path / "Documents" / "acetui"
    assert exports.export_dir(str(tmp_path / "chosen")) == tmp_path / "chosen"  # the setting
    monkeypatch.setenv(exports.EXPORT_DIR_ENV, str(tmp_path / "env"))
    assert exports.export_dir(str(tmp_path / "chosen")) == tmp_path / "env"  # the environment wins


@pytest.mark.asyncio
async def test_an_export_lands_in_the_export_folder_and_the_notice_names_it(store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(exports.EXPORT_DIR_ENV, raising=False)
    folder = tmp_path / "my exports"
    app = make_app(store)
    app.preferences.export_dir = str(folder)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f3")
        await pilot_wait_until(pilot, lambda: app.screen.query_one("#results").row_count == 2, "the results")
        await pilot.press("e")
        await pilot_wait_until(pilot, lambda: list(folder.glob("*.csv")), "the CSV")
        saved = next(folder.glob("*.csv"))
        await pilot_wait_until(pilot, lambda: f"Saved {saved.name}\nin {folder}" in toasts(app), "the notice")
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".csv"] == []  # not the working directory


def test_tmux_drops_osc52_unless_set_clipboard_is_on(monkeypatch):
    answers = {}

    def fake_run(command, **kwargs):
        return subprocess.CompletedProcess(command, 0, stdout=answers["value"] + "\n", stderr="")

    monkeypatch.setattr(exports.subprocess, "run", fake_run)
    assert not exports.tmux_drops_clipboard({})  # not in tmux
    for value, dropped in (("external", True), ("off", True), ("on", False)):
        answers["value"] = value
        assert exports.tmux_drops_clipboard({"TMUX": "/tmp/tmux-1000/default,1,0"}) is dropped


@pytest.mark.asyncio
@pytest.mark.parametrize("refused", [False, True])
async def test_copy_inside_tmux_without_set_clipboard_saves_a_file_and_says_how(store, tmp_path, monkeypatch, refused):
    """Inside a tmux that drops the copy, ``y`` saves the table as a file too and says so; where the export
    folder is refused (the store's own), it said the table "is saved as a file instead" right under the notice
    that it could not be saved: no copy and no file, now told as one."""
    folder = Path(store.path).parent if refused else tmp_path / "exports"
    monkeypatch.setenv(exports.EXPORT_DIR_ENV, str(folder))
    monkeypatch.setattr("acetui.app.screens.results_export.tmux_drops_clipboard", lambda: True)
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f3")
        await pilot_wait_until(pilot, lambda: app.screen.query_one("#results").row_count == 2, "the results")
        await pilot.press("y")
        if refused:
            await pilot_wait_until(pilot, lambda: any("was not copied" in t for t in toasts(app)), "the notice")
            assert any("Could not save the export" in toast for toast in toasts(app))
            assert not any("saved as a file" in toast for toast in toasts(app)) and not list(folder.glob("*.tex"))
            return
        await pilot_wait_until(pilot, lambda: list(folder.glob("*.tex")), "the LaTeX file")
        saved = next(folder.glob("*.tex"))
        assert saved.read_text() == app.clipboard  # the same table the copy held
        await pilot_wait_until(pilot, lambda: f"Saved {saved.name}\nin {saved.parent}" in toasts(app), "the notice")
        assert any("`set -g set-clipboard on`" in toast and "saved as a file" in toast for toast in toasts(app))


@pytest.mark.asyncio
async def test_no_color_draws_a_progress_bar_at_0_percent_empty(tmp_path, monkeypatch):
    """Under NO_COLOR the track not yet done is blank; at 0% Textual drew the whole track, a bar that read as
    100% while the first layer was still being pruned."""
    import os

    monkeypatch.setenv("NO_COLOR", "1")
    store = Store(tmp_path / "runs.db")
    running = add_run(store, "wanda", "0.5", status="running", layers=0, pid=os.getpid())
    app = make_app(store, attach=running)
    async with app.run_test(size=SIZE) as pilot:
        bar = app.screen.query_one("#progress").query_one("#bar")
        await pilot_wait_until(pilot, lambda: bar.percentage == 0, "the run's bar at 0%")
        await pilot.pause()
        drawn = "".join(segment.text for segment in bar.render_line(0))
        assert drawn.strip() == "" and len(drawn) == bar.size.width, repr(drawn)
