"""The run store: recording, concurrency, interrupted runs, bad files, migration. No model needed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from runhelpers import Clock, insert_run, layer_event, result_for

from acetui_core.basics.errors import UserError
from acetui_core.run.config import RunConfig
from acetui_core.run.events import LayerStarted, RunFinished, RunStarted, Stage
from acetui_core.run.records import Histogram, TaskOutcomes, WindowLosses
from acetui_core.storage import store_schema
from acetui_core.storage.liveness import STALE_AFTER
from acetui_core.storage.store import Store
from acetui_core.storage.store_db import migration_backup
from acetui_core.storage.store_rows import RunEvidence
from acetui_core.storage.store_schema import APPLICATION_ID, SCHEMA_VERSION

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


def config(**changes) -> RunConfig:
    return RunConfig(**{"model": "org/tiny-llama", "method": "ace", "sparsity": "0.5", **changes})


def raw(store: Store, sql: str, *params):
    with sqlite3.connect(store.path) as db:
        rows = db.execute(sql, params).fetchall()
    db.close()
    return rows


def test_a_run_is_recorded_layer_by_layer_with_its_statistics(tmp_path):
    store = Store(tmp_path / "runs.db")
    run_id = store.create_run(config(), env={"torch": "2.4.0"})
    assert store.get_run(run_id).status == "queued"
    store.claim(run_id)
    store.record_event(run_id, RunStarted("org/tiny-llama", "ace", "0.5", 3, "cpu"))
    store.record_event(run_id, Stage("calibration", 4, 4))
    store.record_event(run_id, LayerStarted(0, 3))
    assert store.get_run(run_id).current_layer == 0
    store.record_event(run_id, layer_event(0, 3, sparsity=0.25))
    store.record_event(run_id, layer_event(1, 3))

    run = store.get_run(run_id[:4])  # a unique prefix is enough
    assert (run.id, run.status, run.num_layers, run.current_layer) == (run_id, "running", 3, None)
    log, folder = str(store.log_path(run_id)), os.getcwd()  # the folder its relative paths are read from
    assert run.env == {"torch": "2.4.0", "device": "cpu", "device_name": "", "log": log, "folder": folder}
    assert run.stage == Stage("calibration", 4, 4)
    assert [layer.index for layer in run.layers] == [0, 1] and run.layers_done == 2
    assert run.layers[0].sparsity == pytest.approx(0.25)
    linear = run.layers[0].linears[0]
    assert linear.name == "self_attn.q_proj" and linear.d_in == 64
    assert linear.act_stats.x2_var.max == 90.0
    assert linear.histogram == Histogram(
        edges=[0.001, 0.01, 0.1, 1.0, 10.0], counts=[3, 40, 50, 7], threshold=0.1, log=True, stride=1
    )
    assert store.layers_since(run_id, after=0)[0].index == 1

    result = result_for(config(), ppl=21.5, seconds=3.0)
    store.record_event(run_id, RunFinished(result))
    run = store.get_run(run_id)
    assert (run.status, run.ppl, run.prune_seconds) == ("finished", 21.5, 3.0)
    assert run.results == result  # the typed record comes back as it went in
    assert run.finished >= run.started >= run.created
    assert run.to_dict()["label"] == "CosP+VarP-16"


def test_an_ended_run_keeps_its_status(tmp_path):
    store = Store(tmp_path / "runs.db")
    run_id = store.create_run(config())
    store.claim(run_id)
    store.record_event(run_id, RunFinished(result_for(config(), ppl=9.0, seconds=1.0)))
    assert not store.set_status(run_id, "failed", error="late")
    assert store.get_run(run_id).status == "finished"
    with pytest.raises(UserError, match="already ended"):
        store.request_cancel(run_id)
    with pytest.raises(UserError, match="cannot start"):
        store.claim(run_id)


def test_list_runs_filters_and_orders(tmp_path):
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    insert_run(store, clock, "aaaa0001", config(method="wanda"), created=100.0, ppl=10.0)
    insert_run(store, clock, "aaaa0002", config(model="/models/opt-125m"), created=200.0, ppl=12.0)
    insert_run(store, clock, "bbbb0003", config(), created=300.0, status="failed", error="boom")
    assert [r.id for r in store.list_runs()] == ["aaaa0001", "aaaa0002", "bbbb0003"]
    assert [r.id for r in store.list_runs(model="opt-125m")] == ["aaaa0002"]
    assert [r.id for r in store.list_runs(status="failed")] == ["bbbb0003"]
    assert [r.id for r in store.list_runs(last=2)] == ["aaaa0002", "bbbb0003"]
    assert [r.id for r in store.list_runs(ids=["bbbb", "aaaa0001"])] == ["bbbb0003", "aaaa0001"]
    assert store.list_runs()[0].layers == [] and store.list_runs(layers=True)[0].layers_done == 2
    with pytest.raises(UserError, match=r"ambiguous: it starts 2 runs \(aaaa0001, aaaa0002\)\.$"):
        store.get_run("aaaa")
    with pytest.raises(UserError, match="no run 'ffff'"):
        store.get_run("ffff")


def test_cancel_and_delete(tmp_path):
    store = Store(tmp_path / "runs.db")
    queued = store.create_run(config())
    assert store.request_cancel(queued) == "cancelled"  # never started: cancelled at once
    running = store.create_run(config())
    store.claim(running)
    assert store.heartbeat(running) is False
    assert store.request_cancel(running) == "running"
    assert store.heartbeat(running) is True  # the run's process learns it on its next beat
    with pytest.raises(UserError, match="cancel it first"):
        store.delete_runs([running])
    store.record_event(running, layer_event(0, 2))
    store.set_status(running, "cancelled")
    store.delete_runs([running])
    assert [r.id for r in store.list_runs()] == [queued]
    assert raw(store, "SELECT COUNT(*) FROM linears") == [(0,)]


WRITER = """
import sys
from acetui_core.run.config import RunConfig
from acetui_core.storage.store import Store
from acetui_core.run.events import RunFinished
from runhelpers import layer_event, result_for
store, layers = Store(sys.argv[1]), int(sys.argv[2])
config = RunConfig(model="m", method="wanda", sparsity="0.5")
run_id = store.create_run(config)
store.claim(run_id)
for index in range(layers):
    store.record_event(run_id, layer_event(index, layers))
    store.heartbeat(run_id)
store.record_event(run_id, RunFinished(result_for(config, ppl=5.0, seconds=1.0)))
"""


def test_two_writers_and_a_reader_share_one_store(tmp_path):
    path, layers = tmp_path / "runs.db", 150
    Store(path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])}
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(layers)], env=env) for _ in range(2)]
    reader, reads, mid = Store(path), 0, 0
    while any(w.poll() is None for w in writers) or reads < 3:
        for run in reader.list_runs(layers=True):
            # A reader never sees half a layer, nor a gap, nor a finished run without its results.
            assert [layer.index for layer in run.layers] == list(range(len(run.layers)))
            assert all(len(layer.linears) == 7 for layer in run.layers)
            assert run.status != "finished" or (run.ppl == 5.0 and len(run.layers) == layers)
            mid += 0 < len(run.layers) < layers
        reads += 1
    assert [w.wait() for w in writers] == [0, 0]
    assert mid > 0  # the reader really read while both were writing
    runs = reader.list_runs()
    assert [(r.status, r.layers_done) for r in runs] == [("finished", layers)] * 2
    assert raw(reader, "PRAGMA journal_mode") == [("wal",)]


def test_a_killed_process_leaves_an_interrupted_run_with_its_layers(tmp_path):
    store = Store(tmp_path / "runs.db")
    run_id = store.create_run(config())
    store.claim(run_id)
    store.record_event(run_id, layer_event(0, 4))
    store.record_event(run_id, layer_event(1, 4))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    store.set_owner(run_id, child.pid)  # as if the child were executing it
    assert store.get_run(run_id).status == "running"
    child.send_signal(signal.SIGKILL)
    time.sleep(0.2)  # not yet reaped by its parent: a zombie, which must count as dead
    run = store.get_run(run_id)
    assert (run.status, run.layers_done) == ("interrupted", 2)
    assert "stopped without finishing" in run.error
    child.wait()


def test_a_run_queued_by_a_killed_process_is_interrupted_and_says_it_never_started(tmp_path):
    store = Store(tmp_path / "runs.db")
    run_id = store.create_run(config())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    store.set_owner(run_id, child.pid)  # as a `compare` or `study run` owns the runs it queued
    assert store.get_run(run_id).status == "queued"
    child.send_signal(signal.SIGKILL)
    child.wait()
    run = store.get_run(run_id)
    assert (run.status, run.layers_done) == ("interrupted", 0)
    assert run.error.startswith("Queued and never started")


def test_a_reused_pid_is_not_mistaken_for_the_run(tmp_path):
    store = Store(tmp_path / "runs.db")
    run_id = store.create_run(config())
    store.claim(run_id)  # this process, alive
    assert store.get_run(run_id).status == "running"
    raw(store, "UPDATE runs SET pid_started = pid_started - 3600 WHERE id = ?", run_id)  # e.g. after a reboot
    assert store.get_run(run_id).status == "interrupted"


def test_a_run_on_another_host_is_judged_by_its_heartbeat(tmp_path):
    clock = Clock(1000.0)
    store = Store(tmp_path / "runs.db", clock=clock)
    run_id = store.create_run(config())
    store.claim(run_id)
    raw(store, "UPDATE runs SET host = 'elsewhere' WHERE id = ?", run_id)
    clock.now += STALE_AFTER - 1
    assert store.get_run(run_id).status == "running"
    clock.now += 2
    assert store.get_run(run_id).status == "interrupted"
    store.heartbeat(run_id)  # it was only slow: a beat brings it back
    assert store.get_run(run_id).status == "running"


def test_default_location_follows_acetui_home(tmp_path, monkeypatch):
    monkeypatch.setenv("ACETUI_HOME", str(tmp_path / "home"))
    assert Store().path == tmp_path / "home" / "runs.db"
    assert (tmp_path / "home" / "runs.db").is_file()


def test_unusable_paths_get_one_sentence(tmp_path):
    with pytest.raises(UserError, match="is a folder"):
        Store(tmp_path)
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    with pytest.raises(UserError, match="Cannot create the folder"):
        Store(blocker / "runs.db")


def test_foreign_and_corrupt_files_are_refused_and_left_untouched(tmp_path):
    text = tmp_path / "notes.db"
    text.write_text("just some text, not a database\n" * 200)
    foreign = tmp_path / "other.db"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE things (x)")
        db.execute("INSERT INTO things VALUES (1)")
    db.close()
    corrupt = tmp_path / "corrupt.db"
    Store(corrupt)
    data = bytearray(corrupt.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # wreck the schema page behind a valid header
    corrupt.write_bytes(bytes(data))
    for path, message in (
        (text, "not an acetui run store"),
        (foreign, "not an acetui run store"),
        (corrupt, "could not be used|not an acetui run store"),
    ):
        before = path.read_bytes()
        with pytest.raises(UserError, match=message):
            Store(path)
        assert path.read_bytes() == before


def test_a_store_from_a_newer_acetui_is_refused(tmp_path):
    path = tmp_path / "runs.db"
    Store(path)
    raw(Store(path), f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(UserError, match="newer acetui"):
        Store(path)


def test_a_version_5_store_keeps_every_run_and_groups_each_process_stretch_in_a_batch(tmp_path):
    path = tmp_path / "runs.db"
    db = sqlite3.connect(path, isolation_level=None)
    store_schema.create(db)
    for version in range(1, 5):
        store_schema.MIGRATIONS[version](db)
    stored = json.dumps(config().to_dict())
    owners = [("a", 1), ("b", 7), ("c", 7), ("d", 7), ("e", 2), ("f", 7), ("g", None)]  # f: pid 7 reused later
    for created, (run_id, pid) in enumerate(owners):
        db.execute(
            "INSERT INTO runs (id, status, created, host, pid, config) VALUES (?, 'finished', ?, 'box', ?, ?)",
            (run_id, created, pid, stored),
        )
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("PRAGMA user_version = 5")
    db.close()
    store = Store(path)
    assert raw(store, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    runs = store.list_runs()
    assert [run.id for run in runs] == list("abcdefg")
    assert [run.batch for run in runs] == ["a", "b", "b", "b", "e", "f", "g"]


def test_a_version_0_store_is_migrated(tmp_path):
    path = tmp_path / "runs.db"
    with sqlite3.connect(path) as db:
        db.executescript((TESTS / "store_v0.sql").read_text())
    db.close()
    store = Store(path)
    assert raw(store, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert raw(store, "PRAGMA application_id") == [(APPLICATION_ID,)]
    old = store.get_run("0ld0run1")
    assert (old.status, old.ppl, old.config.method, old.config.model) == (
        "finished",
        38.96,
        "wanda",
        "facebook/opt-125m",
    )
    assert old.damaged is None and old.results.label == "Wanda-16" and old.results.overall_sparsity is None
    assert [layer.index for layer in old.layers] == [0, 1]
    q_proj = old.layers[0].linears[0]
    assert (q_proj.name, q_proj.d_out, q_proj.histogram.threshold) == ("self_attn.q_proj", 768, 1.0)
    assert q_proj.act_stats.x2_mean.max == 3.0 and q_proj.act_stats.x2_var is None
    assert old.layers[0].linears[1].histogram is None and old.layers[0].linears[1].act_stats is None
    failed = store.get_run("0ld0run2")
    assert (failed.status, failed.error, failed.config.seqlen, failed.label) == (
        "failed",
        "CUDA out of memory.",
        "full",
        "CosP+VarP-FL",
    )
    store.create_run(config())  # and it takes new runs
    assert len(Store(path).list_runs()) == 3
    # the store as it was is kept beside it, once: the old acetui can read it, and nothing is lost if the
    # update goes wrong; an export may not replace it
    with contextlib.closing(sqlite3.connect(migration_backup(path, 0))) as copy:
        assert copy.execute("PRAGMA user_version").fetchall() == [(0,)]
        assert copy.execute("SELECT id FROM runs ORDER BY id").fetchall() == [("0ld0run1",), ("0ld0run2",)]
    assert sorted(p.name for p in tmp_path.glob("runs.db.*")) == ["runs.db.schema0.bak"]
    assert (migration_backup(path, 0), "the run store's copy from before its update") in store.protected_places()
    # runs from before acetui kept per-window losses keep their numbers and have nothing to test
    assert store.evidence([old.id, failed.id]) == {old.id: RunEvidence(), failed.id: RunEvidence()}


def test_a_runs_window_losses_and_document_outcomes_are_kept_apart_from_its_result(tmp_path):
    store = Store(tmp_path / "runs.db")
    losses = WindowLosses("wikitext2", "test", 16, 3, [40.5, 38.25, 41.0], [16, 16, 16])
    outcomes = TaskOutcomes("boolq", "0.4.9", 4, [0, 1, 2, 3], [1, 0, 0, 1], None)
    run_id = store.create_run(config())
    store.claim(run_id)
    result = result_for(config(), ppl=12.0, seconds=1.0)
    store.record_event(run_id, RunFinished(replace(result, window_losses=losses, task_outcomes={"boolq": outcomes})))
    assert store.get_run(run_id).results == result  # listing runs does not read the windows
    assert "38.25" not in raw(store, "SELECT results FROM runs")[0][0]
    assert store.evidence([run_id]) == {run_id: RunEvidence(losses, {"boolq": outcomes})}
    store.delete_runs([run_id])
    assert raw(store, "SELECT COUNT(*) FROM evidence") == [(0,)]


@pytest.mark.parametrize(
    "typo, path",
    [
        ({"ppl_wikitex2": 7.1}, "RunResult.ppl_wikitex2"),
        (
            {"calibration": {"source": "c4", "nsamples": 8, "seqlen": 16, "seed": 0, "sede": 1}},
            "RunResult.calibration.sede",
        ),
    ],
)
def test_a_hand_written_result_with_a_misspelt_field_is_refused(typo, path):
    """The tests' result builder: ``from_dict`` ignores unknown keys, so a typo in a test would pass unseen."""
    with pytest.raises(TypeError, match=rf"^no such field: {path}$".replace(".", r"\.")):
        result_for(RunConfig(model="m", method="wanda", sparsity="0.5"), ppl=7.0, seconds=1.0, **typo)


def test_a_run_removed_between_its_lookup_and_its_read_is_one_sentence(tmp_path, monkeypatch):
    """The app follows a run by reading it every few tenths of a second; a ``runs rm`` in another terminal that
    landed between the id's lookup and the read of its row raised a TypeError in the app's worker (a
    traceback over the screen; seen once in CI) instead of the sentence its watcher handles."""
    from acetui_core.storage.store_reader import StoreReader

    store = Store(tmp_path / "runs.db")
    run_id = insert_run(store, Clock(), "del00001", RunConfig(model="m", method="wanda"), created=1.7e9, ppl=80.0)
    resolve = StoreReader.resolve

    def removed_just_after(self, text):  # the window, held open: resolved, then removed before the read
        found = resolve(self, text)
        monkeypatch.setattr(StoreReader, "resolve", resolve)  # once: the removal resolves the id too
        store.delete_runs([found])
        return found

    monkeypatch.setattr(StoreReader, "resolve", removed_just_after)
    with pytest.raises(UserError, match=r"^There is no run 'del00001' in .*runs\.db \(acetui runs lists them\)\.$"):
        store.get_run(run_id)


@pytest.mark.parametrize(("free_mib", "said"), [(3, True), (4096, False)])
def test_a_write_that_fails_on_a_full_disk_says_the_disk_is_full(tmp_path, monkeypatch, free_mib, said):
    """SQLite says "disk I/O error" when the disk under the store fills mid-run: that was the whole sentence."""
    import shutil

    from acetui_core.storage import store_db

    store = Store(tmp_path / "runs.db")
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(store_db.shutil, "disk_usage", lambda _: usage._replace(free=free_mib << 20))
    with pytest.raises(UserError) as refused, store_db.transaction(store.path, write=True):
        raise sqlite3.OperationalError("disk I/O error")
    full = f"could not be used: disk I/O error (the disk that holds it has {free_mib} MiB free; make room there"
    assert (full in str(refused.value)) == said, refused.value
    assert Store(store.path).list_runs() == []  # the store itself is whole
