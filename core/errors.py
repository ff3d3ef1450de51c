"""Errors that reach the user as one sentence."""


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


def check_choice(value: str, choices, what: str) -> None:
    """``value`` must be one of ``choices`` (names, or a dict's keys): else one sentence naming them all,
    for example ``Unknown --x 'cost'; choose one of: seconds, tokens.``"""
    if value not in choices:
        raise UserError(f"Unknown {what} '{value}'; choose one of: {', '.join(choices)}.")
