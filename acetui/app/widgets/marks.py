"""Check marks that read without colour: Textual draws ``▐X▌`` for a checkbox ticked or not and tells
them apart by colour only, which the ansi theme and ``NO_COLOR`` lose. Here an unticked box is empty.
A ``TickList``'s space also ticks the row it was typed on, however fast the keys after it come."""

from __future__ import annotations

from rich.segment import Segment
from textual.content import Content
from textual.strip import Strip
from textual.widgets import Checkbox, OptionList, SelectionList
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

    def _on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        # Space posts the row highlighted as it acts, and SelectionList then toggled the row highlighted once
        # the message was handled: in one burst (``space Down``) the arrow had moved on, and its row was ticked.
        event.stop()
        event.prevent_default()  # SelectionList's own handler, next in the MRO, is not run
        self.toggle(self.get_option_at_index(event.option_index))
