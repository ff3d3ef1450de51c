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
    if command == "study status" and kind.startswith("missing"):  # before the first run: every cell missing
        assert code == 0 and err.startswith(f"No run store at {store} yet: no cell has a run.\n")
        assert not (tmp_path / "no").exists() and not store.exists()
        return
    assert code == 2 and out == "", err
    assert err.startswith("acetui: ") and err.count("\n") == 1 and "Traceback" not in err
    assert str(store) in err
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before  # no folder, no store, no WAL file, the user's file as it was
    assert not (tmp_path / "no").exists()


# ---- a store this user may read but not write --------------------------------------------------------

READING = [["runs"], ["runs", "show", "a0000000"], ["export", "--format", "markdown"], ["verdict"]]
WRITING = [["runs", "rm", "a0000000"], ["runs", "cancel", "a0000000"], ["runs", "sync"]]


def _finished_runs(path) -> None:
    from runhelpers import Clock, insert_run

    from acetui_core.run.config import RunConfig
    from acetui_core.storage.store import Store

    clock = Clock()
    store = Store(path, clock=clock)
    for number, method in enumerate(("wanda", "ria")):
        insert_run(
            store, clock, f"a000000{number}", RunConfig("org/m", method, "0.5"), created=1.7e9 + number, ppl=10.0
        )


def _reads_and_refuses_writes(store, model, monkeypatch, capsys) -> None:
    """Reading commands work on ``store``; commands that write are one sentence naming it read-only, and the
    file is left as it was."""
    before = store.read_bytes()
    for args in READING:
        code, out, err = cli(monkeypatch, capsys, *args, "--store", str(store))
        assert code == 0 and ("a0000000" in out or "| Wanda-16 |" in out or "Wanda-16  " in out), (args, err)
    sentence = f"acetui: The run store {store} is read-only (the file or its folder cannot be written)"
    # the last: refused before its (missing) model is looked at
    for args in [*WRITING, ["prune", str(model), "--method", "wanda", "--eval", "none"], ["prune", "/no/such/model"]]:
        code, out, err = cli(monkeypatch, capsys, *args, "--store", str(store))
        assert code == 2 and err.startswith(sentence) and err.count("\n") == 1, (args, err)
    assert store.read_bytes() == before


def test_a_store_this_user_cannot_write_is_read_but_never_written(make_tiny_model, tmp_path, monkeypatch, capsys):
    """A colleague's store, a file or folder without write permission: `runs`, `export`, `verdict` read it
    ("cannot be read and written by this user" refused them all), and writing commands say it is read-only."""
    import os

    from acetui_core.storage import store_db

    store = tmp_path / "theirs" / "runs.db"
    _finished_runs(store)
    real = os.access

    def access(path, mode, **kwargs):  # the permission bits, whoever runs the test (root writes anywhere)
        if mode & os.W_OK and str(path) in (str(store), str(store.parent)):
            return False
        return real(path, mode, **kwargs)

    from acetui_core.run.config import RunConfig
    from acetui_core.storage.store import Store

    # a queued run whose process is gone: a reader marks it interrupted, which this store cannot record
    Store(store).create_run(RunConfig("org/m", "wanda", "0.5"), run_id="c0000003", owner_pid=4_194_999)
    monkeypatch.setattr(store_db.os, "access", access)
    _reads_and_refuses_writes(store, make_tiny_model("llama"), monkeypatch, capsys)
    before = store.read_bytes()
    # it reads interrupted, as in a store that can be written, though nothing records it
    code, out, err = cli(monkeypatch, capsys, "runs", "--store", store)
    assert code == 0 and "c0000003  interrupted" in out, err
    code, out, err = cli(monkeypatch, capsys, "runs", "--status", "interrupted", "--store", store)
    assert code == 0 and "c0000003  interrupted" in out and "a0000000" not in out, err
    code, out, err = cli(monkeypatch, capsys, "runs", "--status", "queued", "--store", store)
    assert "c0000003" not in out, out
    code, out, err = cli(monkeypatch, capsys, "runs", "show", "c0000003", "--store", store)
    assert code == 0 and "interrupted" in out and "never started" in out, out
    assert store.read_bytes() == before  # and nothing was written


def test_a_store_on_a_read_only_mount_is_read_with_or_without_its_write_ahead_log(
    make_tiny_model, tmp_path, monkeypatch, capsys
):
    """A real read-only medium (a bind mount, so root is refused too): SQLite reads the store whether a
    write-ahead log was left beside it (read-only mode) or not (immutable), and writes are refused."""
    import os
    import shutil
    import subprocess

    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root to bind-mount a folder read-only")
    source, mounted = tmp_path / "source", tmp_path / "mounted"
    mounted.mkdir()
    _finished_runs(source / "runs.db")
    for left in ("clean", "with its log"):
        if left == "with its log":  # a writer still holds it: its -wal and -shm are beside it, unmerged
            holder = sqlite3.connect(source / "runs.db")
            holder.execute("PRAGMA wal_autocheckpoint = 0")
            holder.execute("UPDATE runs SET error = 'held' WHERE id = 'a0000001'")
            holder.commit()
            assert (source / "runs.db-wal").stat().st_size > 0
        mount = subprocess.run(["mount", "-o", "bind", source, mounted], capture_output=True)
        if mount.returncode:
            pytest.skip(f"cannot bind-mount here: {mount.stderr.decode().strip()}")
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", mounted], check=True, capture_output=True)
            _reads_and_refuses_writes(mounted / "runs.db", make_tiny_model("llama"), monkeypatch, capsys)
            code, out, _ = cli(monkeypatch, capsys, "runs", "show", "a0000001", "--store", mounted / "runs.db")
            assert code == 0 and ("held" in out) == (left == "with its log"), out  # the log's change is read
        finally:
            subprocess.run(["umount", "-l", mounted], check=True)
        if left == "with its log":
            holder.close()


def test_another_users_store_is_read_as_that_user(tmp_path):
    """A colleague's store, closed cleanly (no -shm beside it), read by a user who may not write its folder:
    SQLite's read-only mode cannot make the -shm and says "attempt to write a readonly database", which
    was not taken for a store to open as immutable: every reading command exited 2. Run as a real other
    user (uid 65534), since root writes anywhere."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run a command as another user")
    shared = Path(tempfile.mkdtemp(prefix="acetui-theirs-"))  # tmp_path's parents are private to root
    try:
        shared.chmod(0o755)
        store = shared / "runs.db"
        _finished_runs(store)
        assert not Path(f"{store}-shm").exists()
        home = shared / "home"
        home.mkdir(mode=0o777)
        home.chmod(0o777)
        env = {**os.environ, "HOME": str(home), "ACETUI_HOME": str(home), "ACETUI_CONFIG_DIR": str(home)}
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m", "acetui"]
        readable = subprocess.run([*as_nobody, "--help"], env=env, capture_output=True, text=True, timeout=120)
        if readable.returncode:
            pytest.skip(f"acetui cannot run as uid 65534 from here: {readable.stderr.strip()[-200:]}")
        before = store.read_bytes()
        for args in (["runs"], ["export", "--format", "markdown"], ["verdict"]):
            done = subprocess.run(
                [*as_nobody, *args, "--store", str(store)], env=env, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0 and "Wanda-16" in done.stdout, (args, done.stderr)
        prune = subprocess.run(
            [*as_nobody, "prune", "/no/such/model", "--store", str(store)], env=env, capture_output=True, text=True
        )
        assert prune.returncode == 2 and "is read-only" in prune.stderr, prune.stderr
        assert store.read_bytes() == before
    finally:
        shutil.rmtree(shared)


def test_an_older_store_this_user_cannot_write_is_one_sentence(tmp_path, monkeypatch, capsys):
    """A version-0 store that would need migrating, on a store this user may only read: one sentence (the
    check read the schema from a closed connection: a ProgrammingError)."""
    import os
    from pathlib import Path

    from acetui_core.storage import store_db

    store = tmp_path / "theirs" / "runs.db"
    store.parent.mkdir()
    db = sqlite3.connect(store)
    db.executescript((Path(__file__).parent / "store_v0.sql").read_text())
    db.commit()
    db.close()
    before = store.read_bytes()
    real = os.access

    def access(path, mode, **kwargs):  # the permission bits, whoever runs the test (root writes anywhere)
        if mode & os.W_OK and str(path) in (str(store), str(store.parent)):
            return False
        return real(path, mode, **kwargs)

    monkeypatch.setattr(store_db.os, "access", access)
    code, out, err = cli(monkeypatch, capsys, "runs", "--store", str(store))
    assert code == 2 and err.count("\n") == 1 and "was written by an older acetui and must be updated" in err, err
    assert store.read_bytes() == before
