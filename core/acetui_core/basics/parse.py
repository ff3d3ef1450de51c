"""The one parser for every number and list a user types: CLI options, the New run form, grids.

Each function takes the text as typed and the option's name, and either returns the value or raises a
``UserError`` whose sentence names the option. Digits are ASCII only: ``str.isdigit`` accepts ``²``,
which ``int`` then refuses.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from acetui_core.basics.choices import EvalKind
from acetui_core.basics.errors import UserError

_WHOLE = re.compile(r"[+-]?[0-9]+")  # a sign too: "-1" is out of range, not "not a whole number"


def items(text: str | None, unique: bool = True) -> list[str]:
    """Comma-separated items, stripped, empty ones dropped, repeats removed (first kept) when ``unique``."""
    parts = [part.strip() for part in str(text or "").split(",") if part.strip()]
    return list(dict.fromkeys(parts)) if unique else parts


def each_once(values: list, flag: str, key: Callable[[Any], Any] = lambda value: value) -> list:
    """``values``, refused when one repeats: ``--seeds 0,0`` meant two seeds and would run one. ``key``:
    what makes two values the same (one file named two ways)."""
    keys = [key(value) for value in values]
    for index, found in enumerate(keys):
        if found in keys[:index]:
            first, again = values[keys.index(found)], values[index]
            also = "" if first == again else f" (as {first} and {again})"
            raise UserError(f"{flag} gives {first} twice{also}; give each value once.")
    return values


def some(text: str | None, flag: str) -> list[str]:
    """``items``, at least one."""
    values = items(text)
    if not values:
        raise UserError(f"{flag} needs at least one value.")
    return values


def whole(text, flag: str, minimum: int = 0) -> int:
    """A whole number of at least ``minimum``."""
    value = str(text).strip()
    if isinstance(text, bool) or not _WHOLE.fullmatch(value):
        raise UserError(f"{flag} must be a whole number, not '{value}'.")
    number = int(value)
    if number < minimum:
        raise UserError(f"{flag} must be at least {minimum} (got {number}).")
    return number


def optional_whole(text, flag: str, minimum: int = 0) -> int | None:
    """``whole``, or None for an empty text."""
    return None if text is None or str(text).strip() == "" else whole(text, flag, minimum)


def seqlen(text, flag: str = "--seqlen") -> int | str:
    """A window length: ``full`` (the model's context) or a whole number of at least 2 tokens."""
    value = str(text).strip()
    if value == "full":
        return value
    if not _WHOLE.fullmatch(value):
        raise UserError(f"{flag} must be a number of tokens or 'full', not '{value}'.")
    return whole(value, flag, minimum=2)


def number(text, flag: str, minimum: float | None = None) -> float:
    """A finite real number, of at least ``minimum`` when one is given."""
    try:
        value = float(str(text).strip())
    except ValueError:
        raise UserError(f"{flag} must be a number, not '{str(text).strip()}'.") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise UserError(f"{flag} must be a finite number, not '{str(text).strip()}'.")
    if minimum is not None and value < minimum:
        raise UserError(f"{flag} must be at least {minimum:g} (got {value:g}).")
    return value


def evals(text: str, flag: str = "--eval") -> list[str]:
    """``wikitext2``, ``zeroshot``, both comma-separated, or ``none``; nothing at all (an unset variable) is
    refused, never taken for ``none``."""
    values = [] if str(text).strip() == "none" else items(text)
    if not values and str(text).strip() != "none":
        raise UserError(f"{flag} needs at least one value: wikitext2, zeroshot, both comma-separated, or none.")
    unknown = [value for value in values if value not in tuple(EvalKind)]
    if unknown:
        raise UserError(f"Unknown evaluation '{unknown[0]}'; use wikitext2, zeroshot, both comma-separated, or none.")
    return values
