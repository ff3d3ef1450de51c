"""The app in a real terminal, through tmux (issue 31): keys sent in one burst, as SSH and tmux deliver
them, and the screens read back as text at 80x24, with colours and under ``NO_COLOR``."""

from __future__ import annotations

import pytest
from test_app_snapshots import add_run
from tmuxterm import Terminal, needs_tmux

from acetui_core.store import Store

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
