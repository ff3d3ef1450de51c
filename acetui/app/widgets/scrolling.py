"""Views whose keys scroll at once.

Textual moves a view after the next refresh, from where the view stood when the key came: the presses of
one burst (a held arrow over SSH, where one read brings many keys) each started from the same place, and
twenty presses moved a line or three. Mixed in before a container's class, this scrolls at each key
(a ``ScrollView``, such as the Run screen's log, already does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.actions import SkipAction
from textual.containers import VerticalScroll

if TYPE_CHECKING:
    from textual.widget import Widget

    _View = Widget
else:
    _View = object  # a plain mixin: a Widget base here would override the view's own class settings


class ScrollsAtOnce(_View):
    def action_scroll_up(self) -> None:
        self._scroll_by(y=-1)

    def action_scroll_down(self) -> None:
        self._scroll_by(y=1)

    def action_scroll_left(self) -> None:
        self._scroll_by(x=-1)

    def action_scroll_right(self) -> None:
        self._scroll_by(x=1)

    def action_page_up(self) -> None:
        self._scroll_by(y=-self.scrollable_content_region.height)

    def action_page_down(self) -> None:
        self._scroll_by(y=self.scrollable_content_region.height)

    def _scroll_by(self, x: int = 0, y: int = 0) -> None:
        if (x and not self.allow_horizontal_scroll) or (y and not self.allow_vertical_scroll):
            raise SkipAction()  # as Textual's own: the key goes on to the screen's bindings
        self.scroll_to(
            x=self.scroll_target_x + x if x else None,
            y=self.scroll_target_y + y if y else None,
            animate=False,
            immediate=True,
        )


class TextScroll(ScrollsAtOnce, VerticalScroll):
    """A vertical scroll (the keys panel, the Run screen's text tabs) that moves at each key."""
