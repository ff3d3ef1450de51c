"""The parsers of the run settings (``Setting.parse`` in the table of ``acetui_core.run.config``): the text a
user typed, or a stored value, to the setting's value, or a ``UserError`` naming the option
(``acetui_core.basics.parse`` reads the numbers and lists)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acetui_core.basics import parse
from acetui_core.basics.errors import UserError
from acetui_core.run.setting import Parser
from acetui_core.scores.sparsity import parse_sparsity


def whole(minimum: int = 0) -> Parser:
    return lambda text, flag: parse.whole(text, flag, minimum)


def optional_whole(minimum: int = 0) -> Parser:
    return lambda text, flag: parse.optional_whole(text, flag, minimum)


def number(minimum: float | None = None) -> Parser:
    return lambda text, flag: parse.number(text, flag, minimum)


def positive(text: Any, flag: str) -> float:
    value = parse.number(text, flag)
    if value <= 0:
        raise UserError(f"{flag} must be positive (got {value:g}).")
    return value


def evals(value: Any, flag: str) -> list[str]:
    if isinstance(value, str):
        return parse.evals(value, flag)
    return parse.evals(",".join(value) or "none", flag)  # a list is the stored form: [] is none


def tasks(value: Any, flag: str) -> list[str]:
    return parse.some(value if isinstance(value, str) else ",".join(value), flag)


def optional_path(value: Any, flag: str) -> str | None:
    """A path, or None when the option is left out; an empty one (an unset variable) is refused."""
    if value is None:
        return None
    if str(value).strip() == "":
        raise UserError(f"{flag} is empty; give a path, or leave {flag} out.")
    return str(Path(str(value).strip()))


def save_folder(value: Any, flag: str) -> str | None:
    """The folder a checkpoint is saved in (``optional_path``). ``-``, the standard output to ``-o``, would
    be taken as a folder of that name in the working folder: refused."""
    path = optional_path(value, flag)
    if path == "-":
        raise UserError(f"{flag} - is not the standard output for a model; give the folder to save the checkpoint in.")
    return path


def sparsity(value: Any, _flag: str) -> str:
    return str(parse_sparsity(str(value), allow_zero=True))  # 0 with --expert-sparsity only (validate)


def expert_sparsity(text: Any, flag: str) -> float:
    value = parse.number(text, flag, minimum=0)
    if not value < 1:
        raise UserError(f"{flag} {value:g} would remove every routed expert; use a fraction below 1.")
    return value


def stripped(value: Any, _flag: str) -> str:
    return str(value).strip()
