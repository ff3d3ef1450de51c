"""The command palette (ctrl+p) finds each screen's actions by the names the footer gives them, and shows
their keys as the footer does; it applies the keys of a burst in the order they were typed."""

from __future__ import annotations

import pytest
from runhelpers import pilot_wait_until, send_in_one_read
from textual.command import CommandInput, CommandPalette

from acetui.app import make_app
from acetui.app.help import HelpScreen
from acetui.app.screens.runs import RunsScreen
from acetui_core.storage.store import Store

SIZE = (80, 24)


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(tmp_path / "runs.db")


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("typed", "found"),
    [
        ("kill", ("Run", "Kill")),
        ("kill", ("Runs", "Kill")),
        ("delete", ("Runs", "Delete")),
        ("remove", ("Runs", "Delete")),
    ],
)
async def test_the_palette_finds_an_action_by_its_footer_name(store, typed, found):
    screen, name = found
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f4")
        await pilot_wait_until(pilot, lambda: isinstance(app.screen, RunsScreen), "the Runs screen")
        await pilot.press("ctrl+p", *typed)
        await pilot_wait_until(
            pilot,
            lambda: any(
                str(option.prompt).startswith(f"{screen}: ") and f" · {name}" in str(option.prompt)
                for option in app.screen.query("CommandList").first().options
            ),
            f"{screen}: {name} among the palette's commands",
        )


@pytest.mark.asyncio
async def test_the_palette_shows_keys_as_the_footer_does(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot_wait_until(pilot, lambda: app.runs_listed, "the run list")
        helps = {command.title: command.help for command in app.get_system_commands(app.screen)}
    assert helps["Run: The histogram of the layer's previous linear · Prev linear"] == "[ on Run"
    assert not any("square_bracket" in text for text in helps.values())


async def palette_typed_into(pilot, app, typed: str, burst: list[tuple[str, str | None]]) -> str:
    """The palette's search text after ``typed`` (key by key) and then ``burst`` in one read (SSH, tmux)."""
    await pilot.press("ctrl+p")
    await pilot_wait_until(pilot, lambda: CommandPalette.is_open(app) and app.focused is not None, "the palette")
    await pilot.press(*typed)
    send_in_one_read(app, burst)
    await pilot.pause(0.2)
    await pilot.pause()
    return app.screen.query_one(CommandInput).value


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("typed", "burst"),
    [
        ("dele", [("backspace", None), ("backspace", None), *[(c, c) for c in "lete"]]),
        ("kill", [("ctrl+u", None), *[(c, c) for c in "delete"]]),
    ],
    ids=["backspaces", "ctrl+u"],
)
async def test_the_palette_applies_editing_keys_typed_in_one_burst_in_order(store, typed, burst):
    """Textual's own palette field ran its editing keys after the text that followed them in the burst:
    "delele", and an empty field after ``C-u delete``."""
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        assert await palette_typed_into(pilot, app, typed, burst) == "delete"


@pytest.mark.asyncio
async def test_escape_then_ctrl_p_in_one_burst_leaves_the_keys_screen_for_the_palette(store):
    """``escape C-p`` in one read on the keys screen (F5): ctrl+p, run as the app reads it, opened the palette
    before the escape reached the keys screen, and the escape then closed the palette, not the keys."""
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f5")
        await pilot_wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), "the keys screen")
        send_in_one_read(app, [("escape", "\x1b"), ("ctrl+p", None), *[(c, c) for c in "runs"]])
        await pilot_wait_until(
            pilot,
            lambda: CommandPalette.is_open(app) and app.screen.query_one(CommandInput).value == "runs",
            "the palette, typed into",
        )
        await pilot.pause(0.2)
        assert CommandPalette.is_open(app)
        assert not any(isinstance(screen, HelpScreen) for screen in app.screen_stack)
