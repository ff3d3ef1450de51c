"""``?``: every key of the screen it was opened on (shown in the footer or not) and the keys that work
everywhere, each with what it does; keys that do nothing right now are dimmed. Escape, ``?`` or ``q``
close it."""

from __future__ import annotations

import re
from collections.abc import Callable

from rich.text import Text
from textual.actions import parse as parse_action
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from acetui.app.widgets.rowtable import RowTable
from acetui.app.widgets.scrolling import TextScroll


def screen_name(screen: type[Screen]) -> str:
    """A screen's name as the user reads it: ``NewRunScreen`` -> ``New run``."""
    words = re.findall(r"[A-Z][a-z]*", screen.__name__.removesuffix("Screen"))
    return " ".join([words[0], *(word.lower() for word in words[1:])]) if words else "This"


def screen_actions(screen: type[Screen], show_key: Callable[[Binding], str]) -> list[tuple[str, str, str]]:
    """``(action, what it does, its keys)`` of each of a screen's keys (those that name what they do), for the
    command palette: what it does ends with the footer's name for it (``Kill``, ``Delete``), so either finds
    it; its keys as ``show_key`` (``App.get_key_display``) shows them, as the footer does (``[``, not
    ``left_square_bracket``)."""
    actions: dict[str, tuple[str, list[str]]] = {}
    for binding in Binding.make_bindings(screen.BINDINGS):
        if binding.description:
            what = f"{binding.tooltip} · {binding.description}" if binding.tooltip else binding.description
            actions.setdefault(binding.action, (what, []))[1].append(show_key(binding))
    return [(action, what, " ".join(keys)) for action, (what, keys) in actions.items()]


def key_rows(screen: Screen) -> list[tuple[str, list[tuple[str, str, bool]]]]:
    """``(section, [(keys, what it does, available now)])`` for the screen's own keys and the app's."""
    app = screen.app
    sections = []
    # a list's own keys (home, end) are its table's, not the screen's: said with the screen's where it has one
    tables = list(screen.query(RowTable).results())[:1]
    nodes = [
        (f"{screen_name(type(screen))} screen", screen),
        *(("In its lists", t) for t in tables),
        ("Everywhere", app),
    ]
    for title, node in nodes:
        rows: dict[tuple[str, str], list[str]] = {}
        available: dict[tuple[str, str], bool] = {}
        for binding in Binding.make_bindings(node.BINDINGS):
            if not binding.description:
                continue
            _, name, params = parse_action(binding.action)
            what = binding.tooltip or binding.description
            rows.setdefault((binding.action, what), []).append(app.get_key_display(binding))
            available[(binding.action, what)] = node.check_action(name, params) is True
        sections.append(
            (title, [(" ".join(keys), what, available[(action, what)]) for (action, what), keys in rows.items()])
        )
    return sections


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,f5,q", "dismiss", "Close")]

    def __init__(self, screen: Screen) -> None:
        super().__init__()
        self.sections = key_rows(screen)

    def compose(self) -> ComposeResult:
        text = Text()
        for title, rows in self.sections:
            text.append(f"{title}\n", "bold")
            width = max((len(keys) for keys, _, _ in rows), default=0)
            for keys, what, now in rows:
                text.append(f"  {keys.ljust(width)}  ", "bold" if now else "dim")
                text.append(what + ("\n" if now else " (not now)\n"), "" if now else "dim")
            text.append("\n")
        text.append("ctrl+p: the command palette (type to find any action) · escape closes this", "dim")
        with TextScroll(id="help") as panel:
            # In the border, which a short terminal never hides: that there is more, and how to leave.
            panel.border_title = "Keys · ↑ ↓ PgUp PgDn scroll · escape, F5 or q close"
            yield Static(text, id="help-keys")
