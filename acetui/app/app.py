"""The acetui app: the four screens over the workbench (``acetui.app.workbench``: the run store, its runs,
starting and stopping them), with the keys, themes, notifications and command palette.

It holds no pruning logic: runs start as their own processes through ``acetui_core.execution.launch`` (so closing the
app or losing SSH does not stop them) and every screen reads the store. ``make_app`` is the one
factory the CLI and the tests share.
"""

from __future__ import annotations

import os
import shlex

from textual.actions import SkipAction
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.command import CommandPalette
from textual.widget import AwaitMount

import acetui_themes as themes
from acetui import notify, preferences
from acetui.app import summary
from acetui.app.commands import Palette, RunCommands
from acetui.app.help import HelpScreen, screen_actions, screen_name
from acetui.app.keyorder import KeysWhereTyped
from acetui.app.screens.new_run import NewRunScreen
from acetui.app.screens.results import ResultsScreen
from acetui.app.screens.run import RunScreen
from acetui.app.screens.runs import RunsScreen
from acetui.app.workbench import Workbench
from acetui_core.storage.store import Store
from acetui_core.storage.store_db import default_store_path

NOTIFY_TITLES = {
    "bell": "Notify with the bell",
    "osc": "Notify with the bell and a desktop notification (OSC 9/777)",
    "none": "Do not notify when a run ends",
}


class AceApp(KeysWhereTyped, Workbench):
    """Four screens (modes): New run, Run, Results, Runs; F1-F4 switch between them."""

    TITLE = "acetui"
    SUB_TITLE = "post-training pruning workbench"
    CSS_PATH = themes.STYLESHEET
    COMMANDS = App.COMMANDS | {RunCommands}
    MODES = {"new": NewRunScreen, "run": RunScreen, "results": ResultsScreen, "runs": RunsScreen}
    # The screens' keys are priority ones, run by the app as it reads the key and done once the screen is
    # composed: the keys read in the same burst after F3 (SSH, tmux, a fast typist: "F3 / llama") then reach
    # the Results screen. As bindings of the app alone, F3 was run only once it had bubbled up from the
    # widget focused before it, after the keys that followed had been handed to that widget.
    BINDINGS = [
        Binding("f1", "switch_mode('new')", "New", tooltip="The New run form", priority=True),
        Binding(
            "f2",
            "show_run",
            "Run",
            tooltip="The active run (else the one shown last, else the newest)",
            priority=True,
        ),
        Binding("f3", "switch_mode('results')", "Results", tooltip="Finished runs side by side; export", priority=True),
        Binding("f4", "switch_mode('runs')", "Runs", tooltip="Every run in the store", priority=True),
        # F5 first, so the footer always shows it: it works while typing too, where a text field takes "?".
        Binding("f5,question_mark", "help", "Help", tooltip="The keys of this screen"),
        Binding("ctrl+t", "next_theme", "Theme", show=False, tooltip="Next theme: dark, light, ansi"),
        Binding("escape", "close_panels", "Close", show=False, tooltip="Close the keys panel or a maximised pane"),
        Binding("ctrl+q", "quit", "Quit", priority=True),
        # Priority, so the focus moves as the app reads the key: the keys read in the same burst after it
        # (SSH, tmux, a fast typist) then go to the next field. As the screen's own binding, tab was run only
        # once it had bubbled up from the field, after those keys had been handed to the field it left.
        Binding("tab", "focus_next", show=False, priority=True),
        Binding("shift+tab", "focus_previous", show=False, priority=True),
    ]

    def __init__(
        self,
        store: Store,
        theme: str,
        attach: str | None = None,
        user: preferences.Preferences | None = None,
        remember: dict | None = None,
        chosen: list[str] | None = None,
    ) -> None:
        # Under NO_COLOR, Textual picks its colour filter here, from the theme of the moment: asking for
        # ANSI colours makes it the one that strips colours, not the one that turns ANSI colours to grey
        # (which drew the ansi theme black on black).
        super().__init__(
            store,
            user or preferences.Preferences(),
            ansi_color=True if os.environ.get("NO_COLOR") is not None else None,
        )
        self._start_theme = theme
        self._attach_run = attach  # not _attach: Textual's MessagePump has a method of that name
        self._remember_at_start = remember or {}
        self.chosen_runs = set(chosen or ())

    def on_mount(self) -> None:
        self.set_class(os.environ.get("NO_COLOR") is not None, "-no-color")
        self.register_themes()
        self.theme = self._start_theme
        self.watch(self, "theme", self._remember_theme, init=False)
        if self.preferences.problem:
            self.notify(self.preferences.problem, severity="warning", timeout=10)
        if self._remember_at_start:
            self.remember(**self._remember_at_start)
        self._watch_runs()
        if self._attach_run:
            self.follow(self._attach_run)
        elif self.chosen_runs:
            self.switch_mode("results")
        else:
            self.switch_mode("new")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # The key of the screen already shown is hidden: the footer has no room to spare at 80 columns.
        if action == "switch_mode" and parameters and parameters[0] == self.current_mode:
            return False
        if action == "show_run" and self.current_mode == "run":
            # On the Run screen F2 is offered only when another run is the one to watch (a run started
            # from the CLI while a finished one is shown).
            return summary.run_to_show(self.runs, self.followed) not in (None, self.followed)
        return True

    def _end_batch(self) -> None:
        super()._end_batch()
        # A screen skips drawing while any batch is open, and Textual tells only the app when the last one
        # ends. In one burst (``F3 F4 F3`` at start) Results came back while the Runs screen behind it was
        # redrawing its footer in a batch: Results was never drawn, the New run form stayed on the terminal.
        if not self._batch_count and self._screen_stacks.get(self._current_mode):
            self.screen.check_idle()

    def register_themes(self) -> None:
        for theme in themes.THEMES.values():
            self.register_theme(theme)

    # ---- preferences ----

    def _remember_theme(self, theme: str) -> None:
        self.remember(theme=theme)

    def action_next_theme(self) -> None:
        self.theme = themes.next_theme(self.theme)
        self.notify(f"Theme: {self.theme}", timeout=2)

    def set_notify(self, mode: str) -> None:
        self.remember(notify=mode)
        self.notify(f"When a run ends: {NOTIFY_TITLES[mode].lower()}.", timeout=4)

    async def _skip_under_a_dialog(self) -> None:
        """A dialog holds the keys: a screen key, a priority binding that Textual runs past a modal screen,
        is skipped there (the dialog gets the key, as before). The keys screen is left instead: it asks
        nothing, and a key that closed it in the same burst (``escape F3``) reaches it only after F3."""
        if isinstance(self.screen, HelpScreen):
            await self.pop_screen()
        if self.screen.is_modal:
            raise SkipAction()

    async def action_switch_mode(self, mode: str) -> None:
        await self._skip_under_a_dialog()
        await self.switch_mode(mode)  # composed before the app reads the next key

    async def action_show_run(self) -> None:
        await self._skip_under_a_dialog()
        await self.show_run()

    def show_run(self) -> AwaitMount:
        """The Run screen, on the run to watch if another than the one shown (F2); awaitable: mounted."""
        pick = summary.run_to_show(self.runs, self.followed)
        if pick is not None and pick != self.followed:
            return self.follow(pick)
        return self.switch_mode("run")

    # ---- help, panels, the command palette ----

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen))

    async def action_command_palette(self) -> None:  # type: ignore[override]  # Textual awaits an async action
        # ctrl+p is a priority key, run as the app reads it, before an escape typed ahead of it in the same
        # burst reaches the keys screen (``escape C-p``): that escape then closed the palette, or the keys
        # screen stayed under it. The keys screen is left first, as F3 leaves it (``_skip_under_a_dialog``).
        if isinstance(self.screen, HelpScreen):
            await self.pop_screen()
        if self.use_command_palette and not CommandPalette.is_open(self):
            await self.push_screen(Palette(id="--command-palette"))  # composed before the app reads the next key

    def action_close_panels(self) -> None:
        if self.screen.query("HelpPanel"):
            self.action_hide_help_panel()
        else:
            raise SkipAction()  # let the screen or the focused widget have escape

    def get_system_commands(self, screen):
        yield from super().get_system_commands(screen)
        yield SystemCommand("New run", "Open the New run form (F1)", lambda: self.switch_mode("new"))
        yield SystemCommand("Show the active run", "The Run screen, on the active or latest run (F2)", self.show_run)
        yield SystemCommand("Results", "Finished runs side by side (F3)", lambda: self.switch_mode("results"))
        yield SystemCommand("Runs", "Every run in the store (F4)", lambda: self.switch_mode("runs"))
        for fmt, title in (("csv", "Export results as CSV"), ("latex", "Export results as LaTeX")):
            yield SystemCommand(
                title,
                "The selected (or all listed) finished runs, saved to a file",
                lambda fmt=fmt: self.run_on_screen("results", f"export('{fmt}')"),
            )
        yield SystemCommand(
            "Copy the LaTeX table",
            "Of the selected (or all listed) finished runs (OSC 52)",
            lambda: self.run_on_screen("results", "copy_latex"),
        )
        named = {"export('csv')", "export('latex')", "copy_latex"}  # above, under the names users look for
        for mode, screen in self.MODES.items():  # every screen's keys, from any screen (it is shown first)
            if not isinstance(screen, type):
                continue
            for action, what, keys in screen_actions(screen, self.get_key_display):
                if action not in named and action not in ("focus_filter", "focus_table"):
                    yield SystemCommand(
                        f"{screen_name(screen)}: {what}",
                        f"{keys} on {screen_name(screen)}",
                        lambda mode=mode, action=action: self.run_on_screen(mode, action),
                    )
        shown = next((r for r in self.runs if r.id == self.followed), None)
        if shown is not None and shown.active:
            yield SystemCommand(
                f"Cancel run {shown.id}",
                f"{shown.title} (asks first)",
                lambda: self.cancel_run(shown),
            )
        yield SystemCommand("Next theme", "dark, light, ansi (ctrl+t)", self.action_next_theme)
        for mode, title in NOTIFY_TITLES.items():
            yield SystemCommand(title, f"--notify {mode} (remembered)", lambda mode=mode: self.set_notify(mode))
        yield SystemCommand("Help", "The keys of this screen (F5)", self.action_help)

    async def run_on_screen(self, mode: str, action: str) -> None:
        """``action`` of the screen ``mode``, switched to first (the command palette offers every screen's)."""
        await self.switch_mode(mode)
        await self.run_action(action, self.screen)


def runs_going_on(store: Store) -> str | None:
    """The line said on the terminal once the app has closed while runs go on (they are processes of their
    own): which runs, and the commands that follow them; None when no run is queued or running."""
    going = [run for run in store.list_runs() if run.active]
    if not going:
        return None
    named = ", ".join(f"{run.id} {run.title}" for run in going[:3])
    named += ", ..." if len(going) > 3 else ""
    where = "" if store.path == default_store_path() else f" --store {shlex.quote(str(store.path))}"
    pick = summary.run_to_show(going, None)  # as F2: the newest running run
    if len(going) == 1:
        said, follow = "1 run is still going", f"it. Follow it with: acetui attach {pick}{where}"
    else:
        said, follow = (
            f"{len(going)} runs are still going",
            f"them. Follow the newest with: acetui attach {pick}{where}",
        )
    return f"acetui: {said} ({named}); closing the app does not stop {follow} (acetui runs{where} lists them)."


def make_app(
    store: Store | None = None,
    theme: str | None = None,
    attach: str | None = None,
    notify_mode: str | None = None,
    chosen: list[str] | None = None,
) -> AceApp:
    """The app over ``store`` (default: the user's store) on the Run screen of ``attach`` (a run id or
    unique prefix) if given, else on Results with the runs ``chosen`` selected (a study's) if any. The theme is ``theme``, else ``ansi`` under ``NO_COLOR``, else the one the
    user last chose, else ``dark``; ``theme`` and ``notify_mode`` given here are remembered.

    Raises UserError for an unknown theme, notification or run id, or a store that cannot be read (a damaged
    file whose header is sound opens, then fails at its first read), before anything is drawn.
    """
    store = store or Store()
    store.list_runs()  # read once here: in the app's threads the store's sentence came under a traceback
    user = preferences.load()
    start = themes.resolve(theme)
    if theme is None and os.environ.get("NO_COLOR") is None and user.theme in themes.available():
        start = user.theme
    given = {"theme": theme, "notify": notify_mode and notify.check_mode(notify_mode)}
    if user.notify not in notify.MODES:
        user.notify = preferences.Preferences().notify
    run_id = store.resolve(attach) if attach else None
    remembered = {k: v for k, v in given.items() if v is not None}
    return AceApp(store, start, run_id, user, remember=remembered, chosen=chosen)
