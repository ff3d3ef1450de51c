"""The app as the place to watch runs: every key in every state, F2 following the active run, the end
notification's bytes, the configuration panel, the log pane, help, remembered settings, cancel asking
first, and the pure helpers behind them."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import time

import psutil
import pytest
from runhelpers import (
    Clock,
    cli,
    insert_run,
    layer_event,
    pilot_wait_until,
    result_for,
    screen_shown,
    send_in_one_read,
    tiny_prune_command,
)
from textual.actions import parse as parse_action
from textual.binding import Binding
from textual.filter import Monochrome, NoColor
from textual.widgets import DataTable, Input, RichLog, SelectionList, Static

import acetui_themes as themes
from acetui import notify, preferences
from acetui.app import make_app, summary
from acetui.app.app import AceApp
from acetui.app.candidates import model_candidates, starting_model
from acetui.app.confirm import ConfirmScreen
from acetui.app.help import HelpScreen
from acetui.app.screens.new_run import NewRunScreen
from acetui.app.screens.results import ResultsScreen
from acetui.app.screens.run import RunScreen
from acetui.app.screens.runs import RunsScreen
from acetui.app.widgets.marks import Tick
from acetui.app.widgets.plots import count_label, sparsity_series, sparsity_title, uniform_note
from acetui_core.basics.paths import bundled_model
from acetui_core.run.config import RunConfig
from acetui_core.run.events import RunFinished, RunStarted
from acetui_core.storage.store import Store

SIZE = (80, 24)
SCREENS = {"new": NewRunScreen, "run": RunScreen, "results": ResultsScreen, "runs": RunsScreen}
CONFIG = RunConfig(
    model="tiny-llama",
    method="ace",
    sparsity="2:4",
    nsamples=64,
    seqlen=32,
    seed=3,
    eval_limit=8,
    eval_seqlen=128,
    device="cpu",
    dtype="float32",
)


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / "runs.db")
    yield store
    for run in store.list_runs():  # no test leaves a worker process on the CPU
        if run.pid not in (None, os.getpid(), 4242):
            with contextlib.suppress(psutil.Error):
                psutil.Process(run.pid).wait(timeout=60)


def running_run(store: Store, config: RunConfig = CONFIG, layers: int = 1) -> str:
    """A run this test process owns (so it stays ``running``), with ``layers`` of 4 pruned."""
    run_id = store.create_run(config)
    store.claim(run_id)
    store.record_event(run_id, RunStarted(config.model, config.method, config.sparsity, 4, "cpu"))
    for index in range(layers):
        store.record_event(run_id, layer_event(index, 4))
    return run_id


def running_with_layers(store: Store, config: RunConfig, events: list) -> str:
    """A run started and with ``events`` (``layer_event``s, changed as a test needs) recorded."""
    run_id = store.create_run(config)
    store.claim(run_id)
    store.record_event(run_id, RunStarted(config.model, config.method, config.sparsity, len(events), "cpu"))
    for event in events:
        store.record_event(run_id, event)
    return run_id


def finished_run(store: Store) -> str:
    return insert_run(
        store,
        Clock(),
        "fin00001",
        RunConfig(model="tiny-llama", method="wanda", sparsity="0.5"),
        created=1_700_000_000.0,
        ppl=71.47,
    )


# ---- every key, every screen, every state ---------------------------------------------------------


@pytest.mark.slow  # some 300 key presses in all, over a minute: CI's sweep, not the edit loop's
@pytest.mark.asyncio
@pytest.mark.parametrize("state", ["no runs", "one running", "one finished"])
async def test_no_key_on_any_screen_raises(store, monkeypatch, tmp_path, state):
    """Every key bound on each screen (shown in the footer or not) and every app key, pressed on every
    screen: nothing raises. Modals it opens (confirm, help) are closed with escape, which is pressed too."""
    monkeypatch.setenv("ACETUI_EXPORT_DIR", str(tmp_path / "exports"))  # e and l export the finished run
    started = []
    monkeypatch.setattr(AceApp, "start_runs", lambda self, configs: started.append(configs) or [])
    if state == "one running":
        running_run(store)
    elif state == "one finished":
        finished_run(store)
    app = make_app(store)
    extra = ["enter", "up", "down", "tab", "escape"]
    async with app.run_test(size=SIZE) as pilot:
        await pilot_wait_until(pilot, lambda: app.runs_listed, "the run list")
        for mode, screen_class in SCREENS.items():
            keys = [
                b.key for b in Binding.make_bindings([*screen_class.BINDINGS, *AceApp.BINDINGS]) if b.key != "ctrl+q"
            ]
            for key in [*keys, *extra]:
                await app.switch_mode(mode)
                if mode == "run" and state != "no runs":
                    await pilot_wait_until(pilot, lambda: app.screen._run is not None, "the run on the Run screen")
                await pilot.press(key)
                await pilot.pause()
                while isinstance(app.screen, (ConfirmScreen, HelpScreen)):
                    await pilot.press("escape")
                    await pilot.pause()
                if app.screen.maximized is not None:
                    app.screen.minimize()
                if isinstance(app.focused, Input) and mode != "new":
                    app.screen.query_one(screen_class.AUTO_FOCUS).focus()
        assert app.is_running and app.return_code is None
    assert app._exception is None
    if state == "one running":
        assert not store.get_run(store.list_runs()[0].id, layers=False).cancel_requested  # escape said no


@pytest.mark.asyncio
async def test_every_screen_answers_its_footer_before_it_is_mounted(store):
    """The footer asks every binding's check_action while a screen is still being composed: the Run screen,
    first shown when a start's checks pass as the new run reaches the run list, raised there (no ``_run``
    yet) and was left without its tabs' widgets."""
    app = make_app(store)
    async with app.run_test(size=SIZE):
        for screen_class in SCREENS.values():
            screen = screen_class()
            for binding in Binding.make_bindings(screen_class.BINDINGS):
                _, action, parameters = parse_action(binding.action)
                assert screen.check_action(action, parameters) in (True, False, None)


# ---- F2 follows the active run --------------------------------------------------------------------


@pytest.mark.slow  # starts acetui processes of its own
@pytest.mark.asyncio
async def test_f2_opens_a_run_started_from_the_cli(store, make_tiny_model):
    model = str(make_tiny_model("llama"))
    finished_run(store)  # an older run: F2 must prefer the live one
    command = tiny_prune_command(model, "--detach")
    env = {**os.environ, "ACETUI_HOME": str(store.path.parent)}
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        assert isinstance(app.screen, NewRunScreen) and app.followed is None
        printed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert printed.returncode == 0, printed.stderr
        run_id = next(r.id for r in store.list_runs() if r.id != "fin00001")
        await pilot_wait_until(
            pilot, lambda: any(r.id == run_id and r.active for r in app.runs), "the CLI run in the list"
        )
        await pilot.press("f2")
        assert isinstance(app.screen, RunScreen) and app.followed == run_id
        await pilot_wait_until(
            pilot, lambda: store.get_run(run_id, layers=False).status == "finished", "the run to end", 120
        )


@pytest.mark.asyncio
async def test_f2_on_the_run_screen_of_an_ended_run_jumps_to_a_new_live_one(store):
    """Watching a finished run when another one starts (from the CLI): a toast says so and F2 opens it."""
    app = make_app(store, attach=finished_run(store))
    async with app.run_test(size=SIZE) as pilot:
        await pilot_wait_until(pilot, lambda: app.screen._run is not None, "the finished run on the Run screen")
        assert app.check_action("show_run", ()) is False  # nothing else to show: F2 is not offered
        live = running_run(store)
        await pilot_wait_until(pilot, lambda: any(r.id == live for r in app.runs), "the new run in the list")
        assert [toast.message for toast in app._notifications if "started" in toast.message] == [
            f"Run {live} (CosP+VarP-32 at 2:4) started: F2 shows it."
        ]
        await pilot.press("f2")
        assert isinstance(app.screen, RunScreen) and app.followed == live
        await pilot_wait_until(
            pilot, lambda: app.screen._run is not None and app.screen._run.id == live, "the live run"
        )


def test_which_run_f2_shows():
    """Active beats shown-and-ended; the shown run stays while active; with nothing active the shown one
    stays; else the newest."""

    def run(run_id, status, created):
        return type(
            "R", (), {"id": run_id, "status": status, "created": created, "active": status in ("queued", "running")}
        )()

    old, live, new = run("a", "finished", 1), run("b", "running", 2), run("c", "finished", 3)
    assert summary.run_to_show([old, live, new], None) == "b"
    assert summary.run_to_show([old, live, new], "a") == "b"
    assert summary.run_to_show([old, new], "a") == "a"
    assert summary.run_to_show([old, new], None) == "c"
    assert summary.run_to_show([], None) is None


def test_a_comparison_is_the_runs_of_one_batch(store):
    """The runs queued together share a batch in the store, whichever process executes them."""
    grid = [store.create_run(CONFIG, batch="grid") for _ in range(3)]
    alone = store.create_run(CONFIG)
    runs = store.list_runs()
    by_id = {run.id: run for run in runs}
    assert summary.batch_of(runs, by_id[grid[1]]) == tuple(grid)
    assert summary.batch_of(runs, by_id[alone]) == (alone,)


# ---- the end of a run is announced ----------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "mode, expected",
    [
        ("osc", "\a\x1b]9;acetui: {body}\x07\x1b]777;notify;acetui;{body}\x07"),
        ("bell", "\a"),
        ("none", ""),
    ],
)
async def test_the_end_of_a_run_rings_and_notifies(store, monkeypatch, mode, expected):
    for name in ("TMUX", "TERM_PROGRAM", "LC_TERMINAL", "VTE_VERSION", "WT_SESSION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    run_id = running_run(store)
    app = make_app(store, notify_mode=mode)
    async with app.run_test(size=SIZE) as pilot:
        written = []
        monkeypatch.setattr(app._driver, "write", written.append)
        await pilot_wait_until(pilot, lambda: app.runs_listed, "the run list")
        store.record_event(run_id, RunFinished(result_for(CONFIG, ppl=12.5, seconds=3.0)))
        body = f"{CONFIG.label} at 2:4 (run {run_id}) finished: ppl 12.50"
        await pilot_wait_until(pilot, lambda: any(body in str(n.message) for n in app._notifications), "the toast")
        assert "".join(written) == expected.format(body=body)
    assert preferences.load().notify == mode  # remembered


def test_osc_sequences_follow_the_terminal_and_tmux():
    body = "ACE-16 at 2:4 finished"
    assert notify.sequence("osc", "acetui", body, {"TERM_PROGRAM": "iTerm.app"}) == f"\a\x1b]9;acetui: {body}\x07"
    assert notify.sequence("osc", "acetui", body, {"VTE_VERSION": "7600"}) == f"\a\x1b]777;notify;acetui;{body}\x07"
    wrapped = notify.sequence("osc", "acetui", body, {"TERM_PROGRAM": "WezTerm", "TMUX": "/tmp/tmux-0/default"})
    assert wrapped == f"\a\x1bPtmux;\x1b\x1b]9;acetui: {body}\x07\x1b\\"
    assert notify.sequence("osc", "a\x1bb", "c\x07d", {"TERM_PROGRAM": "iTerm.app"}) == "\a\x1b]9;a b: c d\x07"


def test_runs_watch_rings_on_exit_and_remembers(store, monkeypatch, capsys):
    run_id = finished_run(store)
    terminal = io.StringIO()
    monkeypatch.setattr(notify, "terminal_stream", lambda: terminal)
    code, out, _ = cli(monkeypatch, capsys, "runs", "watch", run_id, "--store", store.path, "--notify", "bell")
    assert code == 0 and "finished: ppl 71.470" in out
    assert terminal.getvalue() == "\a"
    assert preferences.load().notify == "bell"
    terminal.seek(0)
    terminal.truncate()
    cli(monkeypatch, capsys, "runs", "watch", run_id, "--store", store.path)  # remembered
    assert terminal.getvalue() == "\a"


def test_a_bad_notify_value_is_one_sentence(store, monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "runs", "watch", "x", "--store", store.path, "--notify", "loud")
    assert code == 2 and err == "acetui: Unknown notification 'loud'; choose one of: bell, osc, none.\n"


def test_runs_with_a_status_that_matches_nothing_says_so(store, monkeypatch, capsys):
    finished_run(store)
    code, out, _ = cli(monkeypatch, capsys, "runs", "--status", "running", "--store", store.path)
    assert code == 0 and out == "No run matches --status running.\n"
    code, out, _ = cli(
        monkeypatch, capsys, "runs", "--model", "tiny-llama", "--status", "running", "--store", store.path
    )
    assert code == 0 and out == "No run matches --status running --model tiny-llama.\n"  # the model has runs


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_runs_of_a_model_the_store_has_no_run_of_is_one_sentence_and_exit_2(store, monkeypatch, capsys, json_flag):
    """``runs --model nosuch`` exited 0 where ``export --model nosuch`` exits 2: a script tests ``$?``."""
    finished_run(store)
    code, out, err = cli(monkeypatch, capsys, "runs", "--model", "nosuch", *json_flag, "--store", store.path)
    assert (code, out) == (2, "")
    assert err == f"acetui: No run in {store.path} matches --model nosuch; acetui runs lists them.\n"
    code, _, same = cli(monkeypatch, capsys, "export", "--model", "nosuch", "--store", store.path)
    assert code == 2 and same == err


# ---- what the Run screen shows --------------------------------------------------------------------


@pytest.mark.asyncio
async def test_the_config_panel_shows_what_the_run_was_started_with(store):
    run_id = running_run(store)
    app = make_app(store, attach=run_id)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot_wait_until(pilot, lambda: app.screen._run is not None, "the run")
        await pilot.press("i")
        text = str(app.screen.query_one("#config-text", Static).render())
        for expected in (
            "tiny-llama",
            "CosP+VarP-32 (ace)",
            "2:4, N:M groups of inputs",
            "c4: 64 samples × 32 tokens, seed 3",
            "first 8 windows of 128 tokens",
            "cpu",
            "float32",
            f"logs/{run_id}.log (beside the run store)",
        ):
            assert expected in text, expected


@pytest.mark.asyncio
async def test_the_variance_tab_says_why_a_run_drew_none(store):
    """Magnitude reads no activations: its Var[x²] tab was an empty box. It now says why; a run that has
    the statistic shows no note."""
    events = [layer_event(index, 2) for index in range(2)]
    for event in events:
        for linear in event.layer.linears:
            linear.act_stats = None  # what a magnitude run records
    run_id = running_with_layers(store, RunConfig(model="tiny-llama", method="magnitude", sparsity="0.5"), events)
    for attach, note in ((run_id, "Magnitude reads no calibration activations"), (finished_run(store), None)):
        app = make_app(store, attach=attach)
        async with app.run_test(size=SIZE) as pilot:
            await pilot_wait_until(
                pilot, lambda app=app: app.screen.query_one("#layers", DataTable).row_count == 2, "layers"
            )
            await pilot.press("v")
            shown = app.screen.query_one("#variance-note", Static)
            if note is None:
                assert not shown.display
            else:
                assert shown.display and str(shown.render()).startswith(note)


@pytest.mark.asyncio
async def test_the_fidelity_tab_of_a_run_without_calibration_says_why_not_run_with_fidelity(store):
    """A magnitude run reads no calibration tokens, so --fidelity is put back to off for it; its Fidelity tab
    said "no fidelity: run with --fidelity", which would only have sent the user round in a circle."""
    events = [layer_event(index, 2) for index in range(2)]
    run_id = running_with_layers(store, RunConfig(model="tiny-llama", method="magnitude", sparsity="0.5"), events)
    app = make_app(store, attach=run_id)
    async with app.run_test(size=SIZE) as pilot:
        await pilot_wait_until(pilot, lambda: app.screen.query_one("#layers", DataTable).row_count == 2, "layers")
        await pilot.press("f")
        await pilot.pause()
        shown = app.screen.query_one("#fidelity-note", Static)
        assert shown.display
        assert str(shown.render()).startswith("Magnitude reads no calibration activations, so this run has no output")


@pytest.mark.asyncio
async def test_a_run_that_ended_before_its_first_layer_does_not_say_yet(store):
    """A run cancelled before any layer said "no layer pruned yet", as if one were coming."""
    run_id = store.create_run(RunConfig(model="tiny-llama", method="wanda", sparsity="0.5"))
    store.set_status(run_id, "cancelled", error="Stopped on request before its first layer.")
    app = make_app(store, attach=run_id)
    async with app.run_test(size=SIZE) as pilot:
        title = app.screen.query_one("#run-title", Static)
        await pilot_wait_until(pilot, lambda: "cancelled" in str(title.render()), "the cancelled run")
        await pilot.pause()
        drawn = app.screen.query_one("#histogram").render().plain
        assert "the run ended before a layer" in drawn and "yet" not in drawn


@pytest.mark.asyncio
async def test_the_histogram_title_keeps_its_layer_and_threshold_at_80_columns(store):
    """``L11 self_attn.q_proj (1/7) thr 0.291`` is wider than the plot at 80 columns: it was cut at its end,
    the threshold lost. The linear's name gives way instead."""
    events = [layer_event(index, 12) for index in range(12)]
    for event in events:
        event.layer.linears[0].histogram.threshold = 0.2912
    run_id = running_with_layers(store, RunConfig(model="tiny-llama", method="wanda", sparsity="0.5"), events)
    app = make_app(store, attach=run_id)
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one("#layers", DataTable)
        await pilot_wait_until(pilot, lambda: table.row_count == 12, "the layers")
        table.move_cursor(row=11)
        await pilot.pause()
        drawn = app.screen.query_one("#histogram").render().plain
        title = next(line for line in drawn.splitlines() if "L11 " in line)
        assert "…" in title and title.strip().startswith("L11 ") and title.rstrip().endswith("(1/7) thr 0.291"), title


@pytest.mark.asyncio
async def test_a_deleted_run_leaves_the_run_screen(store):
    """Deleted (from Runs, or by ``acetui runs rm`` in another terminal), a run stayed on the Run screen, and
    ``u`` still re-ran it. The screen moves to the run F2 would show."""
    kept = finished_run(store)
    config = RunConfig(model="tiny-llama", method="ria", sparsity="0.5")
    doomed = insert_run(store, Clock(), "del00001", config, created=1_700_000_100.0, ppl=80.0)
    app = make_app(store, attach=doomed)
    async with app.run_test(size=SIZE) as pilot:
        title = app.screen.query_one("#run-title", Static)
        await pilot_wait_until(pilot, lambda: doomed in str(title.render()), "the run shown")
        await pilot_wait_until(pilot, lambda: app.runs_listed, "the run list")
        store.delete_runs([doomed])
        await pilot_wait_until(pilot, lambda: kept in str(title.render()), "the run F2 would show", timeout=20)
        assert app.followed == kept and doomed not in app.batch
        # said: another run's numbers under the user's eyes, silently, read as the deleted run's (app audit)
        said = f"Run {doomed} was removed from the store; the Run screen shows run {kept}."
        await pilot_wait_until(pilot, lambda: any(str(n.message) == said for n in app._notifications), "the notice")


@pytest.mark.asyncio
async def test_the_config_panel_follows_a_queued_run_as_it_starts(store):
    """Opened while the run waits in its queue, the panel must not keep saying "queued"."""
    run_id = store.create_run(CONFIG)
    app = make_app(store, attach=run_id)
    async with app.run_test(size=(120, 40)) as pilot:
        config = app.screen.query_one("#config-text", Static)
        await pilot_wait_until(pilot, lambda: f"{run_id} · queued" in str(config.render()), "the queued run's panel")
        store.claim(run_id)
        store.record_event(run_id, RunStarted(CONFIG.model, CONFIG.method, CONFIG.sparsity, 4, "cpu"))
        await pilot_wait_until(
            pilot, lambda: f"{run_id} · running" in str(config.render()), "the panel of the started run"
        )


@pytest.mark.asyncio
async def test_elapsed_time_and_the_resource_line_of_a_live_run(store):
    run_id = running_run(store)
    store.heartbeat(run_id, {"taken": time.time(), "rss_mb": 3072.0, "cpu_percent": 180.0})
    app = make_app(store, attach=run_id)
    async with app.run_test(size=SIZE) as pilot:
        resources = app.screen.query_one("#resources", Static)
        await pilot_wait_until(pilot, lambda: "RSS" in str(resources.render()), "the resource line")
        assert str(resources.render()) == "resources: RSS 3.0 GiB · CPU 180%"
        assert " elapsed · ETA " in str(app.screen.query_one("#stage", Static).render())


@pytest.mark.asyncio
async def test_the_finished_line_fits_at_80_columns_with_its_partial_mark(store):
    """An ended run's line is its result: no progress bar beside it, so the duration is not cut off."""
    config = RunConfig(model="tiny-llama", method="wanda", sparsity="2:4")
    run_id = insert_run(store, Clock(), "fin00002", config, created=1_700_000_000.0, ppl=409.61, partial=True)
    app = make_app(store, attach=run_id)
    async with app.run_test(size=SIZE) as pilot:
        stage = app.screen.query_one("#stage", Static)
        await pilot_wait_until(pilot, lambda: "took" in str(stage.render()), "the finished line")
        await pilot.pause()
        text = str(stage.render())
        assert text.startswith("finished · ppl 409.61† (2 windows) · prune 30.0s · took ")
        assert not app.screen.query_one("#progress").display
        assert stage.content_region.width >= len(text)


def test_a_long_comparison_line_keeps_the_shown_run_in_its_room():
    """Twelve runs do not fit the batch line's two lines at 80 columns: it was cut at its end, and the run
    shown, the twelfth, was the one lost. The runs around it are shown, with how many are left out."""
    from types import SimpleNamespace

    from rich.text import Text

    from acetui.app.runview import batch_line
    from acetui_core.basics.choices import RunStatus

    runs = [
        SimpleNamespace(
            id=f"r{i:02d}",
            status=RunStatus.QUEUED,
            label="CosP+VarP-16",
            config=SimpleNamespace(sparsity="2:4", target="2:4", seed=0),
        )
        for i in range(12)
    ]
    batch = tuple(run.id for run in runs)
    everything = Text.from_markup(batch_line(batch, runs, "r11")).plain
    assert everything.startswith("1 ") and "12 " in everything and "before" not in everything
    for shown, marks in (("r11", ["before"]), ("r00", ["after"]), ("r05", ["before", "after"])):
        line = Text.from_markup(batch_line(batch, runs, shown, room=140)).plain
        place = int(shown[1:]) + 1
        assert len(line) <= 140 and f"  {place} · CosP" in f"  {line}" and all(mark in line for mark in marks), line
        left_out = sum(int(n) for n in re.findall(r"(\d+) (?:before|after)", line))
        assert left_out + line.count("CosP+VarP-16") == 12, line


def test_resource_line_without_a_sample_says_why():
    run = type("R", (), {"resources": None, "status": "running", "host": "gpu-7", "active": True})()
    assert summary.resource_line(run, "laptop", 0.0) == "resources: no sample recorded yet (the run is on gpu-7)"
    run.host = "laptop"
    assert summary.resource_line(run, "laptop", 0.0) == "resources: no sample recorded yet"
    run.resources = {
        "taken": 100.0,
        "rss_mb": 512.0,
        "cpu_percent": 99.0,
        "gpu": "cuda:0",
        "gpu_used_mb": 40960.0,
        "gpu_total_mb": 81920.0,
        "gpu_process_mb": 30000.0,
        "gpu_util_percent": 88.0,
    }
    assert (
        summary.resource_line(run, "laptop", 160.0)
        == "resources: RSS 512 MiB · CPU 99% · cuda:0 40.0 GiB/80.0 GiB 88% (sampled 1m00s ago)"
    )


@pytest.mark.asyncio
async def test_the_full_screen_log_names_its_run_and_scrolls_with_the_keys(store):
    """Full screen (l), the keys went to the hidden layers table: Home did not reach the top of a long log,
    and nothing said whose log it was."""
    config = RunConfig(model="tiny-llama", method="wanda", sparsity="0.5")
    run_id = store.create_run(config)
    store.log_path(run_id).parent.mkdir(parents=True, exist_ok=True)
    store.log_path(run_id).write_text("".join(f"12:00:{i % 60:02d} line {i}\n" for i in range(200)))
    store.set_status(run_id, "failed", error="RuntimeError: out of patience")
    app = make_app(store, attach=run_id)
    async with app.run_test(size=SIZE) as pilot:
        log = app.screen.query_one("#log", RichLog)
        await pilot_wait_until(pilot, lambda: len(log.lines) >= 200, "the log file's lines")
        await pilot.press("l")
        await pilot.pause()
        assert app.focused is log and run_id in log.border_title
        await pilot.press("home")
        await pilot_wait_until(pilot, lambda: log.scroll_y == 0, "the top of the log")
        await pilot.press("end")
        await pilot_wait_until(pilot, lambda: log.scroll_y == log.max_scroll_y > 0, "the end of the log")
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen.maximized is None and isinstance(app.focused, DataTable) and not log.border_title


@pytest.mark.asyncio
async def test_the_full_screen_log_opened_in_a_burst_names_its_run_once_it_arrives(store, monkeypatch):
    """Runs, ``enter l`` in one read: the log went full screen before the run's record had arrived (here
    held back, as a busy store or machine does), titled "log · l: back" for good; ``l`` pressed later named
    the run."""
    import threading

    from acetui.app.screens import run as run_screen

    record_read, following = threading.Event(), run_screen.follow_run

    def late(*args):
        record_read.wait(timeout=30)
        following(*args)

    monkeypatch.setattr(run_screen, "follow_run", late)
    run_id = store.create_run(RunConfig(model="tiny-llama", method="wanda", sparsity="0.5"))
    store.set_status(run_id, "failed", error="RuntimeError: out of patience")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f4")
        table = app.screen.query_one("#runs", DataTable)
        await pilot_wait_until(pilot, lambda: table.row_count == 1, "the run")
        send_in_one_read(app, [("enter", "\r"), ("l", "l")])
        await pilot_wait_until(pilot, lambda: screen_shown(app, RunScreen) and app.screen.maximized, "the full log")
        log = app.screen.query_one("#log", RichLog)
        assert log.border_title == "log · l: back"  # no run read yet
        record_read.set()
        await pilot_wait_until(pilot, lambda: app.screen._run is not None, "the run's record")
        await pilot.pause()
        assert app.screen.maximized is log and log.border_title == f"log of {app.screen._run.label} {run_id} · l: back"


@pytest.mark.asyncio
async def test_the_log_pane_shows_a_failed_runs_traceback(store):
    config = RunConfig(model="tiny-llama", method="wanda", sparsity="0.5")
    run_id = store.create_run(config)
    store.log_path(run_id).parent.mkdir(parents=True, exist_ok=True)
    store.log_path(run_id).write_text(
        "12:00:01 load 0/1\nTraceback (most recent call last):\n"
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied\n"
    )
    store.set_status(run_id, "failed", error="RuntimeError: mat1 and mat2 shapes cannot be multiplied")
    app = make_app(store, attach=run_id)
    async with app.run_test(size=SIZE) as pilot:
        log = app.screen.query_one("#log", RichLog)
        shown = lambda: " ".join(line.text.strip() for line in log.lines)  # noqa: E731  (lines wrap at 80 columns)
        await pilot_wait_until(pilot, lambda: "multiplied" in shown(), "the log file's lines")
        assert shown().endswith(
            "Traceback (most recent call last): RuntimeError: mat1 and mat2 shapes cannot be multiplied"
        )
        narrow = len(log.lines)
        await pilot.press("l")
        assert app.screen.maximized is log  # full screen for a long traceback
        await pilot.pause()
        # Re-wrapped at the full width: the error sentence (63 characters) fits on one line again.
        assert len(log.lines) < narrow
        assert any(line.text.strip() == "RuntimeError: mat1 and mat2 shapes cannot be multiplied" for line in log.lines)
        await pilot.press("escape")
        assert app.screen.maximized is None
        await pilot.pause()
        assert len(log.lines) == narrow


def test_histogram_counts_are_labelled_compactly():
    """A 7B model's bins hold millions of weights: the y labels stay short (plotext's read 4718592.0)."""
    assert [count_label(n) for n in (0, 950, 1755.3, 12059, 4718592, 45e6)] == [
        "0",
        "950",
        "1.8k",
        "12k",
        "4.7M",
        "45M",
    ]


def test_the_sparsity_plot_has_one_line_per_kind_of_linear():
    layers = [layer_event(i, 2).layer for i in range(2)]
    series = sparsity_series(layers)
    assert list(series) == ["q", "k", "v", "o", "gate", "up", "down"]
    assert series["q"] == [(0, 0.5), (1, 0.5)]
    assert sparsity_title(series) == "sparsity: every linear 0.500"
    assert uniform_note(series) == "Every linear of every layer is at 0.500: the 7 lines lie on one another."


def test_a_linear_a_hair_over_the_rest_still_reads_as_uniform():
    """2:4 on weights that held a few zeros before pruning leaves a linear at 0.5001: on the plot and in
    the 3 decimals shown it is the others' 0.500, so the title and the note say every linear is there."""
    layers = [layer_event(i, 2).layer for i in range(2)]
    layers[1].linears[2].sparsity = 0.50013
    series = sparsity_series(layers)
    assert sparsity_title(series) == "sparsity: every linear 0.500"
    assert uniform_note(series).startswith("Every linear of every layer is at 0.500")
    layers[1].linears[2].sparsity = 0.52  # a real difference still shows as one
    series = sparsity_series(layers)
    assert sparsity_title(series) == "sparsity by layer and linear" and uniform_note(series) == ""


# ---- help, cancel, settings -----------------------------------------------------------------------


@pytest.mark.asyncio
async def test_question_mark_lists_every_key_of_the_screen(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2", "question_mark")
        assert isinstance(app.screen, HelpScreen)
        sections = dict(app.screen.sections)
        assert list(sections)[0] == "Run screen" and list(sections)[-1] == "Everywhere"
        rows, app_rows = sections["Run screen"], sections["Everywhere"]
        listed = {keys for keys, _, _ in rows}
        assert {"c", "]", "[", "n", "p", "h", "s", "v", "i", "l"} <= listed  # hidden ones too
        assert dict((keys, now) for keys, _, now in rows)["c"] is False  # no run to cancel
        assert {"f1", "f2", "f3", "f4", "f5 ?", "^q"} <= {keys for keys, _, _ in app_rows}
        await pilot.press("escape")
        assert isinstance(app.screen, RunScreen)


@pytest.mark.asyncio
@pytest.mark.parametrize("screen", ["f3", "f4"])
async def test_help_lists_the_keys_of_the_screens_list(store, screen):
    """home and end go to a list's first and last row (docs/app.md lists them): they are the table's keys,
    not the screen's, and F5 did not say them."""
    finished_run(store)
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(screen, "f5")
        assert isinstance(app.screen, HelpScreen)
        lists = dict(app.screen.sections)["In its lists"]
        assert [(keys, what) for keys, what, _ in lists] == [("home", "First row"), ("end", "Last row")]


@pytest.mark.asyncio
async def test_help_from_a_text_field_of_new_run_is_f5(store):
    """In the model field "?" is text; the footer offers f5 instead, which opens the keys of New run."""
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        model = app.screen.query_one("#model", Input)
        assert app.focused is model
        before = model.value
        await pilot.press("question_mark")
        assert model.value == before + "?" and isinstance(app.screen, NewRunScreen)
        footer_keys = [key.key for key in app.screen.query("FooterKey")]
        assert "f5" in footer_keys and "question_mark" not in footer_keys
        await pilot.press("f5")
        assert isinstance(app.screen, HelpScreen)
        (title, rows), _ = app.screen.sections
        assert title == "New run screen" and "^r" in {keys for keys, _, _ in rows}
        await pilot.press("f5")
        assert isinstance(app.screen, NewRunScreen)


@pytest.mark.asyncio
async def test_cancel_on_the_run_screen_asks_first(store):
    run_id = running_run(store)
    app = make_app(store, attach=run_id)
    async with app.run_test(size=SIZE) as pilot:
        await pilot_wait_until(pilot, lambda: app.screen._run is not None, "the run")
        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        assert not store.cancel_requested(run_id)
        await pilot.press("c", "y")
        await pilot_wait_until(pilot, lambda: store.cancel_requested(run_id), "the cancel request")


@pytest.mark.asyncio
async def test_preferences_survive_a_restart(store, monkeypatch):
    monkeypatch.setattr(AceApp, "start_runs", lambda self, configs: [])
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        screen.query_one("#model", Input).value = "org/some-model"
        screen.query_one("#sparsity", Input).value = "2:4, 4:8"
        screen.query_one("#seed", Input).value = "7"
        metrics = screen.query_one("#metrics", SelectionList)
        metrics.deselect_all()
        metrics.select("wanda")
        metrics.select("ria")
        await pilot.pause()
        await pilot.press("ctrl+r")  # remembered once the launcher's checks (a thread) have started the runs
        await pilot_wait_until(pilot, lambda: app.preferences.new_run.get("seed") == "7", "the form remembered")
        await pilot.press("ctrl+t")
        chosen_theme = app.theme
        app.set_notify("bell")
    assert chosen_theme != themes.DEFAULT_THEME

    again = make_app(store)
    async with again.run_test(size=SIZE) as pilot:
        screen = again.screen
        assert again.theme == chosen_theme and again.preferences.notify == "bell"
        assert screen.query_one("#model", Input).value == "org/some-model"
        assert screen.query_one("#sparsity", Input).value == "2:4, 4:8"
        assert screen.query_one("#seed", Input).value == "7"
        assert sorted(screen.query_one("#metrics", SelectionList).selected) == ["ria", "wanda"]


@pytest.mark.asyncio
async def test_an_unreadable_preferences_file_is_one_warning(store):
    preferences.preferences_path().parent.mkdir(parents=True, exist_ok=True)
    preferences.preferences_path().write_text("{not json")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert [str(n.message) for n in app._notifications] == [
            f"The settings file {preferences.preferences_path()} could not be read (it is not valid JSON); using the defaults."
        ]
        await pilot.press("ctrl+t")
    assert preferences.load().theme == app.theme  # rewritten whole


def test_a_preferences_file_saved_with_a_byte_order_mark_is_read():
    """Windows editors (Notepad) save UTF-8 with a BOM: the file was "not valid JSON" and every choice dropped."""
    preferences.preferences_path().parent.mkdir(parents=True, exist_ok=True)
    preferences.preferences_path().write_bytes(b'\xef\xbb\xbf{"theme": "light"}\n')
    loaded = preferences.load()
    assert (loaded.theme, loaded.problem) == ("light", None)


@pytest.mark.asyncio
async def test_the_model_field_starts_with_the_bundled_model_and_shows_its_name(store, smollm_gguf):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.screen.query_one("#model", Input).value == str(smollm_gguf)
        assert "Q4_1.gguf" in app.export_screenshot()  # the end of the path is in view at 80 columns


def test_only_models_that_exist_are_suggested(tmp_path):
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    recent = [str(tmp_path / "gone.gguf"), "org/hub-model", str(checkpoint), str(tmp_path / "gone-folder")]
    found = model_candidates(recent, root=tmp_path / "nothing-here")
    assert found[:2] == ["org/hub-model", str(checkpoint)]
    assert not any("gone" in candidate for candidate in found)
    assert starting_model(str(tmp_path / "gone.gguf")) == str(bundled_model() or "")
    assert starting_model(str(checkpoint)) == str(checkpoint)


@pytest.mark.asyncio
async def test_no_color_strips_colours_instead_of_drawing_black_on_black(store, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app(store)
    async with app.run_test(size=SIZE):
        assert app.theme == "ansi"
        filters = app.get_line_filters()
        assert any(isinstance(f, NoColor) for f in filters)
        assert not any(isinstance(f, Monochrome) for f in filters)


@pytest.mark.asyncio
async def test_an_unticked_box_is_empty(store):
    app = make_app(store, theme="ansi")
    async with app.run_test(size=SIZE):
        ticks = {tick.id: str(tick.render()) for tick in app.screen.query(Tick)}
        assert ticks["eval-wikitext2"].startswith("▐X▌")
        assert ticks["eval-zeroshot"].startswith("▐ ▌")


@pytest.mark.asyncio
async def test_the_command_palette_holds_the_apps_actions(store):
    run_id = running_run(store)
    app = make_app(store, attach=run_id)
    async with app.run_test(size=SIZE) as pilot:
        await pilot_wait_until(pilot, lambda: app.runs_listed, "the run list")
        titles = {command.title for command in app.get_system_commands(app.screen)}
        assert {
            "New run",
            "Show the active run",
            "Export results as CSV",
            "Export results as LaTeX",
            "Copy the LaTeX table",
            f"Cancel run {run_id}",
            "Next theme",
            "Help",
        } <= titles
        app.switch_mode("new")
        await pilot.press("ctrl+p")
        await pilot.press(*f"open run {run_id}")
        await pilot_wait_until(
            pilot,
            lambda: any(
                f"Open run {run_id}" in str(option.prompt) for option in app.screen.query("CommandList").first().options
            ),
            "the run among the palette's commands",
        )
        await pilot.press("enter")
        await pilot_wait_until(pilot, lambda: screen_shown(app, RunScreen), "the Run screen")
        assert app.followed == run_id


@pytest.mark.asyncio
async def test_the_command_palette_offers_every_screens_actions_from_any_screen(store):
    """Issue 31, item 8: "paper" typed in the palette on the Runs screen finds the Results screen's paper
    view, and choosing it switches screen first."""
    finished_run(store)
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f4")
        await pilot.press("ctrl+p", *"paper")
        await pilot_wait_until(
            pilot,
            lambda: any(
                "Results: The paper's layout" in str(option.prompt)
                for option in app.screen.query("CommandList").first().options
            ),
            "the Results screen's paper view among the palette's commands",
        )
        await pilot.press("enter")
        await pilot_wait_until(pilot, lambda: app.current_mode == "results", "the Results screen")
        await pilot_wait_until(
            pilot, lambda: app.screen.query_one("#results-views").current == "paper", "the paper view"
        )


@pytest.mark.asyncio
async def test_screen_keys_wait_while_a_dialog_is_open_and_leave_the_keys_screen(store):
    """F1-F4 are priority bindings (so that the keys typed after them reach the new screen), which Textual runs
    past a modal screen: under a confirm dialog they stay unused, as before; the keys screen, which asks
    nothing, they close and switch. ``escape F1`` in one burst switched nothing: F1 was read while the keys
    screen that escape was closing still held the keys; ``n F3`` dropped F3, read while the dialog that n
    answered was still on the stack."""
    finished_run(store)
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f4")
        await pilot_wait_until(
            pilot,
            lambda: screen_shown(app, RunsScreen) and app.screen.query_one("#runs", DataTable).row_count,
            "the run",
        )
        await pilot.press("f5")
        await pilot_wait_until(pilot, lambda: screen_shown(app, HelpScreen), "the keys of the Runs screen")
        send_in_one_read(app, [("escape", None), ("f1", None)])
        await pilot_wait_until(pilot, lambda: screen_shown(app, NewRunScreen), "the New run form")
        await pilot.press("f4")
        await pilot_wait_until(pilot, lambda: screen_shown(app, RunsScreen), "the Runs screen again")
        await pilot.press("d")  # delete the run: asks first
        await pilot_wait_until(pilot, lambda: screen_shown(app, ConfirmScreen), "the delete dialog")
        await pilot.press("f3", "f1")
        assert isinstance(app.screen, ConfirmScreen) and app.current_mode == "runs"
        send_in_one_read(app, [("n", "n"), ("f3", None)])  # the answer and the next screen, in one read
        await pilot_wait_until(pilot, lambda: screen_shown(app, ResultsScreen), "Results, once the dialog is closed")
        assert store.list_runs()  # n said no
        await pilot.press("f4")
        await pilot_wait_until(pilot, lambda: screen_shown(app, RunsScreen), "the Runs screen once more")
        await pilot.press("d")
        await pilot_wait_until(pilot, lambda: screen_shown(app, ConfirmScreen), "the delete dialog again")
        send_in_one_read(app, [("escape", None), ("f1", None)])
        await pilot_wait_until(pilot, lambda: screen_shown(app, NewRunScreen), "the New run form, once closed")
        assert store.list_runs()  # escape said no


@pytest.mark.asyncio
@pytest.mark.parametrize("screen_key", ["f3", "f4"])  # Results and Runs bind escape too (filter: back to the table)
async def test_escape_closes_the_keys_panel(store, screen_key):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(screen_key)
        screen = app.screen
        await pilot.press("question_mark")  # the keys of this screen
        await pilot_wait_until(pilot, lambda: screen_shown(app, HelpScreen), "the keys of the screen")
        await pilot.press("escape")
        await pilot_wait_until(pilot, lambda: app.screen is screen, "the keys closed")
        app.action_show_help_panel()  # Textual's keys panel (the palette's "Keys")
        await pilot.pause()
        assert screen.query("HelpPanel")
        await pilot.press("escape")
        await pilot.pause()
        assert not screen.query("HelpPanel")
        await pilot.press("slash", "escape")  # from the filter, escape still goes back to the table
        assert isinstance(screen.focused, DataTable)


@pytest.mark.asyncio
@pytest.mark.parametrize("close", [("escape", None), ("q", "q")])
async def test_help_after_closing_the_keys_panel_and_switching_screens_in_one_burst(store, close):
    """On Runs with the keys panel open, ``escape F3 F5`` (or ``q F3 F5``) in one burst: F3 closed the
    panel and went to Results, F5 opened Results' keys, and then the escape (handed to the closed panel,
    looked up from the screen shown once it reached the app) closed them: Results without its keys."""
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f4")
        await pilot_wait_until(pilot, lambda: screen_shown(app, RunsScreen), "the Runs screen")
        await pilot.press("f5")
        await pilot_wait_until(pilot, lambda: screen_shown(app, HelpScreen), "the keys of Runs")
        send_in_one_read(app, [close, ("f3", None), ("f5", None)])
        await pilot_wait_until(
            pilot,
            lambda: isinstance(app.screen_stack[0], ResultsScreen) and screen_shown(app, HelpScreen),
            "the keys of Results",
            timeout=10,
        )
        for _ in range(10):
            await pilot.pause(0.05)
        assert screen_shown(app, HelpScreen) and isinstance(app.screen_stack[0], ResultsScreen)
        assert app.screen.sections[0][0] == "Results screen"


# ---- Runs and Results tell runs apart -------------------------------------------------------------


@pytest.mark.asyncio
async def test_results_sort_steps_only_through_the_columns_shown(store):
    """Every run at seed 0 leaves Seed out of the table (it is in "Every run:"): ``s`` stopped on it, and on
    every other column left out, with nothing sorted that a user could see."""
    for number, (method, ppl) in enumerate((("wanda", 20.0), ("ace", 10.0), ("magnitude", 30.0))):
        config = RunConfig(model="tiny-llama", method=method, sparsity="0.5", seed=0)
        insert_run(store, Clock(), f"srt0000{number}", config, created=1_700_000_000.0 + number, ppl=ppl)
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f3")
        screen = app.screen
        table = screen.query_one("#results")
        await pilot_wait_until(pilot, lambda: table.row_count == 3, "three results")
        info = lambda: str(screen.query_one("#results-info", Static).render())  # noqa: E731
        headers = {str(column.label).rstrip(" ▲▼↑↓") for column in table.columns.values()}
        assert "Seed" not in headers
        seen = set()
        for key in ["s"] * len(screen.COLUMNS) + ["S"] * len(screen.COLUMNS):
            await pilot.press(key)
            seen.add(info().split(" by ", 1)[1].split(" ")[0])
        assert "Seed" not in seen and seen <= headers, seen - headers


@pytest.mark.asyncio
async def test_results_sort_by_method_sparsity_and_seed_and_reverse(store):
    def add(run_id, method, sparsity, seed, ppl):
        config = RunConfig(model="tiny-llama", method=method, sparsity=sparsity, seed=seed)
        insert_run(store, Clock(), run_id, config, created=1_700_000_000.0 + seed, ppl=ppl)

    add("aaaa0001", "wanda", "0.5", 0, 20.0)
    add("bbbb0002", "ace", "2:4", 1, 10.0)
    add("cccc0003", "magnitude", "0.6", 2, 30.0)
    app = make_app(store)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f3")
        screen = app.screen
        table = screen.query_one("#results")
        await pilot_wait_until(pilot, lambda: table.row_count == 3, "three results")
        order = lambda: [table.coordinate_to_cell_key((i, 0)).row_key.value for i in range(3)]  # noqa: E731
        info = lambda: str(screen.query_one("#results-info", Static).render())  # noqa: E731
        assert "by PPL ↑" in info() and order() == ["bbbb0002", "aaaa0001", "cccc0003"]
        await pilot.press("S")  # the column before PPL
        assert "by Sparsity ↑" in info() and order() == ["aaaa0001", "cccc0003", "bbbb0002"]  # N:M after ratios
        await pilot.press("S")
        assert "by Method ↑" in info() and order() == [
            "bbbb0002",
            "cccc0003",
            "aaaa0001",
        ]  # CosP+VarP, Magnitude, Wanda
        while "by Seed" not in info():
            await pilot.press("s")
        assert order() == ["aaaa0001", "bbbb0002", "cccc0003"]
        await pilot.press("r")
        assert "by Seed ↓" in info() and order() == ["cccc0003", "bbbb0002", "aaaa0001"]
        headers = [str(column.label) for column in table.columns.values()]
        assert headers[-5:] == ["Calib", "Seed", "Eval", "Date", "Id"]


@pytest.mark.asyncio
async def test_results_name_runs_that_differ_only_in_a_variant_apart(store):
    """Two Wanda runs at 4:8 that differ only in the permutation and DSnoT read the same label; the Method
    cell says what tells them apart (as the paper view's rows do), and leaves out what the Calib column
    already shows. Where the whole labels do not fit (60 columns here; the 72 runs of the methods study at
    80), a setting at its default goes unsaid, the cell wraps where it must, and the whole run id stays."""
    variants = {
        "aaaa0001": {},
        "bbbb0002": {"permute": "lsa"},
        "cccc0003": {"permute": "lsa", "refine": "dsnot"},
        "dddd0004": {"nsamples": 32},
    }
    for number, (run_id, settings) in enumerate(variants.items()):
        config = RunConfig(model="tiny-llama", method="wanda", sparsity="4:8", **settings)
        insert_run(store, Clock(), run_id, config, created=1_700_000_000.0 + number, ppl=20.0 + number)
    cells = {}
    for size in ((160, 40), (60, 24)):
        app = make_app(store)
        async with app.run_test(size=size) as pilot:
            await pilot.press("f3")
            table = app.screen.query_one("#results")
            await pilot_wait_until(pilot, lambda table=table: table.row_count == 4, "four results")
            headers = [str(column.label) for column in table.columns.values()]
            rows = [dict(zip(headers, map(str, table.get_row_at(i)), strict=True)) for i in range(4)]
            cells[size[0]] = {row["Id"]: " ".join(row["Method"].split()) for row in rows}  # a cell that wraps
    assert cells[160] == {
        "aaaa0001": "Wanda-16 (no permutation, no refinement)",
        "bbbb0002": "Wanda-16 (lsa permutation, no refinement)",
        "cccc0003": "Wanda-16 (lsa permutation, DSnoT)",
        "dddd0004": "Wanda-16 (no permutation, no refinement)",  # its 32 samples: the Calib column's
    }
    assert cells[60] == {
        "aaaa0001": "Wanda-16",
        "bbbb0002": "Wanda-16 (lsa permutation)",
        "cccc0003": "Wanda-16 (lsa permutation, DSnoT)",
        "dddd0004": "Wanda-16",
    }


@pytest.mark.asyncio
async def test_runs_show_perplexity_duration_and_a_bar_for_a_running_run(store):
    live = running_run(store, layers=1)  # 1 of 4 layers
    done = finished_run(store)
    app = make_app(store)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f4")
        table = app.screen.query_one("#runs")
        await pilot_wait_until(pilot, lambda: table.row_count == 2, "two runs")
        rows = {str(table.get_row_at(i)[0]): [str(c) for c in table.get_row_at(i)] for i in range(2)}
        headers = [str(column.label) for column in table.columns.values()]
        live_row, done_row = dict(zip(headers, rows[live], strict=True)), dict(zip(headers, rows[done], strict=True))
        assert live_row["Layers"] == "██░░░░ 1/4" and live_row["PPL"] == "–" and live_row["Took"].endswith("s")
        assert done_row["Layers"] == "2/2" and done_row["PPL"] == "71.47" and done_row["Took"] != "–"


@pytest.mark.asyncio
async def test_a_group_remembered_before_it_could_be_left_blank_gives_way_to_the_methods(store):
    """A form saved before RIA's default became its code's held row as every method's default, not as a
    choice: RIA started from it must not run the per-row variant. A row chosen since is kept."""
    from textual.widgets import Select

    for saved, shown in (({"group": "row"}, Select.NULL), ({"group": "row", "sparsity_scope": "all"}, "row")):
        preferences.update(new_run={"seed": "0", **saved})
        app = make_app(store)
        async with app.run_test(size=SIZE):
            assert app.screen.query_one("#group", Select).value == shown
