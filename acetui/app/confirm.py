"""A yes/no question over any screen: the app asks it before cancelling, killing or deleting a run."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Static


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question; ``y`` or ``n`` (escape is no)."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

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
