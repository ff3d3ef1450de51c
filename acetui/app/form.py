"""The New run form's fields as plain text, checked and turned into run configurations.

Every check is the engine's own (``acetui_core.basics.parse``, ``acetui_core.pruning.validate``, the launcher's
``Grid``), so the form flags a value with exactly the sentence the CLI would print, and starts the same
runs the CLI would. No widgets here: the screen shows what these functions raise.
"""

from __future__ import annotations

from textual.markup import escape

from acetui.app import summary
from acetui_core.basics.errors import UserError
from acetui_core.basics.imports import HEAVY_IMPORTS
from acetui_core.execution.launch import Grid
from acetui_core.modeling.models import model_source
from acetui_core.pruning.validate import check_calibration_source
from acetui_core.pruning.zeroshot import validate_tasks
from acetui_core.run.config import AXES, SETTINGS, RunConfig
from acetui_core.scores.metrics import get_method


def model(text: str) -> str:
    model_source(text.strip())
    return text.strip()


def methods(names: list[str]) -> list[str]:
    if not names:
        raise UserError("Pick at least one metric.")
    return [get_method(name).name for name in names]


# The settings the form takes several values of, each a text field read by the one list parser
# (``Setting.values``): the grid's axes but the model (one per form) and the metrics (ticks).
SEVERAL = tuple(name for name in AXES if name not in ("model", "method"))


def value(name: str, text):
    """One setting as the form holds it (text typed, a choice, a tick), checked: the value, or the sentence
    the CLI would print for it. A calibration file and zero-shot tasks are looked at too (the file's text,
    the tasks' local copies), as the run would."""
    if name == "model":
        return model(text)
    if SETTINGS[name].default is None and not str(text).strip():  # a field left empty: not given (not saved)
        return None
    checked = SETTINGS[name].values(text) if name in SEVERAL else SETTINGS[name].value(text)
    if name == "calib":
        for source in checked if isinstance(checked, list) else [checked]:
            check_calibration_source(source)
    if name == "tasks":
        checked = validate_tasks(checked)
    return checked


def text(name: str, value) -> str:
    """A configuration's value as the form's field shows it (lists comma-separated, nothing for None)."""
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return "" if value is None else str(value)


def configs(**settings) -> list[RunConfig]:
    """The comparison grid of the form's values (a list or one value per axis), built by the launcher as
    for ``acetui compare``."""
    return Grid.of(settings).configs()


def cost(configs: list[RunConfig]) -> str:
    """The cost line (markup): what the costliest of the runs will need (``acetui plan``'s figures, from
    the model's configuration alone), or why that is unknown. An estimate is advice: it never raises."""
    distinct = {(c.method, c.seqlen, c.nsamples): c for c in configs}.values()  # sparsity changes no cost
    try:
        with HEAVY_IMPORTS:  # the plan imports transformers' modules, which another thread may too
            from acetui_core.pruning.plan import plan_run

            return escape(summary.cost_text([plan_run(c) for c in distinct]))
    except UserError as error:
        return f"[dim]Cost unknown: {escape(str(error))}[/]"
    except Exception as error:  # a config transformers cannot build must not end the app
        return f"[dim]Cost unknown: the model's configuration could not be planned ({type(error).__name__}).[/]"
