"""Errors that reach the user as one sentence."""

from collections.abc import Callable, Iterable
from typing import Any, Protocol


class UserError(Exception):
    """Bad input or an unusable environment: the message is one clear sentence for the user.

    The faces print it without a traceback and exit with code 2.
    """


FIRST_LINE_CHARS = 200  # an error's message in a sentence: enough to say what went wrong, never a page


def first_line(error: BaseException) -> str:
    """The first line of an error's message (of its captured stderr, for a failed command), for a
    sentence that names what went wrong; the error's type when it says nothing. A first line that ends in
    ':' only introduces the detail (``Validation error for field 'hidden_size':``): the next comes with it.
    A longer line is cut, ending in an ellipsis."""
    text = getattr(error, "stderr", None) or str(error)
    text = text.decode() if isinstance(text, bytes) else text
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()] or [type(error).__name__]
    line = f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]
    return line if len(line) <= FIRST_LINE_CHARS else line[: FIRST_LINE_CHARS - 1] + "…"


def os_sentence(error: OSError) -> str:
    """An OS refusal on a path a user gave or chose (a full disk, a read-only folder, a file where a folder
    should be) as one sentence: ``Cannot use /x/y.csv: Permission denied.``, never Python's ``[Errno 13]``."""
    reason = error.strerror or str(error)
    return f"Cannot use {error.filename}: {reason}." if error.filename else f"{reason}."


class Cancelled(Exception):
    """The run was asked to stop; raised where a long loop checks the request (between layers, between
    calibration windows, between evaluation batches), never mid-layer. Its message says where it stopped
    (``before layer 3 of 30``); ``signum`` is the stop signal that asked, None for a request from the
    store or the app; ``cancelled``, how many runs the stop left recorded cancelled (a grid's or a study's
    queue: the runs under way and those that had not started)."""

    def __init__(self, where: str = "", signum: int | None = None, cancelled: int = 1):
        super().__init__(where)
        self.where, self.signum, self.cancelled = where, signum, cancelled


class StopFlag(Protocol):
    """What a long loop checks: a ``threading.Event``, or ``heartbeat.Either`` of two."""

    def is_set(self) -> bool: ...


def check_stop(cancel: StopFlag | None, where: str) -> None:
    """Raise ``Cancelled`` when ``cancel`` (an Event, or None) is set; ``where`` says how far the run got."""
    if cancel is not None and cancel.is_set():
        raise Cancelled(where)


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
