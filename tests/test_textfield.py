"""Keys read in one burst are applied in order (issue 31, item 1). SSH and tmux hand the app several keys in
one read; Textual's ``Input`` types the printable ones at once but runs its editing keys (backspace, the
arrows, home, end) as bindings after the key has bubbled up to the app, so they land after the keys that
followed them. ``TextField`` applies them as they come. The burst here is sent as the driver hands a read
over (``pilot.press`` would wait between keys); ``test_app_tmux.py`` sends it through a real terminal."""

from __future__ import annotations

import pytest
from runhelpers import send_in_one_read
from textual.app import App
from textual.widgets import Input

from acetui.app.widgets.textfield import TextField

# "0.25", end, four backspaces, "0.5", home, "x", right twice, "y": "x0.y5" when applied in order.
BURST = [("end", None), *[("backspace", None)] * 4, ("0", "0"), ("full_stop", "."), ("5", "5")]
BURST += [("home", None), ("x", "x"), ("right", None), ("right", None), ("y", "y")]


class OneField(App):
    def __init__(self, field: type[Input]) -> None:
        super().__init__()
        self.field = field

    def compose(self):
        yield self.field("0.25")


async def typed_in_one_read(kind: type[Input]) -> str:
    app = OneField(kind)
    async with app.run_test() as pilot:
        field = app.query_one(Input)
        field.focus()
        await pilot.pause()
        send_in_one_read(app, BURST)
        await pilot.pause(0.2)
        await pilot.pause()
        return field.value


@pytest.mark.asyncio
async def test_a_plain_input_reorders_a_burst_the_reproduction():
    """Textual's own ``Input``: the typed keys land first, the editing keys after them. The day this fails,
    Textual applies a burst in order and ``TextField`` can go."""
    assert await typed_in_one_read(Input) != "x0.y5"


@pytest.mark.asyncio
async def test_a_text_field_applies_a_burst_in_order():
    assert await typed_in_one_read(TextField) == "x0.y5"
