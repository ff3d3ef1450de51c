"""Check marks that read without colour: Textual draws ``▐X▌`` for a checkbox ticked or not and tells
them apart by colour only, which the ansi theme and ``NO_COLOR`` lose. Here an unticked box is empty."""

from __future__ import annotations

from rich.segment import Segment
from textual.content import Content
from textual.strip import Strip
from textual.widgets import Checkbox, SelectionList
from textual.widgets._toggle_button import ToggleButton
from textual.widgets.option_list import OptionDoesNotExist

EMPTY = " "


class Tick(Checkbox):
    def render(self) -> Content:
        self.BUTTON_INNER = ToggleButton.BUTTON_INNER if self.value else EMPTY  # Textual's name for the mark
        return super().render()


class TickList(SelectionList):
    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        try:
            selection = self.get_option_at_index(self.scroll_offset.y + y)
        except OptionDoesNotExist:
            return strip
        segments = list(strip)
        if selection.value in self.selected or len(segments) < 2 or segments[1].text != ToggleButton.BUTTON_INNER:
            return strip
        segments[1] = Segment(EMPTY, segments[1].style, segments[1].control)
        return Strip(segments, strip.cell_length)
