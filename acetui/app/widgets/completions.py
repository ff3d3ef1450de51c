"""The model field's completions: the models found around (recent runs', checkpoints, ``.gguf`` files, the
Hugging Face cache) that hold what is typed, a few rows under the field."""

from __future__ import annotations

from textual.widgets import OptionList
from textual.widgets.option_list import Option

from acetui.app.candidates import shorten

SHOWN = 3  # rows of completions under the model field
WIDTH = 64  # characters of a completion shown (its end: the file name matters most)


class ModelCompletions(OptionList):
    """The ``candidates`` that hold the typed text, each option's id its model; hidden when none do."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.candidates: list[str] = []

    def show_matches(self, typed: str) -> None:
        typed = typed.strip().lower()
        matches = [c for c in self.candidates if typed in c.lower() and c.lower() != typed]
        self.set_options([Option(shorten(match, WIDTH), id=match) for match in matches])
        self.highlighted = 0 if matches else None
        self.display = bool(matches)
        self.styles.height = min(len(matches), SHOWN)
