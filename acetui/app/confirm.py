"""A yes/no question over any screen: the app asks it before cancelling, killing or deleting a run."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Static


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question; ``y`` or ``n`` (escape is no)."""

    # Priority: the answer is taken as the app reads the key, so the dialog is off the stack before the
    # next key of the same burst (``n F3``) is read; otherwise F3 met the dialog still open and was dropped.
    BINDINGS = [
        Binding("y", "answer(True)", "Yes", priority=True),
        Binding("n,escape", "answer(False)", "No", priority=True),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Static(self.question, markup=False)
            yield Static("[b]y[/b] yes   [b]n[/b] no", id="confirm-keys")
        yield Footer(show_command_palette=False, compact=True)

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
