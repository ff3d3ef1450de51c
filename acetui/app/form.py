"""The New run form's fields as plain text, checked and turned into run configurations.

Every check is the engine's own (``acetui_core.parse``, ``acetui_core.validate``, the launcher's
``Grid``), so the form flags a value with exactly the sentence the CLI would print, and starts the same
runs the CLI would. No widgets here: the screen shows what these functions raise.
"""

from __future__ import annotations

from acetui_core import parse
from acetui_core.config import SETTINGS, RunConfig
from acetui_core.errors import UserError
from acetui_core.launch import Grid
from acetui_core.metrics import get_method
from acetui_core.models import model_source
from acetui_core.sparsity import parse_sparsity
from acetui_core.validate import check_calibration_source
from acetui_core.zeroshot import validate_tasks

SEQLEN_PRESETS = ("16", "full")


def model(text: str) -> str:
    if not text.strip():
        raise UserError("Choose a model: a Hugging Face id, a checkpoint folder or a .gguf file.")
    model_source(text.strip())
    return text.strip()


def methods(names: list[str]) -> list[str]:
    if not names:
        raise UserError("Pick at least one metric.")
    return [get_method(name).name for name in names]


def sparsities(text: str) -> list[str]:
    items = parse.items(text)
    if not items:
        raise UserError(
            "Give a sparsity: a ratio such as 0.5 or an N:M pattern such as 2:4 (several separated by commas)."
        )
    return list(dict.fromkeys(str(parse_sparsity(item)) for item in items))


def seqlens(text: str) -> list[int | str]:
    items = parse.items(text)
    if not items:
        raise UserError("Give a calibration length: a number of tokens or 'full' (several separated by commas).")
    return list(dict.fromkeys(parse.seqlen(item) for item in items))  # the model's context is checked by the run


# The settings the form takes several values of (a comparison), each its own sentence.
SEVERAL = {"model": model, "sparsity": sparsities, "seqlen": seqlens}


def value(name: str, text):
    """One setting as the form holds it (text typed, a choice, a tick), checked: the value, or the sentence
    the CLI would print for it. A calibration file and zero-shot tasks are looked at too (the file's text,
    the tasks' local copies), as the run would."""
    if name in SEVERAL:
        return SEVERAL[name](text)
    checked = SETTINGS[name].value(text)
    if name == "calib":
        check_calibration_source(checked)
    if name == "tasks":
        checked = validate_tasks(checked)
    return checked


def text(name: str, value) -> str:
    """A configuration's value as the form's field shows it (lists comma-separated, nothing for None)."""
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return "" if value is None else str(value)


def configs(
    *, model: str, methods: list[str], sparsities: list[str], seqlens: list, seed: int = 0, **common
) -> list[RunConfig]:
    """The comparison grid, built by the launcher as for ``acetui compare``."""
    return Grid([model], methods, sparsities, seqlens, [seed], common=common).configs()
