"""The Results screen's paper view (``v``) on a terminal narrower than its tables: every cell whole, the view
scrolling sideways to the columns past the edge, the captions wrapped at the terminal's width."""

from __future__ import annotations

import re

import pytest
from runhelpers import Clock, insert_run, pilot_wait_until
from textual.geometry import Region
from tmuxterm import Terminal, needs_tmux

from acetui.app import make_app, paper
from acetui_core.run.config import RunConfig
from acetui_core.storage.store import Store

MARKS = "".join(glyph for glyph, _ in paper.VERDICT_MARKS.values())


@pytest.fixture
def perplexities(tmp_path) -> tuple[Store, dict[str, float]]:
    """Two models at three sparsities, two methods each (a comparison the audit ran): six column groups,
    perplexities with five digits before the point, measured over part of the test set (†)."""
    store = Store(tmp_path / "runs.db")
    perplexity = {}
    for model, base in (("tiny-llama", 50426.07), ("trained-llama", 1920.95)):
        for sparsity in ("0.5", "2:4", "4:8"):
            for method in ("magnitude", "wanda"):
                run_id = f"{len(perplexity):08x}"
                perplexity[run_id] = base + 37.31 * len(perplexity)
                config = RunConfig(model=model, method=method, sparsity=sparsity)
                insert_run(
                    store,
                    Clock(),
                    run_id,
                    config,
                    created=1.7e9 + len(perplexity),
                    ppl=perplexity[run_id],
                    partial=True,
                )
    return store, perplexity


@pytest.mark.asyncio
async def test_the_paper_view_at_80_columns_keeps_every_number_whole_and_scrolls_sideways(perplexities):
    """Six column groups at 80x24 read ``50426.0…`` and ``tiny-ll…``, the mark cut off, with no way to scroll
    to the rest: now each number is drawn with its mark, and the arrows scroll to the columns off the edge."""
    store, perplexity = perplexities
    app = make_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f3")
        await pilot_wait_until(pilot, lambda: app.screen.query_one("#results").row_count == len(perplexity), "rows")
        await pilot.press("v")
        tables = app.screen.query_one("#paper-table")

        def drawn() -> str:
            return "\n".join(strip.text for strip in tables.render_lines(Region(0, 0, *tables.outer_size)))

        await pilot_wait_until(pilot, lambda: "Method" in drawn(), "the paper view")
        text = drawn()
        assert "…" not in text, text
        for value in perplexity.values():
            assert re.search(rf"{value:.2f}†[{MARKS}]", text), (f"{value:.2f}†", text)
        assert text.count("tiny-llama") == 3 and text.count("trained-llama") == 3, text
        view = app.screen.query_one("#paper")
        captions = [line.rstrip() for line in text.splitlines() if not line.strip().startswith(tuple("┏┃┡│└"))]
        assert max(map(len, captions)) <= view.scrollable_content_region.width, captions  # read without scrolling
        assert app.focused is view and view.max_scroll_x > 0
        await pilot.press(*["right"] * 20)  # one burst, as SSH sends a held key: each press moves a column
        await pilot_wait_until(pilot, lambda: view.scroll_x == min(20, view.max_scroll_x), "the view scrolled right")
        await pilot.press(*["left"] * 5)
        await pilot_wait_until(pilot, lambda: view.scroll_x == min(20, view.max_scroll_x) - 5, "and back left")


@needs_tmux
@pytest.mark.slow  # the app in a real terminal
def test_arrows_held_over_ssh_scroll_the_paper_view_a_column_each(perplexities, tmp_path):
    """Twenty presses of right in one read (a held key over SSH) moved the view three columns: Textual moves
    a view after the next refresh, so each press of the burst started from where it stood."""
    store, _ = perplexities
    terminal = Terminal(store.path, tmp_path)
    try:
        terminal.wait_for("Start ▶", "the New run form")
        terminal.keys("F3")
        terminal.wait_for("by PPL ↑", "the Results table")
        terminal.keys("v")
        shown = terminal.wait_for("┃ Method", "the paper view").splitlines()
        row = next(i for i, line in enumerate(shown) if "┃ Method" in line)  # the headers' second line
        terminal.keys(*["Right"] * 20)
        moved = lambda text: text.splitlines()[row].startswith(shown[row][20:70])  # noqa: E731
        terminal.wait_for(moved, "the view 20 columns to the right", timeout=30)
    finally:
        terminal.close()
