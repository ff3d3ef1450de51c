"""The acetui workbench: a Textual app over the run store.

It holds no pruning logic: runs start as their own processes through ``acetui_core.launch`` (so closing the
app or losing SSH does not stop them) and every screen reads the store. ``make_app`` is the one
factory the CLI and the tests share.
"""

from __future__ import annotations

from textual import events, on
from textual.app import App
from textual.binding import Binding
from textual.reactive import reactive

import acetui_themes as themes
from acetui.app.screens.new_run import NewRunScreen
from acetui.app.screens.results import ResultsScreen
from acetui.app.screens.run import RunScreen
from acetui.app.screens.runs import RunsScreen
from acetui_core.config import RunConfig
from acetui_core.errors import UserError
from acetui_core.launch import LocalProcesses, gpus_for, launch
from acetui_core.store import Store


class AceApp(App):
    """Four screens (modes): New run, Run, Results, Runs; F1-F4 switch between them."""

    TITLE = "acetui"
    SUB_TITLE = "post-training pruning workbench"
    CSS_PATH = themes.STYLESHEET
    MODES = {"new": NewRunScreen, "run": RunScreen, "results": ResultsScreen, "runs": RunsScreen}
    BINDINGS = [
        Binding("f1", "switch_mode('new')", "New"),
        Binding("f2", "switch_mode('run')", "Run"),
        Binding("f3", "switch_mode('results')", "Results"),
        Binding("f4", "switch_mode('runs')", "Runs"),
        Binding("ctrl+t", "next_theme", "Theme", show=False),  # kept off the footer so it fits 80 columns
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]

    followed: reactive[str | None] = reactive(None)
    """The run the Run screen shows (None: none yet)."""

    batch: reactive[tuple[str, ...]] = reactive(())
    """The runs started together with ``followed`` (a comparison), in queue order."""

    def __init__(self, store: Store, theme: str, attach: str | None = None) -> None:
        super().__init__()
        self.store = store
        self._start_theme = theme
        self._attach = attach

    def on_mount(self) -> None:
        self.register_themes()
        self.theme = self._start_theme
        if self._attach:
            self.follow(self._attach)
        else:
            self.switch_mode("new")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # The key of the screen already shown is hidden: the footer has no room to spare at 80 columns.
        if action == "switch_mode" and parameters and parameters[0] == self.current_mode:
            return False
        return True

    def register_themes(self) -> None:
        for theme in themes.THEMES.values():
            self.register_theme(theme)

    def action_next_theme(self) -> None:
        self.theme = themes.next_theme(self.theme)
        self.notify(f"Theme: {self.theme}", timeout=2)

    def follow(self, run_id: str, batch: tuple[str, ...] | None = None) -> None:
        """Show ``run_id`` on the Run screen, live while it runs."""
        self.batch = batch or (run_id,)
        self.followed = run_id
        self.switch_mode("run")

    def start_runs(self, configs: list[RunConfig]) -> list[str]:
        """Start ``configs`` through the launcher as detached worker processes (one per visible GPU, each
        loading its model once), then follow the first."""
        ids = launch(configs, LocalProcesses(detach=True, gpus=gpus_for(configs[0].device)), self.store)
        self.follow(ids[0], tuple(ids))
        return ids

    def cancel_run(self, run_id: str) -> None:
        """Ask the run's process to stop after its current layer (a queued run is cancelled at once)."""
        try:
            status = self.store.request_cancel(run_id)
        except UserError as error:
            self.notify(str(error), severity="warning")
            return
        self.notify(f"Run {run_id}: cancel requested ({status})."
                    + (" It stops after the current layer." if status == "running" else ""))

    @on(events.DeliveryComplete)
    def _delivered(self, event: events.DeliveryComplete) -> None:
        if event.name == "export":
            self.notify(f"Saved {event.path}")

    @on(events.DeliveryFailed)
    def _not_delivered(self, event: events.DeliveryFailed) -> None:
        if event.name == "export":
            self.notify(f"Could not save the export: {event.exception}", severity="error")


def make_app(store: Store | None = None, theme: str | None = None, attach: str | None = None) -> AceApp:
    """The app over ``store`` (default: the user's store), starting with ``theme`` (default: ``dark``,
    or ``ansi`` under ``NO_COLOR``), on the Run screen of ``attach`` (a run id or unique prefix) if given.

    Raises UserError for an unknown theme or run id, before anything is drawn.
    """
    store = store or Store()
    return AceApp(store, themes.resolve(theme), store.resolve(attach) if attach else None)
