"""The command palette (ctrl+p) and its runs: type part of a run's id, method, sparsity, model or status to
open it. The list comes from the app's in-memory run list, never from the store."""

from __future__ import annotations

from functools import partial

from textual.app import ComposeResult
from textual.command import CommandInput, CommandPalette, DiscoveryHit, Hit, Hits, Provider

from acetui.app.widgets.textfield import TextField
from acetui_core.run.config import model_name


# CommandInput first: Textual names a widget's CSS types along its first bases only, and the palette finds its
# field by that name (to focus it, to style it).
class PaletteField(CommandInput, TextField):
    """The palette's search field, typed into in the order of the keys, as the app's own fields are: as
    Textual's ``CommandInput``, backspaces and ctrl+u typed in one burst (SSH, tmux) with text ran after it
    ("dele", then ``BSpace BSpace lete``: "delele"; ``C-u delete``: an empty field)."""


class Palette(CommandPalette):
    """Textual's command palette, searched through a ``PaletteField``."""

    def compose(self) -> ComposeResult:
        # Textual's layout as it stands, its one field swapped as it is yielded (into the container it was
        # made in): a copy of the layout would miss Textual's later changes to it.
        for widget in super().compose():
            if isinstance(widget, CommandInput):
                widget = PaletteField(placeholder=self._placeholder, select_on_focus=False)
            yield widget


class RunCommands(Provider):
    def _commands(self):
        for run in sorted(self.app.runs, key=lambda r: (r.created, r.id), reverse=True):
            text = f"Open run {run.id} {run.label} {run.config.target} {model_name(run.config.model)} {run.status}"
            yield text, partial(self.app.follow, run.id)

    async def discover(self) -> Hits:
        for text, open_run in list(self._commands())[:5]:
            yield DiscoveryHit(text, open_run, help="On the Run screen")

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, open_run in self._commands():
            if (score := matcher.match(text)) > 0:
                yield Hit(score, matcher.highlight(text), open_run, help="On the Run screen")
