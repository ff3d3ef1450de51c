"""Issue 30, item 9: commands that only read a run store never make one. A store that does not exist, an
empty file or a file that is not SQLite is one sentence and exit 2, and nothing is created."""

from __future__ import annotations

import sqlite3

import pytest
from runhelpers import cli

READERS = {
    "runs": ["runs"],
    "runs show": ["runs", "show", "a0000001"],
    "runs cancel": ["runs", "cancel", "a0000001"],
    "runs rm": ["runs", "rm", "a0000001"],
    "runs sync": ["runs", "sync"],
    "export": ["export"],
    "verdict": ["verdict"],
    "figure": ["figure", "pareto", "-o", "{tmp}/p.tex"],
    "overlap": ["overlap", "a0000001", "b0000002"],
    "study status": ["study", "status", "{tmp}/s.toml"],
    "study report": ["study", "report", "{tmp}/s.toml", "-o", "{tmp}/report"],
}


def _store(kind: str, tmp_path):
    if kind == "missing folder":
        return tmp_path / "no" / "such" / "dir" / "runs.db"
    path = tmp_path / "runs.db"
    if kind == "empty file":
        path.touch()
    elif kind == "text file":
        path.write_text("precious notes\n")
    elif kind == "empty SQLite file":
        sqlite3.connect(path).execute("PRAGMA user_version = 0").connection.close()
    return path


@pytest.mark.parametrize("kind", ["missing folder", "missing file", "empty file", "text file", "empty SQLite file"])
@pytest.mark.parametrize("command", list(READERS))
def test_a_read_only_command_refuses_a_store_that_is_not_one_and_makes_nothing(
    command, kind, tmp_path, monkeypatch, capsys
):
    store = _store(kind, tmp_path)
    (tmp_path / "s.toml").write_text('method = ["wanda", "ria"]\n')  # a study needs its file
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    args = [arg.format(tmp=tmp_path) for arg in READERS[command]]
    code, out, err = cli(monkeypatch, capsys, *args, "--store", str(store))
    assert code == 2 and out == "", err
    assert err.startswith("acetui: ") and err.count("\n") == 1 and "Traceback" not in err
    assert str(store) in err
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before  # no folder, no store, no WAL file, the user's file as it was
    assert not (tmp_path / "no").exists()
