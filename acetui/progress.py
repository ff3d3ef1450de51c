"""Rich rendering of pipeline events on stderr: a bar per stage and per decoder layer."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from acetui_core.basics.choices import StageName
from acetui_core.run.events import Event, LayerPruned, LayerStarted, RunStarted, Stage

STAGE_NAMES: dict[str, str] = {
    StageName.LOAD: "loading model",
    StageName.CALIBRATION: "calibration data",
    StageName.WIKITEXT2: "WikiText-2 perplexity",
}


class EventProgress:
    """A callback for ``pipeline.run`` that draws progress on stderr (never stdout, which holds results)."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.progress = Progress(
            TextColumn("{task.description:<24}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self.tasks: dict[str, TaskID] = {}

    def __enter__(self) -> EventProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def _task(self, key: str, description: str, total: int | None) -> TaskID:
        if key not in self.tasks:
            self.tasks[key] = self.progress.add_task(description, total=total)
        return self.tasks[key]

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self._task("layers", f"pruning ({event.method} {event.sparsity})", event.num_layers)
        elif isinstance(event, Stage):
            name = STAGE_NAMES.get(event.name, event.name.replace("zeroshot:", "zero-shot "))
            self.progress.update(self._task(event.name, name, event.total), completed=event.done, total=event.total)
        elif isinstance(event, LayerStarted):
            self.progress.update(self.tasks["layers"], description=f"layer {event.index}")  # numbered from 0
        elif isinstance(event, LayerPruned):
            layer = event.layer
            self.progress.update(self.tasks["layers"], completed=layer.index + 1)
            self.progress.console.print(layer.line)
