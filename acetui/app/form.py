"""The New run form's fields as plain text, checked and turned into run configurations.

Every check calls the engine's own validation (``parse_sparsity``, ``get_method``,
``pipeline.validate``, ``validate_tasks``...), so the form flags a value with exactly the sentence
the CLI would print. No widgets here: the screen shows what these functions raise.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from acetui_core import pipeline
from acetui_core.config import RunConfig
from acetui_core.data import calibration_documents
from acetui_core.errors import UserError
from acetui_core.metrics import get_method
from acetui_core.sparsity import parse_sparsity
from acetui_core.zeroshot import validate_tasks

SEQLEN_PRESETS = ("16", "full")
BUILTIN_CALIB = ("c4", "wikitext2")

# A configuration whose every field is valid, so checking one field through pipeline.validate
# reports that field's problem and nothing else.
_VALID = RunConfig(model="model", method="wanda", sparsity="0.5")


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _whole(text: str, flag: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise UserError(f"{flag} must be a whole number, not '{text.strip()}'.") from None


def _optional_whole(text: str, flag: str) -> int | None:
    return _whole(text, flag) if text.strip() else None


def model(text: str) -> str:
    if not text.strip():
        raise UserError("Choose a model: a Hugging Face id, a checkpoint folder or a .gguf file.")
    return text.strip()


def methods(names: list[str]) -> list[str]:
    if not names:
        raise UserError("Pick at least one metric.")
    return [get_method(name).name for name in names]


def sparsities(text: str) -> list[str]:
    items = _items(text)
    if not items:
        raise UserError("Give a sparsity: a ratio such as 0.5 or an N:M pattern such as 2:4 (several separated by commas).")
    return list(dict.fromkeys(str(parse_sparsity(item)) for item in items))


def seqlens(text: str) -> list[int | str]:
    items = _items(text)
    if not items:
        raise UserError("Give a calibration length: a number of tokens or 'full' (several separated by commas).")
    lengths = [item if item == "full" else (int(item) if item.isdigit() else item) for item in items]
    for length in lengths:
        pipeline.validate(replace(_VALID, seqlen=length))
        if length != "full":
            pipeline.resolve_seqlen(length, length, "--seqlen")  # the model's context is checked by the run
    return list(dict.fromkeys(lengths))


def nsamples(text: str) -> int:
    value = _whole(text, "--nsamples")
    pipeline.validate(replace(_VALID, nsamples=value))
    return value


def seed(text: str) -> int:
    return _whole(text, "--seed")


def calib(text: str) -> str:
    source = text.strip()
    if source not in BUILTIN_CALIB and not Path(source).expanduser().is_file():
        calibration_documents(source)  # raises the engine's sentence for a missing source, reading nothing
    return source


def eval_limit(text: str) -> int | None:
    value = _optional_whole(text, "--eval-limit")
    pipeline.validate(replace(_VALID, eval_limit=value))
    return value


def eval_seqlen(text: str) -> int | None:
    value = _optional_whole(text, "--eval-seqlen")
    if value is not None:
        pipeline.resolve_seqlen(value, value, "--eval-seqlen")  # the model's context is checked by the run
    return value


def tasks(text: str) -> list[str]:
    return validate_tasks(text)


def zeroshot_limit(text: str) -> int | None:
    value = _optional_whole(text, "--limit")
    validate_tasks(_VALID.tasks, value)
    return value


def configs(*, model: str, methods: list[str], sparsities: list[str], seqlens: list, evals: list[str],
            **common) -> list[RunConfig]:
    """The comparison grid: one run per metric, sparsity and calibration length, in that order.

    Magnitude uses no calibration data, so it runs once per sparsity whatever the lengths.
    """
    grid = {}
    for method in methods:
        for sparsity in sparsities:
            for length in seqlens if get_method(method).needs_activations else seqlens[:1]:
                config = RunConfig(model=model, method=method, sparsity=sparsity, seqlen=length, evals=evals, **common)
                grid[(method, sparsity, length)] = config
    return list(grid.values())
