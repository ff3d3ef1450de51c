"""Runs still going when the app opens (a notice, F2 follows them) or closes (a line on the terminal
saying how to follow them)."""

from __future__ import annotations

import pytest
from runhelpers import cli, pilot_wait_until

from acetui.app import make_app
from acetui.app.app import AceApp
from acetui.app.screens.run import RunScreen
from acetui_core.run.config import RunConfig
from acetui_core.run.events import RunStarted
from acetui_core.storage.store import Store

SIZE = (80, 24)


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(tmp_path / "store" / "runs.db")


def toasts(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


def running(store: Store, run_id: str, method: str = "wanda") -> str:
    """A run this test process owns, so that it stays running."""
    config = RunConfig(model="tiny-llama", method=method, sparsity="0.5")
    store.create_run(config, run_id=run_id)
    store.claim(run_id)
    store.record_event(run_id, RunStarted(config.model, config.method, config.sparsity, 4, "cpu"))
    return run_id


@pytest.mark.asyncio
async def test_opening_the_app_while_runs_go_on_says_so(store):
    running(store, "ffff0006")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot_wait_until(pilot, lambda: any("still going" in t for t in toasts(app)), "the notice")
        notice = next(t for t in toasts(app) if "still going" in t)
        assert "ffff0006" in notice and "F2" in notice
        await pilot.press("f2")
        await pilot_wait_until(pilot, lambda: isinstance(app.screen, RunScreen), "the Run screen")
        assert app.followed == "ffff0006"


@pytest.mark.asyncio
async def test_opening_the_app_with_no_run_going_says_nothing_of_runs(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot_wait_until(pilot, lambda: app.runs_listed, "the run list")
        await pilot.pause()
        assert not any("still going" in t for t in toasts(app))


def test_quitting_while_runs_go_on_says_on_the_terminal_how_to_follow_them(store, monkeypatch, capsys):
    monkeypatch.setattr("acetui.commands.app.require_terminal", lambda: None)
    monkeypatch.setattr(AceApp, "run", lambda self: None)  # as if the user quit at once
    code, out, _ = cli(monkeypatch, capsys, "--store", str(store.path))
    assert code == 0 and out == ""  # no run going: nothing said
    running(store, "ffff0006")
    running(store, "gggg0007", "magnitude")
    code, out, _ = cli(monkeypatch, capsys, "--store", str(store.path))
    assert code == 0 and "2 runs are still going" in out and "ffff0006" in out and "gggg0007" in out
    assert f"acetui attach gggg0007 --store {store.path}" in out and f"acetui runs --store {store.path}" in out
