"""New run: pick a model, metrics, sparsities, calibration, evaluation and device; start the grid.

Each text field is checked as it changes with the engine's own validation (``acetui.app.form``); a
bad value turns the field red and shows, right under it, the sentence the CLI would print. The values
of the last start are remembered (``acetui.settings``) and come back at the next launch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import asdict, dataclass

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.markup import escape
from textual.screen import Screen
from textual.suggester import SuggestFromList
from textual.widgets import Button, Checkbox, Footer, Header, Input, Label, OptionList, Select, SelectionList, Static
from textual.widgets.option_list import Option
from textual.widgets.select import InvalidSelectValueError
from textual.widgets.selection_list import Selection
from textual.worker import get_current_worker

from acetui.app import form, summary
from acetui.app.candidates import default_model, model_candidates, shorten
from acetui.app.messages import CandidatesFound
from acetui.app.widgets.marks import Tick, TickList
from acetui_core.config import ZEROSHOT_TASKS, RunConfig
from acetui_core.errors import UserError
from acetui_core.metrics import METHODS
from acetui_core.plugins import available_methods

CANDIDATES_SHOWN = 3  # rows of model completions under the model field
CANDIDATE_WIDTH = 64  # characters of a completion shown (its end: the file name matters most)
CHOICES = ("group", "device", "dtype")  # the Select fields, remembered with the text fields
TICKS = ("eval-wikitext2", "eval-zeroshot")
COST_DELAY = 0.3  # seconds a cost estimate waits for the typing to stop


@dataclass(frozen=True)
class Field:
    id: str
    label: str
    default: str
    parse: Callable[[str], object]
    placeholder: str = ""


FIELDS = {
    f.id: f
    for f in [
        Field("model", "Model", "", form.model, "hub id, checkpoint folder or .gguf (→ completes)"),
        Field("sparsity", "Sparsity", "0.5", form.sparsities, "0.5, 2:4, 4:8 …"),
        Field("calib", "Calibration", "c4", form.calib, "c4, wikitext2 or a file"),
        Field("nsamples", "Samples", "128", form.nsamples),
        Field("seqlen", "Length", "16", form.seqlens, "16, full …"),
        Field("seed", "Seed", "0", form.seed),
        Field("eval_limit", "Windows", "", form.eval_limit, "all"),
        Field("eval_seqlen", "Length", "", form.eval_seqlen, "context"),
        Field("tasks", "Tasks", ",".join(ZEROSHOT_TASKS), form.tasks),
        Field("zeroshot_limit", "Examples", "", form.zeroshot_limit, "all"),
    ]
}


def _devices() -> list[str]:
    import torch

    gpus = [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    return ["auto", "cpu", *gpus]


class NewRunScreen(Screen):
    AUTO_FOCUS = "#model"
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
            self._methods = available_methods(METHODS, self.app.settings.plugins)
        return self._methods

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="form"):
            yield from self._field("model")
            yield OptionList(id="model-candidates")
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
                    yield from self._field("sparsity")
                    with Horizontal(classes="row"):
                        yield Label("Group", classes="label")
                        yield Select(
                            [("per output row", "row"), ("per layer", "layer")],
                            value="row",
                            allow_blank=False,
                            compact=True,
                            id="group",
                        )
                    yield from self._field("calib")
                    yield from self._field("nsamples")
                    yield from self._field("seqlen", presets=form.SEQLEN_PRESETS)
                    yield from self._field("seed")
                    with Horizontal(classes="row"):
                        yield Label("Device", classes="label")
                        yield Select(
                            [(d, d) for d in _devices()], value="auto", allow_blank=False, compact=True, id="device"
                        )
                        yield Label("dtype", classes="label short")
                        yield Select(
                            [(d, d) for d in ("auto", "float32", "float16", "bfloat16")],
                            value="auto",
                            allow_blank=False,
                            compact=True,
                            id="dtype",
                        )
            yield Label("Evaluation", classes="section")
            with Horizontal(classes="row"):
                yield Tick("WikiText-2 ppl", True, id="eval-wikitext2", compact=True)
                yield from self._inline("eval_limit")
                yield from self._inline("eval_seqlen")
            yield from self._errors("eval_limit", "eval_seqlen")
            with Horizontal(classes="row"):
                yield Tick("Zero-shot", False, id="eval-zeroshot", compact=True)
                yield from self._inline("tasks")
                yield from self._inline("zeroshot_limit")
            yield from self._errors("tasks", "zeroshot_limit")
            with Horizontal(id="start-row"):
                yield Button("Start ▶", id="start", variant="primary", compact=True)
                yield Static("", id="plan")
            yield Static("", id="cost")
        yield Footer(show_command_palette=False, compact=True)

    # ---- composing fields ----

    def _input(self, field_id: str) -> Input:
        spec = FIELDS[field_id]
        return Input(spec.default, placeholder=spec.placeholder, id=field_id, compact=True)

    def _field(self, field_id: str, presets: tuple[str, ...] = ()) -> ComposeResult:
        with Horizontal(classes="row"):
            yield Label(FIELDS[field_id].label, classes="label")
            yield self._input(field_id)
            for preset in presets:
                yield Button(preset, name=preset, classes="preset", compact=True)
        yield Static("", id=f"{field_id}-error", classes="error")

    def _inline(self, field_id: str) -> ComposeResult:
        yield Label(FIELDS[field_id].label, classes="label inline")
        yield self._input(field_id)

    def _errors(self, *field_ids: str) -> ComposeResult:
        for field_id in field_ids:
            yield Static("", id=f"{field_id}-error", classes="error")

    # ---- life cycle ----

    def on_mount(self) -> None:
        self._candidates: list[str] = []
        self._model_touched = False
        self.query_one("#model-candidates").display = False
        self.restore(self.app.settings.new_run)
        self.find_candidates()
        self.check_all()

    def _show_model_end(self) -> None:
        """Once laid out, the end of the model path (its file name) in view, not its first folders."""
        model = self.query_one("#model", Input)
        model.action_end()
        model.scroll_to(x=model.max_scroll_x, animate=False, immediate=True)

    # ---- remembered values ----

    def values(self) -> dict:
        """The form as plain values, to remember."""
        return {
            **{field_id: self.query_one(f"#{field_id}", Input).value for field_id in FIELDS},
            **{choice: self.query_one(f"#{choice}", Select).value for choice in CHOICES},
            **{tick: self.query_one(f"#{tick}", Checkbox).value for tick in TICKS},
            "metrics": list(self.query_one("#metrics", SelectionList).selected),
        }

    def restore(self, saved: dict, model: str | None = None) -> None:
        """Fill the form with remembered values; what no longer fits (a GPU gone, a method renamed) is
        left at its default. The model is ``model`` if given, else the last one while it exists, else the
        bundled model."""
        for field_id in FIELDS:
            if isinstance(saved.get(field_id), str) and field_id != "model":
                self.query_one(f"#{field_id}", Input).value = saved[field_id]
        field = self.query_one("#model", Input)
        field.value = model if model is not None else default_model(saved.get("model"))
        self.call_after_refresh(self._show_model_end)
        for choice in CHOICES:
            if saved.get(choice) is not None:
                with suppress(InvalidSelectValueError):  # e.g. a GPU this machine does not have: the default stays
                    self.query_one(f"#{choice}", Select).value = saved[choice]
        for tick in TICKS:
            if isinstance(saved.get(tick), bool):
                self.query_one(f"#{tick}", Checkbox).value = saved[tick]
        metrics = [m for m in saved.get("metrics") or [] if m in self.methods]
        if metrics:
            chosen = self.query_one("#metrics", SelectionList)
            chosen.deselect_all()
            for metric in metrics:
                chosen.select(metric)

    def fill(self, config: RunConfig) -> None:
        """The form set to a run's configuration (re-run or duplicate it); a notice names what the form
        cannot hold (it is not carried over) or that no longer fits (a GPU this machine lacks)."""
        text = {
            "model": config.model,
            "sparsity": config.sparsity,
            "calib": config.calib,
            "nsamples": str(config.nsamples),
            "seqlen": str(config.seqlen),
            "seed": str(config.seed),
            "eval_limit": "" if config.eval_limit is None else str(config.eval_limit),
            "eval_seqlen": "" if config.eval_seqlen is None else str(config.eval_seqlen),
            "tasks": ",".join(config.tasks),
            "zeroshot_limit": "" if config.zeroshot_limit is None else str(config.zeroshot_limit),
        }
        self.restore(
            {
                **text,
                "group": config.group,
                "device": config.device,
                "dtype": config.dtype,
                "eval-wikitext2": "wikitext2" in config.evals,
                "eval-zeroshot": "zeroshot" in config.evals,
                "metrics": [config.method],
            },
            model=config.model,
        )
        self._model_touched = True
        try:
            (shown,) = self.configs()
        except UserError:
            self.notify(f"Run settings of {config.label} at {config.sparsity} loaded; fix the flagged fields.")
            return
        lost = [f"{name} {value}" for name, value in asdict(config).items() if getattr(shown, name) != value]
        left = f" Not carried over (no field for it here, or it does not fit): {', '.join(lost)}." if lost else ""
        self.notify(f"{config.label} at {config.sparsity} loaded: ctrl+r starts it again.{left}", timeout=12)

    @work(thread=True, exclusive=True, group="candidates")
    def find_candidates(self) -> None:
        recent = list(dict.fromkeys(run.config.model for run in reversed(self.app.store.list_runs())))
        self.post_message(CandidatesFound(model_candidates(recent)))

    def on_candidates_found(self, message: CandidatesFound) -> None:
        self._candidates = message.candidates
        model = self.query_one("#model", Input)
        model.suggester = SuggestFromList(self._candidates, case_sensitive=False)
        self._show_candidates(model.value)

    def _show_candidates(self, typed: str) -> None:
        typed = typed.strip().lower()
        matches = [c for c in self._candidates if typed in c.lower() and c.lower() != typed]
        options = self.query_one("#model-candidates", OptionList)
        options.set_options([Option(shorten(match, CANDIDATE_WIDTH), id=match) for match in matches])
        options.highlighted = 0 if matches else None
        options.display = bool(matches)
        options.styles.height = min(len(matches), CANDIDATES_SHOWN)

    # ---- checking ----

    def _check(self, field_id: str) -> bool:
        """Check one field; flag it and show the sentence under it if it is bad (the empty model
        field only once the user has typed in it or tried to start)."""
        widget = self.query_one(f"#{field_id}")
        error = self.query_one(f"#{field_id}-error", Static)
        try:
            if field_id == "metrics":
                form.methods(widget.selected)
            else:
                FIELDS[field_id].parse(widget.value)
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
        skip = set()
        if not self.query_one("#eval-wikitext2", Checkbox).value:
            skip |= {"eval_limit", "eval_seqlen"}
        if not self.query_one("#eval-zeroshot", Checkbox).value:
            skip |= {"tasks", "zeroshot_limit"}
        return ["metrics", *(f for f in FIELDS if f not in skip)]

    def check_all(self) -> list[str]:
        """Check every relevant field; return the ids of the bad ones, and update the plan line."""
        for field_id in ("eval_limit", "eval_seqlen", "tasks", "zeroshot_limit"):
            self.query_one(f"#{field_id}-error").display = False
            self.query_one(f"#{field_id}").remove_class("-invalid")
        bad = [field_id for field_id in self._relevant() if not self._check(field_id)]
        plan = self.query_one("#plan", Static)
        if bad:
            plan.update(
                "Pick a model to start."
                if bad == ["model"] and not self._model_touched
                else f"[$text-error]{len(bad)} field(s) to fix[/]"
            )
        else:
            configs = self.configs()
            runs = ", ".join(f"{c.label} {c.sparsity}" for c in configs)
            plan.update(escape(f"{len(configs)} run(s): {runs}"))
        cost = self.query_one("#cost", Static)
        cost.display = not bad
        if not bad:
            cost.update("[dim]Cost: working it out…[/]")
            self.estimate_cost(configs)
        return bad

    @work(thread=True, exclusive=True, group="cost")
    def estimate_cost(self, configs: list) -> None:
        """``acetui plan``'s figures for the form's runs, from the model's config alone; typing in a field
        starts a new estimate, so this one waits a moment and gives up if it has been superseded."""
        worker = get_current_worker()
        time.sleep(COST_DELAY)
        if worker.is_cancelled:
            return
        from acetui_core.plan import plan_run

        # Runs that differ only in sparsity cost the same.
        distinct = {(c.method, c.seqlen, c.nsamples): c for c in configs}.values()
        try:
            text = escape(summary.cost_text([plan_run(c) for c in distinct]))
        except UserError as error:
            text = f"[dim]Cost unknown: {escape(str(error))}[/]"
        except Exception as error:  # an estimate is advice: a config transformers cannot build must not end the app
            text = f"[dim]Cost unknown: the model's configuration could not be planned ({type(error).__name__}).[/]"
        if not worker.is_cancelled:
            self.app.call_from_thread(self.query_one("#cost", Static).update, text)

    def configs(self):
        """The run configurations the form describes (every relevant field must be valid)."""
        value = lambda field_id: FIELDS[field_id].parse(self.query_one(f"#{field_id}").value)  # noqa: E731
        wikitext2 = self.query_one("#eval-wikitext2", Checkbox).value
        zeroshot = self.query_one("#eval-zeroshot", Checkbox).value
        return form.configs(
            model=value("model"),
            methods=form.methods(self.query_one("#metrics", SelectionList).selected),
            sparsities=value("sparsity"),
            seqlens=value("seqlen"),
            evals=[e for e, on_ in (("wikitext2", wikitext2), ("zeroshot", zeroshot)) if on_],
            group=self.query_one("#group", Select).value,
            calib=value("calib"),
            nsamples=value("nsamples"),
            seed=value("seed"),
            eval_limit=value("eval_limit") if wikitext2 else None,
            eval_seqlen=value("eval_seqlen") if wikitext2 else None,
            tasks=value("tasks") if zeroshot else list(ZEROSHOT_TASKS),
            zeroshot_limit=value("zeroshot_limit") if zeroshot else None,
            device=self.query_one("#device", Select).value,
            dtype=self.query_one("#dtype", Select).value,
        )

    # ---- events ----

    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        if event.input.id == "model":
            self._model_touched = self._model_touched or bool(event.value)
            self._show_candidates(event.value)
        self.check_all()

    @on(SelectionList.SelectedChanged)
    @on(Checkbox.Changed)
    def _toggled(self) -> None:
        self.check_all()

    @on(OptionList.OptionSelected, "#model-candidates")
    def _candidate_picked(self, event: OptionList.OptionSelected) -> None:
        self.query_one("#model", Input).value = event.option.id
        self.query_one("#metrics").focus()

    @on(Button.Pressed, ".preset")
    def _preset(self, event: Button.Pressed) -> None:
        self.query_one("#seqlen", Input).value = event.button.name

    @on(Button.Pressed, "#start")
    def _start_pressed(self) -> None:
        self.action_start()

    def action_start(self) -> None:
        self._model_touched = True
        bad = self.check_all()
        if bad:
            self.query_one(f"#{bad[0]}").focus()
            self.notify("Fix the flagged fields first.", severity="error")
            return
        try:
            self.app.start_runs(self.configs())
        except UserError as error:
            self.notify(str(error), severity="error", timeout=8)
            return
        self.app.remember(new_run=self.values())
