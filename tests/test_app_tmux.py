"""The app in a real terminal, through tmux (issue 31): keys sent in one burst, as SSH and tmux deliver
them, and the screens read back as text at 80x24, with colours and under ``NO_COLOR``."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from runhelpers import wait_until
from test_app_snapshots import add_run
from tmuxterm import Terminal, needs_tmux

from acetui_core.storage.store import Store

pytestmark = [needs_tmux, pytest.mark.slow]


@pytest.fixture
def store(tmp_path) -> Store:
    store = Store(tmp_path / "runs.db")
    add_run(store, "wanda", "0.5", ppl=7.89)
    add_run(store, "ace", "0.5", ppl=7.11)
    return store


@pytest.fixture
def terminal(store, tmp_path):
    terminal = Terminal(store.path, tmp_path)
    yield terminal
    terminal.close()


def test_editing_keys_sent_in_one_burst_are_applied_in_order(terminal):
    """``tmux send-keys`` in one call reaches the app as one read: the model field (focused at start) gets
    every key in order; Textual's own Input applied the backspace, home and end after the text."""
    terminal.wait_for("Start ▶", "the New run form")
    terminal.keys("C-u", "org/abc", "BSpace", "d", "Home", "x", "End", "-it", "BSpace", "t")
    terminal.wait_for("xorg/abd-it", "the field edited in order")
    # Help opens while typing (issue 31, item 6), by the key the footer shows (drawn after the form, at times
    # a frame later: a wait, not a look at the form's first screen).
    terminal.wait_for(lambda text: "f5 Help" in text.splitlines()[-1], "Help's key in the footer while typing")
    terminal.keys("F5")
    terminal.wait_for("Keys · ↑ ↓ PgUp PgDn scroll", "the keys panel, opened from the model field")
    assert "xorg/abd-it?" not in terminal.screen()


def test_start_in_a_burst_starts_the_model_typed_before_it(terminal):
    """``C-u nosuchorg/third C-r`` in one read: ctrl+r, run as the app reads it, read the model field before it
    had typed the new name, and the refusal named the model it held before (``nosuchorg/first``)."""
    terminal.wait_for("Start ▶", "the New run form")
    terminal.keys("C-u", "nosuchorg/first")
    terminal.wait_for("Model        nosuchorg/first", "the first model typed")
    terminal.keys("C-u", "nosuchorg/third", "C-r")
    refused = terminal.wait_for("'nosuchorg/", "the launcher's refusal, naming the model")
    assert "'nosuchorg/third'" in refused, refused


def test_space_in_a_burst_ticks_the_metric_it_was_typed_on(terminal):
    """``Tab Down space Down Down space`` in one read from the model field: each space ticks the metric
    highlighted as it was typed (Wanda, SparseGPT); the list ticked the row the arrows after it reached."""
    terminal.wait_for("Start ▶", "the New run form")
    terminal.keys("Tab", "Down", "space", "Down", "Down", "space")
    metrics = lambda text: text.split("Evaluation")[0].splitlines()  # noqa: E731  # the ticks above it
    ticked = lambda text: [line.split()[1] for line in metrics(text) if "▐X▌" in line]  # noqa: E731
    terminal.wait_for(lambda text: len(ticked(text)) == 3, "two more metrics ticked", timeout=30)
    assert ticked(terminal.screen()) == ["Wanda", "SparseGPT", "CosP+VarP"]


def test_tab_in_a_burst_moves_focus_in_order_and_the_filter_keeps_its_text(terminal):
    """Results, in one read: ``/`` and "lla" in the filter, tab to the table, where ``r`` reverses the sort,
    shift+tab back to the filter and "ma" after its text. Tab was the screen's binding, run only after the
    keys that followed it had reached the field it left ("llar"); the filter selected its text on focus, so
    "ma" replaced it; and ``r`` was lost, as focus was back in the filter when it reached the app."""
    terminal.wait_for("Start ▶", "the New run form")
    terminal.keys("F3")
    terminal.wait_for("by PPL ↑", "the Results table, sorted by perplexity")
    terminal.keys("/", "lla", "Tab", "r", "BTab", "ma")
    screen = terminal.wait_for(lambda text: "llama" in text.splitlines()[1], "the filter's text, added to")
    assert "by PPL ↓" in terminal.wait_for("by PPL ↓", "the sort reversed on the table")
    assert "0 selected" in screen  # "a" went to the filter, not to the table (a: select every run)


def test_keys_after_a_screen_key_in_a_burst_reach_the_new_screen(terminal):
    """``F3 / lla`` in one read, from the New run form: Results (composed for the first time) gets ``/`` and
    "lla" in its filter; then ``Escape F4 / ma`` from the Results table: the Runs screen's filter gets "ma".
    F3 was the app's binding, run once it had bubbled up from the field focused before it, so the keys after
    it went to the form (the model field took "/lla") or to the screen left behind."""
    terminal.wait_for("Start ▶", "the New run form")
    terminal.keys("F3", "/", "lla")
    results = terminal.wait_for(lambda text: text.splitlines()[1].split()[:1] == ["lla"], "Results' filter typed into")
    assert "by PPL" in results
    terminal.keys("Escape", "F4", "/", "ma")
    runs = terminal.wait_for(lambda text: text.splitlines()[1].split()[:1] == ["ma"], "the Runs screen's filter")
    assert "Created" in runs


def test_keys_after_enter_or_a_run_key_in_a_burst_reach_the_screen_it_opens(terminal):
    """In one read each: ``/ 7b enter s`` on Results (the filter keeps "7b", the table sorts); ``enter i``
    on the table (the Run screen opens on its Config tab); on Runs, ``u xyz`` (the New run form, filled with
    the run's model, gets "xyz" after it). Enter and ``u`` were bindings run once they had bubbled up from
    the field or table, after the keys that followed: "s" joined the filter, "i" was lost on Results, "xyz"
    went to the Runs table (``enter l`` exported LaTeX instead of opening the run's log)."""
    terminal.wait_for("Start ▶", "the New run form")
    terminal.keys("F3")
    terminal.wait_for("by PPL ↑", "the Results table, sorted by perplexity")
    terminal.keys("/", "7b", "Enter", "s")
    sorted_by = terminal.wait_for("by Prune ↑", "the table sorted by the next column")
    assert sorted_by.splitlines()[1].split()[0] == "7b", "the filter keeps its text"
    terminal.keys("Enter", "i")
    terminal.wait_for("calibration  c4", "the Run screen's configuration")
    terminal.keys("F4")
    terminal.wait_for("2 of 2 ·", "the Runs table")
    terminal.keys("u", "xyz")
    terminal.wait_for("/models/llama-7bxyz", "the New run form filled, then typed into")


@pytest.mark.parametrize("no_color", [False, True], ids=["colour", "NO_COLOR"])
def test_every_screen_reads_at_80x24(store, tmp_path, no_color):
    """Issue 31, items 3-5: the Run screen's every tab named, a gap between the log and the plots, the
    histogram's legend in glyphs; Results' columns that tell runs apart, with whole ids; Runs' model and
    creation time; with colours and under NO_COLOR."""
    terminal = Terminal(store.path, tmp_path, env={"NO_COLOR": "1"} if no_color else {})
    try:
        terminal.wait_for("Start ▶", "the New run form")
        terminal.keys("F2")
        # the tabs are drawn before the run's scores are read: the histogram's legend comes in a later frame
        run = terminal.wait_for(lambda text: "Cfg" in text and "░ pruned" in text, "the Run screen's histogram")
        assert all(name in run for name in ("Scores", "Spars.", "Var", "Fid.", "Exp.", "Cfg"))
        assert "red" not in run and "blue" not in run
        terminal.keys("F3")
        results = terminal.wait_for("selected ·", "the Results table")
        header = next(line for line in results.splitlines() if "Method" in line)
        assert all(title in header for title in ("Method", "PPL", "Id")), header
        assert "run00001" in results  # whole ids, nothing past the right edge
        assert "Every run: Model llama-7b" in results  # what every row shares, said once
        terminal.keys("F4")
        runs = terminal.wait_for("2 of 2 ·", "the Runs table")
        assert "every run on llama-7b" in runs and "run00002" in runs
    finally:
        terminal.close()


@pytest.mark.parametrize("burst", [("F3", "F4", "F3"), ("F3", "F4", "F2", "F3")])
def test_a_burst_of_screen_keys_at_start_ends_drawn_on_the_last_screen(tmp_path, burst):
    """Right after start, with an empty store: ``F3 F4 F3`` in one read ended with the New run form still on
    the terminal, though Results was the screen (its keys worked, unseen). Results, shown for the second time
    in the burst, waited to be drawn while the Runs screen behind it redrew its footer in a batch; Textual
    tells only the app, not the screen, when a batch ends, and the screen was never drawn."""
    terminal = Terminal(Store(tmp_path / "empty.db").path, tmp_path, env={"NO_COLOR": "1"})
    try:
        terminal.wait_for(lambda text: "f5 Help" in text.splitlines()[-1], "the New run form and its footer")
        terminal.keys(*burst)
        results = terminal.wait_for("selected ·", "the Results screen, drawn", timeout=30)
        assert "Start ▶" not in results
    finally:
        terminal.close()


def test_the_app_ends_with_its_terminal(terminal, store):
    """The ``acetui`` command outlives a hang-up from its first instant (a prune must survive a dropped SSH
    session); the app must not: without its terminal it has nothing to do, and a headless app would hold its
    store open for ever. The runs it started are processes of their own and go on."""
    terminal.wait_for("Start ▶", "the New run form")
    app = terminal.app_pid()
    terminal.close()  # tmux hangs up on the app, as sshd does when the connection drops
    try:
        wait_until(lambda: not Path(f"/proc/{app}").exists(), "the app to end with its terminal", timeout=30)
    finally:
        if Path(f"/proc/{app}").exists():
            os.kill(app, signal.SIGKILL)


def top_line(screen: str, row_of: Callable[[str], bool]) -> str:
    """The text of the first screen line after the one ``row_of`` picks (a view's border)."""
    lines = screen.splitlines()
    return lines[next(i for i, line in enumerate(lines) if row_of(line)) + 1]


@pytest.mark.parametrize("view", ["keys panel", "full-screen log"])
def test_arrows_held_over_ssh_scroll_a_view_a_line_each(store, tmp_path, view):
    """Ten presses of down in one read (a held key over SSH) moved the Results keys panel one line: Textual
    moves a container after the next refresh, and each press of the burst started from where the view
    stood. The log (a ScrollView, which Textual scrolls at once) is held to the same."""
    run_id = max(run.id for run in store.list_runs())  # the newest, which F2 shows
    store.log_path(run_id).parent.mkdir(parents=True, exist_ok=True)
    store.log_path(run_id).write_text("".join(f"12:00:{i % 60:02d} line {i}\n" for i in range(200)))
    terminal = Terminal(store.path, tmp_path, env={"NO_COLOR": "1"})
    try:
        terminal.wait_for("Start ▶", "the New run form")
        if view == "keys panel":
            terminal.keys("F3")
            terminal.wait_for("selected ·", "the Results table")
            terminal.keys("F5")
            border = lambda line: "Keys · ↑ ↓" in line  # noqa: E731
            before = terminal.wait_for(border, "the keys panel")
        else:
            terminal.keys("F2")
            terminal.wait_for("line 199", "the run's log")
            terminal.keys("l")
            terminal.wait_for(run_id, "the log full screen")
            terminal.keys("Home")
            border = lambda line: run_id in line  # noqa: E731
            before = terminal.wait_for(lambda text: "line 0" in top_line(text, border), "the top of the log")
        lines = before.splitlines()
        first = next(i for i, line in enumerate(lines) if border(line)) + 1
        tenth = lines[first + 10].strip("▐█▌│ ")
        terminal.keys(*["Down"] * 10)
        terminal.wait_for(lambda text: tenth in top_line(text, border), "the view ten lines down", timeout=30)
    finally:
        terminal.close()


def test_escape_and_a_letter_in_one_burst_are_both_applied(store, tmp_path):
    """``Escape e`` in one read (back from the paper view, then export a CSV) is what a terminal sends for alt+e,
    and Textual read it so: the paper view stayed and nothing was exported."""
    exports = tmp_path / "exports"
    terminal = Terminal(store.path, tmp_path, env={"NO_COLOR": "1", "ACETUI_EXPORT_DIR": str(exports)})
    try:
        terminal.wait_for("Start ▶", "the New run form")
        terminal.keys("F3")
        terminal.wait_for("selected ·", "the Results table")
        terminal.keys("v")
        terminal.wait_for("┃ Method", "the paper view")
        terminal.keys("Escape", "e")
        terminal.wait_for("Saved", "the export's notice", timeout=30)
        assert len(list(exports.glob("*.csv"))) == 1
    finally:
        terminal.close()


def test_the_palette_applies_a_burst_in_order(terminal):
    """The command palette's field was Textual's own: a burst's backspaces and ctrl+u ran after the text
    typed after them ("delele"; ``C-u kill`` left it empty). ``Escape C-p`` on the keys screen opened the
    palette before the escape had closed the keys screen, which stayed under it."""
    terminal.wait_for("Start ▶", "the New run form")
    terminal.keys("F5")
    terminal.wait_for("Keys · ↑ ↓", "the keys screen")
    terminal.keys("Escape", "C-p", "dele")
    terminal.wait_for("🔎 dele", "the palette, typed into")
    terminal.keys("BSpace", "BSpace", "lete")
    terminal.wait_for("🔎 delete", "the palette's field, edited in order")
    terminal.keys("C-u", "kill")
    terminal.wait_for("🔎 kill", "the palette's field, emptied and typed into")
    terminal.keys("Escape")
    under = terminal.wait_for(lambda text: "🔎" not in text, "the palette closed")
    assert "Keys · ↑ ↓" not in under, "the keys screen, left under the palette"
