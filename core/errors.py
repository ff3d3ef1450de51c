"""Errors that reach the user as one sentence."""

from collections.abc import Callable, Iterable
from typing import Any


class UserError(Exception):
    """Bad input or an unusable environment: the message is one clear sentence for the user.

    The faces print it without a traceback and exit with code 2.
    """


def first_line(error: BaseException) -> str:
    """The first line of an error's message (of its captured stderr, for a failed command), for a
    sentence that names what went wrong; the error's type when it says nothing."""
    text = getattr(error, "stderr", None) or str(error)
    text = text.decode() if isinstance(text, bytes) else text
    return (text.strip().splitlines() or [type(error).__name__])[0][:200]


class Cancelled(Exception):
    """The run was asked to stop; raised between layers, never mid-layer."""


def check_choice(value: Any, choices: Iterable[str], what: str) -> Any:
    """``value`` if it is one of ``choices`` (names, or a dict's keys); else one sentence naming them all,
    for example ``Unknown --x 'cost'; choose one of: seconds, tokens.`` Every closed set of values (the
    run settings' choices, tables, figures, themes) is checked here, so each says it the same way."""
    if value not in choices:
        raise UserError(f"Unknown {what} '{value}'; choose one of: {', '.join(choices)}.")
    return value


def one_of(what: str, choices: tuple[str, ...]) -> Callable[[Any], Any]:
    """``check_choice`` as a setting's parser."""
    return lambda value: check_choice(value, choices, what)
