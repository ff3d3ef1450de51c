"""The Run screen's progress bar, whose empty track reads empty without colour.

Textual draws the part not yet done with the same glyph as the part done, told apart by colour alone, and
where the track's colour is the terminal's default (``NO_COLOR``) it leaves that part blank, except at 0%,
where it drew the whole track: a bar at 0% looked like one at 100%.
"""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text
from textual.renderables.bar import Bar as BarRenderable
from textual.widgets import ProgressBar


class EmptyTrack(BarRenderable):
    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        track = console.get_style(self.background_style).color
        if self.highlight_range[1] <= 0 and track is not None and track.is_default:  # Textual's own rule above 0%
            yield Text(" " * (self.width or options.max_width), end="")
            return
        yield from super().__rich_console__(console, options)


class RunProgressBar(ProgressBar):
    BAR_RENDERABLE = EmptyTrack
