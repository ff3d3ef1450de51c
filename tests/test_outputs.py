"""Issue 30, item 1: every file acetui writes where a user named it goes through one guard
(``acetui_core.basics.outputs``). An existing file is replaced only with --overwrite; the run store, its files,
the data folder and the models, calibration files and checkpoints of the store's runs never, even with it;
a write goes to a partial file beside its target and is renamed, so a failure leaves the old file whole."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from runhelpers import Clock, cli, insert_run

from acetui_core.basics.errors import UserError
from acetui_core.basics.outputs import reserve_new_file, write_text_atomic
from acetui_core.run.config import RunConfig
from acetui_core.storage.store import Store

PRECIOUS = "precious\n"


@pytest.fixture
def places(tmp_path, monkeypatch):
    """A store with one finished run of a local model folder and a calibration file, its log, a data folder."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "notes.txt").write_text(PRECIOUS)
    monkeypatch.setenv("ACETUI_DATA_DIR", str(data))
    model = tmp_path / "models" / "tiny"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"precious": true}\n')
    calib = tmp_path / "calib.txt"
    calib.write_text(PRECIOUS)
    store = Store(tmp_path / "store" / "runs.db", clock=Clock())
    config = RunConfig(model=str(model), method="wanda", sparsity="0.5", calib=str(calib))
    insert_run(store, Clock(), "a0000001", config, created=1.7e9, ppl=9.0, result={"saved_to": str(tmp_path / "out")})
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "config.json").write_text(PRECIOUS)
    # a run of a calibration mixture and a plug-in metric: each file is named inside a longer setting
    for name in ("domain.jsonl", "mine.py"):
        (tmp_path / name).write_text(PRECIOUS)
    mixed = RunConfig(
        model=str(model),
        method=f"{tmp_path / 'mine.py'}:score",
        sparsity="0.5",
        calib=f"c4@3+{tmp_path / 'domain.jsonl'}@1",
    )
    insert_run(store, Clock(), "a0000002", mixed, created=1.7e9 + 60, ppl=9.5)
    store.check_log_folder()
    store.log_path("a0000001").write_text(PRECIOUS)
    (tmp_path / "store-link.db").symlink_to(store.path)
    Path(f"{store.path}.study.lock").write_text(PRECIOUS)  # as `acetui study run` leaves it
    return {
        "store": store.path,
        "its WAL file": Path(f"{store.path}-wal"),
        "its log": store.log_path("a0000001"),
        "its study lock": Path(f"{store.path}.study.lock"),
        "a link to the store": tmp_path / "store-link.db",
        "the model's config.json": model / "config.json",
        "a new file in the model": model / "table.csv",
        "the calibration file": calib,
        "a file of a calibration mixture": tmp_path / "domain.jsonl",
        "a plug-in metric's file": tmp_path / "mine.py",
        "the saved checkpoint's config.json": tmp_path / "out" / "config.json",
        "a file of the data folder": data / "notes.txt",
        "tmp": tmp_path,
    }


def _args(command: str, places: dict, target: Path) -> list[str]:
    store = ["--store", str(places["store"])]
    if command == "export":
        return ["export", "--format", "csv", "-o", str(target), *store]
    return ["figure", "pareto", "-o", str(target), *store]


def _files(folder: Path) -> dict[str, bytes]:
    skip = {"runs.db-wal", "runs.db-shm"}  # SQLite's own, changed by any read
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.name not in skip}


PROTECTED = [
    ("store", "is the run store"),
    ("its WAL file", "is the run store"),
    ("its log", "lies inside a folder of the run store"),
    ("its study lock", "is the run store's study lock"),
    ("a link to the store", "is the run store"),
    ("the model's config.json", "lies inside the model of run a0000001"),
    ("a new file in the model", "lies inside the model of run a0000001"),
    ("the calibration file", "is the calibration file of run a0000001"),
    ("a file of a calibration mixture", "is the calibration file of run a0000002"),
    ("a plug-in metric's file", "is the plug-in metric of run a0000002"),
    ("the saved checkpoint's config.json", "lies inside the checkpoint saved by run a0000001"),
    ("a file of the data folder", "lies inside the data folder"),
]


CASES = [("export", place, fragment) for place, fragment in PROTECTED] + [
    ("figure", place, fragment) for place, fragment in PROTECTED if "lies inside" in fragment
]


@pytest.mark.parametrize(("command", "place", "fragment"), CASES, ids=[f"{c}-{p}" for c, p, _ in CASES])
def test_nothing_the_runs_read_or_keep_is_written_even_with_overwrite(
    places, monkeypatch, capsys, command, place, fragment
):
    target = places[place] if command == "export" else places[place].with_name("figure.tex")
    before = _files(places["tmp"])
    code, out, err = cli(monkeypatch, capsys, *_args(command, places, target), "--overwrite")
    assert code == 2 and out == "", err
    assert err.startswith("acetui: ") and err.count("\n") == 1 and fragment in err, err
    assert _files(places["tmp"]) == before
    assert sorted(run.id for run in Store(places["store"]).list_runs()) == ["a0000001", "a0000002"]


@pytest.mark.parametrize("target", ["model/config.json", "calib.jsonl", "out/config.json"])
def test_relative_paths_of_a_run_are_protected_from_any_folder(tmp_path, monkeypatch, capsys, target):
    """A run recorded from folder ``work`` with a relative model, calibration file and --save names them
    as typed; an export from another folder with --overwrite must still refuse to write over them (it
    read them from its own folder and replaced the model's weights)."""
    work = tmp_path / "work"
    for folder in ("model", "out"):
        (work / folder).mkdir(parents=True)
        (work / folder / "config.json").write_text(PRECIOUS)
    (work / "calib.jsonl").write_text(PRECIOUS)
    store = Store(tmp_path / "runs.db", clock=Clock())
    monkeypatch.chdir(work)
    config = RunConfig(model="model", method="wanda", sparsity="0.5", calib="calib.jsonl")
    insert_run(store, Clock(), "a0000001", config, created=1.7e9, ppl=9.0, result={"saved_to": "out"}, pin_env=False)
    monkeypatch.chdir(tmp_path)
    args = ["export", "--format", "csv", "-o", f"work/{target}", "--overwrite", "--store", "runs.db"]
    code, out, err = cli(monkeypatch, capsys, *args)
    assert code == 2 and "run a0000001" in err, err
    assert (work / target).read_text() == PRECIOUS

    # the same names in another folder are other files, not the run's: written as any file is
    other = tmp_path / "other"
    for folder in ("model", "out"):
        (other / folder).mkdir(parents=True)
    monkeypatch.chdir(other)
    args = ["export", "--format", "csv", "-o", target, "--overwrite", "--store", "../runs.db"]
    code, out, err = cli(monkeypatch, capsys, *args)
    assert code == 0 and (other / target).read_text().startswith("id,status,"), err


@pytest.mark.parametrize("command", ["export", "figure"])
def test_an_existing_file_is_replaced_only_with_overwrite_and_keeps_its_mode(places, monkeypatch, capsys, command):
    target = places["tmp"] / ("x.csv" if command == "export" else "existing.tex")
    target.write_text(PRECIOUS)
    target.chmod(0o640)
    code, _, err = cli(monkeypatch, capsys, *_args(command, places, target))
    assert code == 2 and f"-o {target} exists; pass --overwrite to replace it." in err
    assert target.read_text() == PRECIOUS
    code, _, err = cli(monkeypatch, capsys, *_args(command, places, target), "--overwrite")
    assert code == 0, err
    assert target.read_text() != PRECIOUS and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert not [p for p in target.parent.iterdir() if p.name.endswith(".partial")]


def test_a_link_is_written_through_and_a_folder_or_a_dangling_link_is_refused(places, monkeypatch, capsys):
    tmp = places["tmp"]
    real, link = tmp / "real.csv", tmp / "link.csv"
    real.write_text(PRECIOUS)
    link.symlink_to(real)
    assert cli(monkeypatch, capsys, *_args("export", places, link))[0] == 2 and real.read_text() == PRECIOUS
    code, _, err = cli(monkeypatch, capsys, *_args("export", places, link), "--overwrite")
    assert code == 0 and link.is_symlink() and real.read_text().startswith("id,status,")
    code, _, err = cli(monkeypatch, capsys, *_args("export", places, tmp / "models"))
    assert code == 2 and "is a folder; give a file name." in err
    dangling = tmp / "dangling.csv"
    dangling.symlink_to(tmp / "nowhere" / "x.csv")
    code, _, err = cli(monkeypatch, capsys, *_args("export", places, dangling), "--overwrite")
    assert code == 2 and "the folder" in err and "does not exist" in err and "Traceback" not in err
    code, _, err = cli(monkeypatch, capsys, *_args("export", places, real / "out.csv"))  # it said "does not exist"
    assert code == 2 and err == f"acetui: Cannot write {real / 'out.csv'}: {real} is a file, not a folder.\n"


def test_a_read_only_medium_is_named_by_the_users_path(places, monkeypatch, capsys):
    """On a read-only mount the partial file's removal failed too, and that second refusal was the sentence:
    ``Cannot use ro/.out.csv.11274-71ea1d.partial: Read-only file system.``"""
    import shutil
    import subprocess

    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root to bind-mount a folder read-only")
    source, mounted = places["tmp"] / "source", places["tmp"] / "ro"
    source.mkdir()
    mounted.mkdir()
    (source / "old.csv").write_text(PRECIOUS)
    if subprocess.run(["mount", "-o", "bind", source, mounted], capture_output=True).returncode:
        pytest.skip("cannot bind-mount here")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", mounted], check=True, capture_output=True)
        for name, overwrite in (("out.csv", ()), ("old.csv", ("--overwrite",))):
            code, _, err = cli(monkeypatch, capsys, *_args("export", places, mounted / name), *overwrite)
            assert (code, err) == (2, f"acetui: Cannot use {mounted / name}: Read-only file system.\n")
    finally:
        subprocess.run(["umount", "-l", mounted], check=True)
    assert (source / "old.csv").read_text() == PRECIOUS and sorted(p.name for p in source.iterdir()) == ["old.csv"]


def test_dash_is_stdout_and_a_read_only_folder_is_one_sentence(places, monkeypatch, capsys):
    code, out, err = cli(monkeypatch, capsys, *_args("export", places, Path("-")))
    assert code == 0 and out.startswith("id,status,") and not Path("-").exists()
    folder = places["tmp"] / "locked"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("this user writes anywhere (root)")
        code, _, err = cli(monkeypatch, capsys, *_args("export", places, folder / "t.csv"))
        assert code == 2 and err.startswith("acetui: ") and err.count("\n") == 1 and "t.csv" in err
    finally:
        folder.chmod(0o700)


def test_a_run_of_a_path_that_is_not_utf8_is_exported_to_a_file(tmp_path, monkeypatch, capsys):
    """A run whose calibration file was named in bytes that are not UTF-8 (``calib\\xff.jsonl``) made every
    CSV export of the store to a file a UnicodeEncodeError traceback (stdout wrote it): the name is written
    as the bytes it was."""
    from runhelpers import Clock, insert_run

    from acetui_core.run.config import RunConfig
    from acetui_core.storage.store import Store

    calib = os.fsdecode(b"/data/calib\xff.jsonl")
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    insert_run(store, clock, "a0000001", RunConfig("org/m", "wanda", "0.5", calib=calib), created=1.7e9, ppl=9.0)
    code, _, err = cli(monkeypatch, capsys, "export", "-o", str(tmp_path / "runs.csv"), "--store", str(store.path))
    assert code == 0, err
    assert b"/data/calib\xff.jsonl" in (tmp_path / "runs.csv").read_bytes()


def test_a_file_made_between_the_check_and_the_write_is_kept(tmp_path):
    target = tmp_path / "t.csv"
    target.write_text(PRECIOUS)  # as if another process made it after export checked the name
    with pytest.raises(UserError, match="created by someone else meanwhile"):
        write_text_atomic(target, "new", replace=False)
    assert target.read_text() == PRECIOUS and [p.name for p in tmp_path.iterdir()] == ["t.csv"]


def test_the_apps_exports_never_replace_a_file_nor_go_where_the_runs_keep_theirs(places):
    store = Store(places["store"])
    folder = places["tmp"] / "exports"
    folder.mkdir()
    (folder / "acetui-1.csv").write_text(PRECIOUS)
    made = reserve_new_file(folder, "acetui-1", ".csv", store.protected_places())
    assert made.name == "acetui-1-2.csv" and (folder / "acetui-1.csv").read_text() == PRECIOUS
    assert reserve_new_file(places["tmp"], "acetui-1", ".csv", store.protected_places()).parent == places["tmp"]
    for inside in (places["its log"].parent, places["a file of the data folder"].parent):
        with pytest.raises(UserError, match="choose another export folder"):
            reserve_new_file(inside, "acetui-1", ".csv", store.protected_places())


def test_a_device_or_a_pipe_is_never_replaced(places, monkeypatch, capsys):
    fifo = places["tmp"] / "pipe.csv"
    os.mkfifo(fifo)
    for target in (Path("/dev/null"), fifo):
        code, _, err = cli(monkeypatch, capsys, *_args("export", places, target), "--overwrite")
        assert code == 2 and "is not a regular file" in err, err
    assert Path("/dev/null").is_char_device() and stat.S_ISFIFO(fifo.stat().st_mode)
