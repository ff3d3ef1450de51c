"""The form widget of each run setting, made from the settings table (``acetui_core.run.config.SETTINGS``): a
tick for a flag, a choice for a closed set of values, else a text field with the setting's placeholder
saying what empty means (and its presets); each with its help as the tooltip, and the line under it where its error is shown."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.markup import escape
from textual.widgets import Button, Checkbox, Input, Label, Select, Static

from acetui.app.widgets.marks import Tick
from acetui.app.widgets.textfield import TextField
from acetui_core.basics.choices import SparsityGroup
from acetui_core.run.config import SETTINGS
from acetui_core.run.setting import Setting

# How a choice reads, where its name is terse.
CHOICE_NAMES: dict[str, str] = {SparsityGroup.ROW: "per output row", SparsityGroup.LAYER: "per layer"}


def kind(spec: Setting) -> str:
    """The widget a setting gets: a tick for a flag, a choice for a closed set of values, else text."""
    return "tick" if isinstance(spec.default, bool) else "choice" if spec.choices else "text"


def widget_value(widget: Input | Select | Checkbox):
    """What a setting's widget holds: None for a choice left blank (the setting's default)."""
    return None if isinstance(widget, Select) and widget.is_blank() else widget.value


def setting_widget(name: str) -> Input | Select | Checkbox:
    """A setting's widget, at its default, with its help as the tooltip."""
    spec = SETTINGS[name]
    widget: Input | Select | Checkbox
    if kind(spec) == "tick":
        widget = Tick("", spec.default, id=name, compact=True)
    elif kind(spec) == "choice":
        options = [(CHOICE_NAMES.get(choice, choice), choice) for choice in spec.choices]
        blank = spec.default is None  # no choice made: the run decides (--group: the method's reference)
        widget = Select(
            options,
            value=Select.NULL if blank else spec.default,
            allow_blank=blank,
            prompt=spec.placeholder or "Select",
            compact=True,
            id=name,
        )
    else:
        widget = TextField(spec.text, placeholder=spec.placeholder, id=name, compact=True)
    widget.tooltip = spec.help
    return widget


def setting_field(name: str, explained: bool = False) -> ComposeResult:
    """A setting's row (label, widget and its presets), its help under it if ``explained``, then its error line."""
    with Horizontal(classes="row"):
        yield Label(SETTINGS[name].label, classes="label")
        yield setting_widget(name)
        for preset in SETTINGS[name].presets:
            yield Button(preset, name=preset, classes="preset", compact=True)
    if explained:
        yield Static(escape(SETTINGS[name].help), classes="help")
    yield Static("", id=f"{name}-error", classes="error")


def group_fields(group: str, explained: bool = False) -> ComposeResult:
    """The rows of a group's settings that the screen does not place itself, in the table's order."""
    for name, spec in SETTINGS.items():
        if spec.group == group and not spec.placed:
            yield from setting_field(name, explained)


def inline_field(name: str) -> ComposeResult:
    """A setting's label and widget inside a row of others (its error line goes under the row)."""
    yield Label(SETTINGS[name].label, classes="label inline")
    yield setting_widget(name)


def error_lines(*field_ids: str) -> ComposeResult:
    """The error lines of the settings laid out inline, under their row."""
    for field_id in field_ids:
        yield Static("", id=f"{field_id}-error", classes="error")


def device_row() -> ComposeResult:
    """The device, a choice of this machine's (auto, cpu, each GPU), and the dtype, on one row."""
    import torch

    gpus = [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    with Horizontal(classes="row"):
        yield Label("Device", classes="label")
        devices = ["auto", "cpu", *gpus]
        yield Select([(d, d) for d in devices], value="auto", allow_blank=False, compact=True, id="device")
        yield Label(SETTINGS["dtype"].label, classes="label short")
        yield setting_widget("dtype")
