"""The app never waits on statistics (issue 31, item 9): the paper view's verdicts are worked out in a
thread, only while the view is shown, once per set of runs. ``bench/results_latency.py`` measures the
keystroke latency this buys."""

from __future__ import annotations

import threading

import pytest
from runhelpers import pilot_wait_until
from test_app_snapshots import add_run
from textual.widgets import ContentSwitcher, DataTable, Input, Static

from acetui.app import make_app, paper
from acetui_core.storage.store import Store

SIZE = (80, 24)


@pytest.fixture
def store(tmp_path) -> Store:
    store = Store(tmp_path / "runs.db")
    for method, ppl in (("wanda", 7.89), ("ria", 7.27), ("ace", 7.11)):
        add_run(store, method, "0.5", ppl=ppl)
    return store


class SlowVerdicts:
    """``paper.view`` held until the test releases it (as bootstraps of hundreds of runs take seconds),
    noting the thread of each call."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.release = threading.Event()
        self.real = paper.view

    def __call__(self, *args, **kwargs):
        self.threads.append(threading.current_thread())
        self.release.wait(30)
        return self.real(*args, **kwargs)


@pytest.fixture
def slow_verdicts(monkeypatch) -> SlowVerdicts:
    slow = SlowVerdicts()
    monkeypatch.setattr(paper, "view", slow)
    yield slow
    slow.release.set()


@pytest.mark.asyncio
async def test_the_paper_view_is_worked_out_in_a_thread_only_when_shown_and_once_per_set_of_runs(store, slow_verdicts):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f3")
        table = app.screen.query_one("#results", DataTable)
        await pilot_wait_until(pilot, lambda: table.row_count == 3, "the runs")
        await pilot.press("space", "down", "space", "slash", "l", "escape")  # select, filter: the view is hidden
        assert slow_verdicts.threads == []
        await pilot.press("v")  # shown: worked out in a thread, the keys stay live meanwhile
        shown = app.screen.query_one("#paper-table", Static)
        assert str(shown.visual).startswith("Working out the verdicts of 2 run(s)")
        await pilot.press("slash", "x")
        assert app.screen.query_one("#filter", Input).value == "lx"  # typed while the verdicts are worked out
        assert str(shown.visual) == "No finished runs yet."  # none matches lx
        await pilot.press("backspace", "escape")
        slow_verdicts.release.set()
        await pilot_wait_until(pilot, lambda: not str(shown.visual).startswith("Working out"), "the verdicts drawn")
        assert threading.main_thread() not in slow_verdicts.threads
        computed = len(slow_verdicts.threads)
        await pilot.press("v", "v")  # hidden and shown again, the same runs: kept, not worked out again
        assert len(slow_verdicts.threads) == computed and not str(shown.visual).startswith("Working out")
        assert app.screen.query_one("#results-views", ContentSwitcher).current == "paper"
