"""acetui's Textual themes and stylesheet, loaded by name (``acetui --theme NAME``).

Three themes ship: ``dark`` and ``light`` in true colour, and ``ansi``, which uses only the
terminal's own 16 ANSI colours so the app reads well in 256-colour terminals and over SSH where
``COLORTERM`` is not forwarded. Textual's built-in themes (``nord``, ``gruvbox``...) are accepted
too. The layout lives in ``acetui.tcss`` and uses theme variables only, so it suits every theme.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from textual.theme import BUILTIN_THEMES, Theme

from acetui_core.basics.errors import UserError

STYLESHEET = Path(__file__).with_name("acetui.tcss")

THEMES: dict[str, Theme] = {
    theme.name: theme
    for theme in [
        Theme(
            name="dark",
            primary="#4C9BE8",
            secondary="#2A6FB0",
            accent="#F2A541",
            warning="#F2A541",
            error="#E5534B",
            success="#57AB5A",
            foreground="#E2E4E8",
            background="#15181D",
            surface="#1C2128",
            panel="#252B33",
            dark=True,
        ),
        Theme(
            name="light",
            primary="#1F5FA8",
            secondary="#3B7DD8",
            accent="#B35900",
            warning="#9A6700",
            error="#C62828",
            success="#1A7F37",
            foreground="#1F2328",
            background="#F6F8FA",
            surface="#FFFFFF",
            panel="#E6EAEF",
            dark=False,
        ),
        # Textual's own ANSI theme already maps every role onto the 16 terminal colours; acetui
        # keeps its variables and gives it a short name.
        replace(BUILTIN_THEMES["ansi-dark"], name="ansi"),
    ]
}

DEFAULT_THEME = "dark"
CYCLE = tuple(THEMES)  # the order the theme key steps through


def available() -> list[str]:
    """Every name ``--theme`` accepts: acetui's themes first, then Textual's built-ins."""
    return [*THEMES, *BUILTIN_THEMES]


def resolve(name: str | None) -> str:
    """The theme to start with: ``name`` if given, else ``ansi`` under ``NO_COLOR``, else ``dark``.

    Raises UserError for a name no theme has.
    """
    if name is None:
        return "ansi" if os.environ.get("NO_COLOR") is not None else DEFAULT_THEME
    if name not in available():
        raise UserError(f"Unknown theme '{name}'; choose one of: {', '.join(available())}.")
    return name


def next_theme(current: str) -> str:
    """The theme after ``current`` in acetui's cycle (a built-in theme steps back to the first)."""
    if current not in CYCLE:
        return CYCLE[0]
    return CYCLE[(CYCLE.index(current) + 1) % len(CYCLE)]
