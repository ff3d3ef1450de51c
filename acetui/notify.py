"""Telling the user in the terminal that a run ended: the bell, and desktop notifications through the
OSC 9 (iTerm2, kitty, WezTerm, ghostty, Windows Terminal) and OSC 777 (VTE terminals, foot, urxvt)
escape sequences. They are plain bytes on the terminal, so they reach the user's own terminal over SSH,
and they work while the window is not focused. Used by the app and ``acetui runs watch``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import TextIO

from acetui_core.basics.errors import UserError

MODES = ("bell", "osc", "none")
BELL = "\a"


def check_mode(text: str) -> str:
    mode = text.strip().lower()
    if mode not in MODES:
        raise UserError(f"Unknown notification '{text}'; choose one of: {', '.join(MODES)}.")
    return mode


def _clean(text: str) -> str:
    """Text safe inside an OSC string: no control characters (an ESC or BEL would end it early)."""
    return re.sub(r"[\x00-\x1f\x7f]", " ", text)


def osc_codes(environ: Mapping[str, str]) -> tuple[int, ...]:
    """Which notification sequences the terminal understands, where the environment names it; both
    when it does not (over SSH it rarely does; a terminal ignores the OSC codes it does not know)."""
    term, program = environ.get("TERM", ""), environ.get("TERM_PROGRAM", "") or environ.get("LC_TERMINAL", "")
    if (
        program in ("iTerm.app", "iTerm2", "WezTerm", "ghostty", "vscode")
        or "kitty" in term
        or environ.get("WT_SESSION")
    ):
        return (9,)
    if environ.get("VTE_VERSION") or term.startswith(("foot", "rxvt")):
        return (777,)
    return (9, 777)


def sequence(mode: str, title: str, body: str, environ: Mapping[str, str] | None = None) -> str:
    """The bytes that announce ``title: body`` in ``mode`` (empty for ``none``)."""
    environ = os.environ if environ is None else environ
    if mode == "none":
        return ""
    if mode == "bell":
        return BELL
    title, body = _clean(title), _clean(body)
    codes = {9: f"\x1b]9;{title}: {body}\x07", 777: f"\x1b]777;notify;{title.replace(';', ',')};{body}\x07"}
    osc = "".join(codes[code] for code in osc_codes(environ))
    if environ.get("TMUX"):  # tmux passes escape sequences to the outer terminal only wrapped (allow-passthrough)
        osc = "\x1bPtmux;" + osc.replace("\x1b", "\x1b\x1b") + "\x1b\\"
    return BELL + osc


def send(mode: str, title: str, body: str, write: Callable[[str], object]) -> None:
    text = sequence(mode, title, body)
    if text:
        write(text)


def terminal_stream() -> TextIO | None:
    """Where the CLI writes notifications: the terminal behind stderr or stdout; None when neither is one
    (output to a file or a pipe gets no control bytes)."""
    for stream in (sys.stderr, sys.stdout):
        if stream.isatty():
            return stream
    return None


def notify_terminal(mode: str, title: str, body: str) -> None:
    """``send`` to the CLI's terminal, if it has one."""
    stream = terminal_stream()
    if stream is not None:
        send(mode, title, body, lambda text: (stream.write(text), stream.flush()))


def remembered_mode(given: str | None) -> str:
    """The CLI's mode: ``--notify`` if given (and remembered for next time), else the remembered one.
    Trouble with the preferences file (settings.json) is a warning on stderr: it never stops a watch."""
    from acetui import preferences

    user = preferences.load()
    if given is None:
        if user.problem:
            print(f"acetui: {user.problem}", file=sys.stderr)
        return user.notify if user.notify in MODES else preferences.Preferences().notify
    mode = check_mode(given)
    try:
        preferences.update(notify=mode)
    except UserError as error:
        print(f"acetui: {error}", file=sys.stderr)
    return mode
