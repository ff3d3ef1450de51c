"""The command palette (ctrl+p) finds each screen's actions by the names the footer gives them, and shows
their keys as the footer does."""

from __future__ import annotations

import pytest
from runhelpers import pilot_wait_until

from acetui.app import make_app
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
