"""Every command's --help reads in an 80-column terminal: flags by their name alone (no ``<bool>``, no
``--no-X`` twin), each help column wide enough for a phrase, and no value cut short."""

from __future__ import annotations

import pytest
import typer
from runhelpers import cli

from acetui.cli import app

NARROWEST_HELP = 36  # characters: what a sentence needs to wrap as prose, not a word a line


def _paths(command, path=()):
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _paths(sub, (*path, name))


COMMANDS = list(_paths(typer.main.get_command(app)))


def _help_column(panel: list[str]) -> int:
    """The width of a panel's last column (an option's help): from where its wrapped lines start to the
    panel's right border."""
    inner = [line[1:-1] for line in panel]
    start = max(len(text) - len(text.lstrip()) for text in inner if text.strip())
    return len(inner[0]) - start


def _panels(text: str) -> list[list[str]]:
    panels, current = [], None
    for line in text.splitlines():
        if line.startswith("╭"):
            current = []
        elif line.startswith("╰"):
            panels.append(current)
            current = None
        elif current is not None:
            current.append(line)
    return panels


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "acetui")
def test_help_reads_at_80_columns(monkeypatch, capsys, path):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = cli(monkeypatch, capsys, *path, "--help")
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "<bool>" not in out and "--no-" not in out
    assert "…" not in out  # nothing cut short
    for panel in _panels(out):
        assert _help_column(panel) >= NARROWEST_HELP, "\n".join(panel)
