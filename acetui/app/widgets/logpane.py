"""The Run screen's log pane: a ``RichLog`` that re-wraps its lines when its width changes.

RichLog wraps a line once, at the width the pane had when the line came; shown full screen (``l``) or
after the terminal grew, the log would keep its narrow wrap. Here the lines are kept as text and
written again at the new width."""

from __future__ import annotations

from collections import deque

from rich.text import Text
from textual import events
from textual.widgets import RichLog


class LogPane(RichLog):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._texts: deque[Text] = deque(maxlen=self.max_lines)
        self._width = 0

    def add(self, text: Text | str) -> None:
        text = Text(text) if isinstance(text, str) else text
        self._texts.append(text)
        self.write(text)

    def clear(self) -> LogPane:
        self._texts.clear()
        return super().clear()

    def on_resize(self, event: events.Resize) -> None:
        # RichLog's own handler runs after this one and writes what came before the first size was known.
        width, self._width = self._width, event.size.width
        if width and event.size.width != width and self._size_known:
            super().clear()
            for text in self._texts:
                self.write(text)
