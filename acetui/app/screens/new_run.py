"""New run: pick a model, metrics, sparsities, calibration, evaluation and device; start the grid.

Every run setting of the settings table (``acetui_core.run.config.SETTINGS``) has a field: the basic ones
laid out on the first screen, the advanced ones in a collapsed section made from the table (a text
field, a choice or a tick, each with its help). Each text field is checked as it changes with the
engine's own validation (``acetui.app.form``); a bad value turns the field red and shows, right under
it, the sentence the CLI would print. The values of the last start are remembered (``acetui.preferences``)
and come back at the next launch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import asdict

from rich.cells import cell_len
from textual import getters, on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.markup import escape
from textual.screen import Screen
from textual.suggester import SuggestFromList
from textual.widgets import (
    Button,
    Checkbox,
    Collapsible,
    Footer,
    Header,
    Input,
    Label,
    OptionList,
    Select,
    SelectionList,
    Static,
)
from textual.widgets.select import InvalidSelectValueError
from textual.widgets.selection_list import Selection
from textual.worker import get_current_worker

from acetui.app import form
from acetui.app.candidates import model_candidates, starting_model
from acetui.app.keyorder import keys_typed_before
from acetui.app.messages import CandidatesFound, CostEstimated, RunsChecked, StoreFailed
from acetui.app.screens.common import exiting
from acetui.app.widgets.completions import ModelCompletions
from acetui.app.widgets.marks import Tick, TickList
from acetui.app.widgets.settingfields import (
    device_row,
    error_lines,
    group_fields,
    inline_field,
    kind,
    setting_field,
    widget_value,
)
from acetui.app.workbench import Workbench
from acetui_core.analysis.rowlabels import untaken_options
from acetui_core.basics.choices import EvalKind
from acetui_core.basics.errors import UserError
from acetui_core.run.config import SETTINGS, RunConfig
from acetui_core.scores.metrics import METHODS, unread_settings
from acetui_core.scores.plugins import available_methods
from acetui_core.storage.store_rows import RunRecord

TICKS = ("eval-wikitext2", "eval-zeroshot")  # the evaluations, one tick each
START = "Start ▶"  # the Start button's label ("Checking…" while the launcher checks the runs)
COST_DELAY = 0.3  # seconds a cost estimate waits for the typing to stop
PLAN_INDENT = 22  # the columns of a line the plan line leaves to the Start button, the margins and a scrollbar
# The settings each evaluation needs: left at their defaults while it is off.
EVAL_SETTINGS: dict[str, tuple[str, str]] = {
    EvalKind.WIKITEXT2: ("eval_limit", "eval_seqlen"),
    EvalKind.ZEROSHOT: ("tasks", "zeroshot_limit"),
}
# The settings the form lays out by hand (the grid's lists, the evaluation ticks, the device list).
OWN_WIDGETS = ("method", "evals", "device")


TEXT = [name for name, spec in SETTINGS.items() if kind(spec) == "text" and name not in OWN_WIDGETS]


class NewRunScreen(Screen):
    app = getters.app(Workbench)

    AUTO_FOCUS = "#model"
    _planned: tuple[RunConfig, ...] = ()  # the runs the plan line names (none while a field is bad)
    BINDINGS = [
        Binding(
            "ctrl+r",
            "start",
            "Start",
            priority=True,
            tooltip="Start the runs the form describes (several metrics or sparsities: a comparison)",
        )
    ]

    @property
    def methods(self) -> dict:
        """The built-in metrics, installed entry points, and the plug-ins the settings name (``acetui --method``)."""
        if not hasattr(self, "_methods"):
            unusable: list[str] = []
            self._methods = available_methods(METHODS, self.app.preferences.plugins, unusable)
            for why in unusable:  # a plug-in the settings name but that cannot be imported: said, not hidden
                self.notify(f"{why} It is left out of Metrics.", severity="warning", timeout=15)
        return self._methods

    def compose(self) -> ComposeResult:
        yield Header()
        # No tab stop of its own (a scroll container is one by default): nothing showed it focused, and the keys
        # typed there were lost. The focused field scrolls into view; its keys and the wheel scroll the form.
        with VerticalScroll(id="form", can_focus=False):
            yield from setting_field("model")
            yield ModelCompletions(id="model-candidates")
            with Horizontal(id="form-columns"):
                with Vertical(id="metrics-column"):
                    yield Label("Metrics [dim](space picks)[/]", classes="section")
                    yield TickList(
                        *(
                            Selection(f"{m.paper_name:<10} {name}", name, name == "ace")
                            for name, m in self.methods.items()
                        ),
                        id="metrics",
                    )
                    yield Static("", id="metrics-error", classes="error")
                with Vertical(id="settings-column"):
                    yield from group_fields("basic")
                    yield from device_row()
            yield Label("Evaluation", classes="section")
            with Horizontal(classes="row"):
                yield Tick("WikiText-2 ppl", True, id="eval-wikitext2", compact=True)
                yield from inline_field("eval_limit")
                yield from inline_field("eval_seqlen")
            yield from error_lines("eval_limit", "eval_seqlen")
            with Horizontal(classes="row"):
                yield Tick("Zero-shot", False, id="eval-zeroshot", compact=True)
                yield from inline_field("tasks")
                yield from inline_field("zeroshot_limit")
            yield from error_lines("tasks", "zeroshot_limit")
            with Horizontal(id="start-row"):
                yield Button(START, id="start", variant="primary", compact=True)
                yield Static("", id="plan")
            yield Static("", id="cost")
            with Collapsible(
                title="Advanced: offload, VarP, OWL, OBS, DSnoT, MoE, save…", collapsed=True, id="advanced"
            ):
                yield from group_fields("advanced", explained=True)
        yield Footer(show_command_palette=False, compact=True)

    # ---- life cycle ----

    def on_mount(self) -> None:
        self._model_touched = False
        self._starting: dict | None = None  # the form's values while the launcher checks its runs (_checking)
        if exiting(self):
            return
        self.query_one("#model-candidates").display = False
        self.watch(self.query_one("#model", Input), "value", self._model_typed, init=False)
        missing = self.restore(self.app.preferences.new_run)
        if missing:
            self.notify(
                f"Not ticked: the metric(s) {', '.join(missing)} of your last start are not available here.",
                severity="warning",
                timeout=15,
            )
        self.find_candidates()
        self.check_all()

    def _show_model_end(self) -> None:
        """Once laid out, the end of the model path (its file name) in view, not its first folders."""
        model = self.query_one("#model", Input)
        model.action_end()
        model.scroll_to(x=model.max_scroll_x, animate=False, immediate=True)

    # ---- remembered values ----

    def _settings(self) -> list:
        """The widgets of the settings, each with the setting's name as its id."""
        return [self.query_one(f"#{name}") for name in SETTINGS if name not in ("method", "evals")]

    def values(self) -> dict:
        """The form as plain values, to remember."""
        return {
            **{widget.id: widget_value(widget) for widget in self._settings()},
            **{tick: self.query_one(f"#{tick}", Checkbox).value for tick in TICKS},
            "metrics": list(self.query_one("#metrics", SelectionList).selected),
        }

    def restore(self, saved: dict, model: str | None = None) -> list[str]:
        """Fill the form with remembered values; what no longer fits (a GPU gone, a method renamed) is
        left at its default. The model is ``model`` if given, else the last one while it exists, else the
        bundled model. Returns the saved metrics that are not available here (none of them ticked)."""
        for widget in self._settings():
            value = saved.get(widget.id)
            if widget.id == "model" or value is None:
                continue
            if widget.id == "group" and value == "row" and "sparsity_scope" not in saved:  # saved by a form whose
                continue  # Group could not be blank (before Sparsity on came): row was its default, not a choice
            if isinstance(widget, Select):
                with suppress(InvalidSelectValueError):  # e.g. a GPU this machine does not have: the default stays
                    widget.value = value
            elif isinstance(value, str if isinstance(widget, Input) else bool):  # a hand-edited file: skipped
                widget.value = value
        field = self.query_one("#model", Input)
        field.value = model if model is not None else starting_model(saved.get("model"))
        self.call_after_refresh(self._show_model_end)
        for tick in TICKS:
            if isinstance(saved.get(tick), bool):
                self.query_one(f"#{tick}", Checkbox).value = saved[tick]
        saved_metrics = [str(m) for m in saved.get("metrics") or []]
        metrics = [m for m in saved_metrics if m in self.methods]
        if metrics:
            chosen = self.query_one("#metrics", SelectionList)
            chosen.deselect_all()
            for metric in metrics:
                chosen.select(metric)
        return [m for m in saved_metrics if m not in self.methods]

    def fill(self, config: RunConfig) -> None:
        """The form set to a run's configuration (re-run or duplicate it); a notice names what no longer
        fits (a GPU this machine lacks), which is not carried over."""
        shown = {name: getattr(config, name) for name in SETTINGS}
        self.restore(
            {
                **{name: form.text(name, value) if name in TEXT else value for name, value in shown.items()},
                "eval-wikitext2": EvalKind.WIKITEXT2 in config.evals,
                "eval-zeroshot": EvalKind.ZEROSHOT in config.evals,
                "metrics": [config.method],
            },
            model=config.model,
        )
        self._model_touched = True
        try:
            (shown,) = self.configs()
        except UserError:
            self.notify(f"Run settings of {config.title} loaded; fix the flagged fields.")
            return
        lost = [f"{name} {value}" for name, value in asdict(config).items() if getattr(shown, name) != value]
        left = f" Not carried over (it does not fit here): {', '.join(lost)}." if lost else ""
        self.notify(f"{config.title} loaded: ctrl+r starts it again.{left}", timeout=12)

    @work(thread=True, exclusive=True, group="candidates")
    def find_candidates(self) -> None:
        try:
            runs = self.app.store.list_runs()
        except UserError as error:  # the store failed since the app opened it: say so, offer what is on disk
            self.post_message(StoreFailed(str(error)))
            runs = []
        recent = list(dict.fromkeys(run.config.model for run in reversed(runs)))
        self.post_message(CandidatesFound(model_candidates(recent)))

    def on_candidates_found(self, message: CandidatesFound) -> None:
        model = self.query_one("#model", Input)
        model.suggester = SuggestFromList(message.candidates, case_sensitive=False)
        completions = self.query_one("#model-candidates", ModelCompletions)
        completions.candidates = message.candidates
        completions.show_matches(model.value)

    # ---- checking ----

    def _check(self, field_id: str) -> bool:
        """Check one field; flag it and show the sentence under it if it is bad (the empty model
        field only once the user has typed in it or tried to start)."""
        widget = self.query_one(f"#{field_id}")
        error = self.query_one(f"#{field_id}-error", Static)
        try:
            if isinstance(widget, SelectionList):  # the metrics
                form.methods(widget.selected)
            else:
                assert isinstance(widget, Input)  # every other field checked is a text field (TEXT)
                form.value(field_id, widget.value)
            message = ""
        except UserError as problem:
            message = str(problem)
        shown = message if field_id != "model" or self._model_touched else ""
        widget.set_class(bool(shown), "-invalid")
        error.update(escape(shown))
        error.display = bool(shown)
        return not message

    def _relevant(self) -> list[str]:
        """The fields that matter for the chosen evaluations (zero-shot settings only when it is on)."""
        skip = {name for evaluation in self._evals(on=False) for name in EVAL_SETTINGS[evaluation]}
        return ["metrics", *(name for name in TEXT if name not in skip)]

    def _evals(self, on: bool = True) -> list[str]:
        """The evaluations ticked (or, with ``on`` false, not ticked)."""
        return [e for e in EVAL_SETTINGS if self.query_one(f"#eval-{e}", Checkbox).value == on]

    def check_all(self) -> list[str]:
        """Check every relevant field; return the ids of the bad ones, and update the plan line."""
        for field_id in (name for names in EVAL_SETTINGS.values() for name in names):
            self.query_one(f"#{field_id}-error").display = False
            self.query_one(f"#{field_id}").remove_class("-invalid")
        bad = [field_id for field_id in self._relevant() if not self._check(field_id)]
        self._planned = () if bad else tuple(self.configs())
        if bad:
            self.query_one("#plan", Static).update(
                "Pick a model to start."
                if bad == ["model"] and not self._model_touched
                else f"[$text-error]{len(bad)} field(s) to fix[/]"
            )
        self._show_plan()
        cost = self.query_one("#cost", Static)
        cost.display = not bad
        if not bad:
            cost.update("[dim]Cost: working it out…[/]")
            self.estimate_cost(list(self._planned))
        return bad

    def _show_plan(self) -> None:
        if self._planned:
            room = self.app.size.width - PLAN_INDENT
            self.query_one("#plan", Static).update(escape(plan_line(self._planned, room)))

    def on_resize(self) -> None:
        self._show_plan()  # a summary that fits the new width

    @work(thread=True, exclusive=True, group="cost")
    def estimate_cost(self, configs: list) -> None:
        """``acetui plan``'s figures for the form's runs, from the model's config alone; typing in a field
        starts a new estimate, so this one waits a moment and gives up if it has been superseded."""
        worker = get_current_worker()
        time.sleep(COST_DELAY)
        if worker.is_cancelled:
            return
        text = form.cost(configs)
        if not worker.is_cancelled:
            # A message, not a widget call from this thread: a screen closed meanwhile drops it unread.
            self.post_message(CostEstimated(text))

    def on_cost_estimated(self, message: CostEstimated) -> None:
        for cost in self.query("#cost").results(Static):  # none while the app tears the screen down
            cost.update(message.text)

    def configs(self):
        """The run configurations the form describes (every relevant field must be valid)."""
        off = {name for evaluation in self._evals(on=False) for name in EVAL_SETTINGS[evaluation]}
        values = {
            widget.id: form.value(widget.id, widget.value) if isinstance(widget, Input) else widget_value(widget)
            for widget in self._settings()
            if widget.id not in off
        }
        return form.configs(
            method=form.methods(self.query_one("#metrics", SelectionList).selected), evals=self._evals(), **values
        )

    # ---- events ----

    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        if event.input.id == "model":
            self._model_touched = self._model_touched or bool(event.value)
        self.check_all()

    def _model_typed(self, value: str) -> None:
        # As the field's value changes, not when its Changed message reaches the screen: a tab read right after
        # the typing (in one burst) must find the completions of what was typed (KeysWhereTyped.action_focus_next).
        self.query_one("#model-candidates", ModelCompletions).show_matches(value)

    @on(SelectionList.SelectedChanged)
    @on(Checkbox.Changed)
    @on(Select.Changed)
    def _toggled(self) -> None:
        self.check_all()

    @on(OptionList.OptionSelected, "#model-candidates")
    def _candidate_picked(self, event: OptionList.OptionSelected) -> None:
        model = event.option.id
        assert model is not None  # each candidate's id is its model (ModelCompletions)
        self.query_one("#model", Input).value = model
        self.call_after_refresh(self._show_model_end)  # its file name in view, not its first folders
        self.query_one("#metrics").focus()

    @on(Button.Pressed, ".preset")
    def _preset(self, event: Button.Pressed) -> None:
        seqlen = event.button.name
        assert seqlen is not None  # each preset button is named by its value (_field)
        self.query_one("#seqlen", Input).value = seqlen

    @on(Button.Pressed, "#start")
    async def _start_pressed(self) -> None:
        await self.action_start()

    async def action_start(self) -> None:
        await keys_typed_before(self.focused)  # the form as typed up to ctrl+r, run as the app reads it
        if self._starting is not None:
            self.notify("The runs are being checked; they start once the checks pass.", timeout=4)
            return
        self._model_touched = True
        bad = self.check_all()
        if bad:
            self.query_one(f"#{bad[0]}").focus()
            self.notify("Fix the flagged fields first.", severity="error")
            return
        self._checking(self.values())
        self._launch(self.configs())

    def _checking(self, values: dict | None) -> None:
        """While the launcher checks the runs (``values``: the form's, remembered once they start), the
        Start button says so and takes no press; the rest of the form and the app answer as ever."""
        self._starting = values
        button = self.query_one("#start", Button)
        button.label = "Checking…" if values is not None else START
        button.disabled = values is not None

    @work(thread=True, group="start")
    def _launch(self, configs: list[RunConfig]) -> None:
        """The launcher's checks (the model read, its memory bounded, a hub id looked up: seconds) and the
        start, off the UI thread; the outcome comes back as a message."""
        try:
            self.post_message(RunsChecked(self.app.start_runs(configs) or []))
        except UserError as error:
            self.post_message(RunsChecked([], str(error)))
        except Exception as error:  # never a traceback: the form stays, saying what went wrong
            self.post_message(RunsChecked([], f"The runs could not be checked ({type(error).__name__}: {error})."))

    def on_runs_checked(self, message: RunsChecked) -> None:
        values = self._starting
        self._checking(None)
        if message.refusal:
            self.notify(message.refusal, severity="error", timeout=8)
            return
        self.app.remember(new_run=values)
        if not message.run_ids:
            return
        batch = tuple(message.run_ids)
        if self.app.screen is self:
            self.app.follow(batch[0], batch)
        elif self.app.current_mode == "run" and self.app.followed is not None:  # watching a run: it stays
            self.notify(f"{len(batch)} run(s) started: Runs (F4) lists them.", timeout=8)
        else:  # the user moved on while the runs were checked: the keys they type now are meant for that screen
            self.app.follow_later(batch[0], batch)
            self.notify(f"{len(batch)} run(s) started: F2 shows them.", timeout=8)


# What a run's label or target already says ("0.5 + 25% of experts", "0.5 in experts").
SAID_BY_THE_TARGET = frozenset({"expert_sparsity", "sparsity_scope"})


def advanced_changes(configs: Sequence[RunConfig]) -> list[str]:
    """The Advanced settings the runs take away from their defaults, in the labels' words (``OWL``, ``DSnoT``):
    that section is collapsed, and a re-run fills it, so nothing else on the form says them."""
    said = []
    for config in configs:
        unread = unread_settings(config, experts=True) | untaken_options(config) | SAID_BY_THE_TARGET
        if config.removes_experts_alone:  # its label names the score: "Frequency expert removal"
            unread |= {"expert_score"}
        for name, spec in SETTINGS.items():
            value = getattr(config, name)
            if spec.group == "advanced" and spec.result and name not in unread and value != spec.default:
                said.append(spec.describe(value) if spec.describe else f"{spec.label} {value}")
    return list(dict.fromkeys(said))


def plan_line(configs: Sequence[RunConfig], room: int) -> str:
    """The runs the form describes, in ``room`` columns (the start row is one line), then the Advanced
    settings they change (``· OWL``, or how many where they do not fit)."""
    changed = advanced_changes(configs)
    advanced = f" · {', '.join(changed)}" if changed else ""
    if changed and cell_len(advanced) > room // 2:
        advanced = f" · {len(changed)} Advanced setting(s) changed"
    return _runs_line(configs, room - cell_len(advanced)) + advanced


def _runs_line(configs: Sequence[RunConfig], room: int) -> str:
    """Each label and each sparsity once where the runs are every label at every sparsity (``4 runs:
    Wanda-64, SparseGPT-64 × 0.5, 0.6``), else each run; what does not fit is counted, never cut mid-list."""
    count = f"{len(configs)} run{'' if len(configs) == 1 else 's'}"
    labels = list(dict.fromkeys(config.label for config in configs))
    sparsities = list(dict.fromkeys(config.target for config in configs))
    if len(configs) == len(labels) * len(sparsities):  # the grid, each pair once
        grid = f"{count}: {', '.join(labels)} × {', '.join(sparsities)}"
        return grid if cell_len(grid) <= room else f"{count}: {len(labels)} methods × {len(sparsities)} sparsities"
    runs = [f"{config.label} {config.target}" for config in configs]
    for shown in range(len(runs), 0, -1):
        left_out = len(runs) - shown
        line = f"{count}: {', '.join(runs[:shown])}" + (f" … (+{left_out} more)" if left_out else "")
        if cell_len(line) <= room:
            return line
    return count


async def rerun(app: App, run: RunRecord) -> None:
    """The New run form filled with ``run``'s settings: ctrl+r starts it again as it was, or change a field
    first for a variant."""
    if run.settings_unknown:  # its stand-in settings (``?``) would fill the form with nothing to run
        app.notify(
            f"Run {run.id}'s settings cannot be read (the run store's record is damaged); there is nothing to re-run.",
            severity="error",
        )
        return
    await app.switch_mode("new")
    if isinstance(app.screen, NewRunScreen):
        app.screen.fill(run.config)
