"""Every acetui command in README.md's code blocks works word for word: MODEL and ID are filled in, a tiny
limit is appended (the last of a repeated option wins), and the bundled model is a tiny one so the whole
README runs in seconds. Where the README shows an error sentence, the command prints exactly that."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from runhelpers import cli

from acetui_core.config import RunConfig
from acetui_core.store import Store

README = Path(__file__).resolve().parent.parent / "README.md"
TINY_LIMIT = {
    "prune": ["--nsamples", "1", "--eval-limit", "1", "--eval-seqlen", "32", "--limit", "2"],
    "compare": ["--nsamples", "1", "--eval-limit", "1", "--eval-seqlen", "32", "--limit", "2"],
    "sweep": ["--nsamples", "1", "--eval-limit", "1", "--eval-seqlen", "32", "--limit", "2"],
    "eval": ["--limit", "2"],
}


def readme_commands() -> list[tuple[list[str], list[str]]]:
    """(the words of each acetui command in a code block, the lines the README shows it printing on stderr)."""
    commands: list[tuple[list[str], list[str]]] = []
    inside = False
    for line in README.read_text().splitlines():
        if line.startswith("```"):
            inside = not inside
            continue
        if not inside:
            continue
        text = line.split("  #")[0].strip().removeprefix("$ ")
        text = text.rsplit("&& ", 1)[-1]  # the set-up line: install steps, then the command
        text = re.sub(r"^(\w+=\S+ )*(\.venv/bin/)?", "", text)
        if text.startswith("acetui "):
            commands.append((shlex.split(text)[1:], []))
        elif commands and line.startswith("acetui: "):
            commands[-1][1].append(line)
    return commands


def readme_files() -> dict[str, str]:
    """The files the README shows in full: a ```python block whose first line is ``# NAME.py``."""
    blocks = re.findall(r"^```python\n# (\S+\.py)\n(.*?)^```", README.read_text(), flags=re.M | re.S)
    return {name: body for name, body in blocks}


def test_the_readme_shows_the_commands_it_promises():
    words = [" ".join(command[:2]) for command, _ in readme_commands()]
    for expected in (
        "prune --method",
        "runs show",
        "runs rm",
        "compare --methods",
        "sweep --method",
        "eval MODEL_OR_SAVED_DIR",
    ):
        assert any(command.startswith(expected) for command in words), (expected, words)


@pytest.mark.slow  # about 100 s: the README's grids (18 runs, windows up to 4096 tokens) on a tiny model
def test_every_readme_command_runs_word_for_word(make_tiny_model, tmp_path, monkeypatch, capsys):
    model = tmp_path / "tiny"
    shutil.copytree(make_tiny_model("llama"), model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 4096}))  # the README's lengths
    monkeypatch.setattr("acetui.commands.prune.bundled_model", lambda: model)
    monkeypatch.chdir(tmp_path)
    for name, body in readme_files().items():  # the plug-in its commands name
        (tmp_path / name).write_text(body)
    store = Store()
    for words, shown in readme_commands():
        finished = [run.id for run in store.list_runs(status="finished")]
        queued = store.create_run(RunConfig(str(model), "wanda", "0.5")) if words[:2] == ["runs", "cancel"] else None
        args = [
            str(model) if word in ("MODEL", "MODEL_OR_SAVED_DIR") else (queued or finished[0]) if word == "ID" else word
            for word in words
        ]
        code, out, err = cli(monkeypatch, capsys, *args, *TINY_LIMIT.get(words[0], []))
        if shown:
            assert (code, err.splitlines()) == (2, shown)
        else:
            assert code == 0, (words, err[-2000:])
    assert (tmp_path / "out" / "model.safetensors").is_file() and (tmp_path / "table.tex").is_file()
