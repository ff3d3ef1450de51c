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


def _all_flags(command) -> set[str]:
    flags = {flag for param in getattr(command, "params", []) for flag in getattr(param, "opts", [])}
    for sub in getattr(command, "commands", {}).values():
        flags |= _all_flags(sub)
    return flags


def test_every_flag_the_engine_names_in_a_sentence_exists():
    """A note told users to pass --zeroshot-limit, which no command has (the flag is --limit)."""
    import re
    from pathlib import Path

    import acetui_core

    # other programs' flags the engine names: pip's, the DSnoT and RIA reference codes', scancel's, a docstring's
    foreign = {"--no-deps", "--skip_layer", "--reallocation", "--signal", "--the-name", "--no-the-name"}
    flags = _all_flags(typer.main.get_command(app)) | foreign
    named = {
        (path.name, flag)
        for path in Path(acetui_core.__file__).parent.rglob("*.py")
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9_-]*[a-z0-9]", path.read_text())
    }
    assert {(where, flag) for where, flag in named if flag not in flags} == set()


def _command_at(path):
    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return command


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "acetui")
def test_an_option_given_twice_is_refused_not_read_as_its_last_value(monkeypatch, capsys, path):
    """``compare --methods wanda --methods magnitude`` ran magnitude alone: the parser keeps an option's
    last value. Every option of every command, by each of its names, flags included."""
    from typer.core import TyperOption

    command = _command_at(path)
    options = [p for p in command.get_params(typer.Context(command)) if isinstance(p, TyperOption) and not p.multiple]
    for option in options:
        first, *others = option.opts
        again = others[0] if others else first  # an alias counts: -s 0.5 --sparsity 0.6
        given = [first, again] if option.is_flag else [first, "0.5", f"{again}=0.6"]
        code, _, err = cli(monkeypatch, capsys, *path, *given)
        assert code == 2, (given, err)
        assert err.startswith("acetui: --") and " is given twice; give it once" in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (
            ["compare", "m", "--methods", "wanda", "--methods", "magnitude"],
            "--methods is given twice; give it once (a list is comma-separated: --methods wanda,magnitude).",
        ),
        (["sweep", "m", "-s", "0.5", "--sparsity=0.6"], "(a list is comma-separated: --sparsity 0.5,0.6)."),
        (["prune", "m", "--sparsity", "0.5", "-s", "0.6"], "acetui: --sparsity is given twice; give it once.\n"),
    ],
)
def test_a_list_option_given_twice_is_told_how_to_give_a_list(monkeypatch, capsys, args, sentence):
    code, _, err = cli(monkeypatch, capsys, *args)
    assert code == 2 and sentence in err, err


def test_an_option_that_takes_repeats_still_takes_them(tmp_path, monkeypatch, capsys):
    """``acetui --method A --method B`` remembers both plug-ins: an option declared multiple is not refused."""
    monkeypatch.setenv("ACETUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("COLUMNS", "1000")
    for name in ("first", "second"):
        (tmp_path / f"{name}.py").write_text(f"def {name}(W, stats, opts):\n    return W.abs()\n")
    plugins = ["--method", f"{tmp_path}/first.py:first", "--method", f"{tmp_path}/second.py:second"]
    code, out, err = cli(monkeypatch, capsys, *plugins, "methods")
    assert code == 0, err
    assert "first.py" in out and "second.py" in out
