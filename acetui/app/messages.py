"""Messages that store-polling threads post to the screens (``post_message`` is thread-safe;
widgets are only ever touched by the handlers, on the main thread)."""

from __future__ import annotations

from textual.message import Message

from acetui_core.run.records import LayerRecord
from acetui_core.storage.store_rows import RunRecord


class RunProgress(Message):
    """The followed run changed: its record (without layers) and the layers recorded since the last message."""

    def __init__(self, run: RunRecord, new_layers: list[LayerRecord]) -> None:
        super().__init__()
        self.run = run
        self.new_layers = new_layers


class RunsListed(Message):
    """The list of runs in the store changed."""

    def __init__(self, runs: list[RunRecord]) -> None:
        super().__init__()
        self.runs = runs


class StoreFailed(Message):
    """Reading the store failed (the message is the UserError's sentence)."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class CandidatesFound(Message):
    """Model completions gathered in the background for the New run form."""

    def __init__(self, candidates: list[str]) -> None:
        super().__init__()
        self.candidates = candidates


class LogLines(Message):
    """Lines the followed run's log file gained (``missing``: there is no such file, or not yet)."""

    def __init__(self, run_id: str, lines: list[str], missing: bool = False) -> None:
        super().__init__()
        self.run_id = run_id
        self.lines = lines
        self.missing = missing


class CostEstimated(Message):
    """The New run form's cost estimate, worked out in the background (markup)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class RunsChecked(Message):
    """The launcher's checks of the New run form's runs ended: the runs started (their ids, queue order),
    or ``refusal`` says why none did."""

    def __init__(self, run_ids: list[str], refusal: str = "") -> None:
        super().__init__()
        self.run_ids = run_ids
        self.refusal = refusal
