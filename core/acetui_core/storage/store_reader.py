"""Reading the run store: where it is, which files it keeps beside it, and the runs it holds (resolve an id,
one run, a list, their evidence, the layers recorded since a poll). What is written to it, and how, is
``acetui_core.storage.store`` (``Store`` is a ``StoreReader`` that also records runs); the SQLite file itself is
``acetui_core.storage.store_db`` and rows as records ``acetui_core.storage.store_rows``.

Readers also mark the runs of dead local processes ``interrupted`` (``reap``, through
``acetui_core.storage.liveness``), so no run shows ``running`` forever after a SIGKILL or a reboot.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from acetui_core.basics.choices import RunStatus
from acetui_core.basics.errors import UserError
from acetui_core.basics.paths import BUILT_IN_SOURCES, data_dir, mixture, user_path
from acetui_core.run.records import LayerRecord
from acetui_core.storage import liveness, store_files
from acetui_core.storage.store_db import open_database, store_path, transaction
from acetui_core.storage.store_rows import (
    SELECT_RUNS,
    RunEvidence,
    RunRecord,
    attach_layers,
    evidence_from_rows,
    model_names,
    read_layers,
    record_from_row,
)
from acetui_core.storage.store_schema import ACTIVE, sql_list


def _local_paths(text: str | None, key: str, folder: str | None) -> list[Path]:
    """The existing local files or folders that the JSON object ``text`` names under ``key`` (a model, a
    calibration file or each file of a mixture, a plug-in metric's file, a saved checkpoint): a relative
    path read from the run's working ``folder`` and, for runs recorded before their folder was, from here.
    None for a hub id, ``c4``, a built-in method, a damaged row."""
    try:
        value = json.loads(text).get(key) if text else None
    except (ValueError, AttributeError):
        return []
    return _existing(value, key, folder)


def _existing(value: object, key: str, folder: str | None) -> list[Path]:
    """``_local_paths`` of a setting's value already read from its row."""
    if not isinstance(value, str) or not value.strip():
        return []
    found = []
    for name in _file_names(key, value.strip()):
        path = Path(name).expanduser()
        candidate = path if path.is_absolute() or not folder else Path(folder) / path
        found += [candidate] if candidate.exists() else []
    return found


def _file_names(key: str, value: str) -> list[str]:
    """The file names a setting's value may hold: each source of a calibration mixture
    (``c4@3+/data/dom.jsonl@1``), a plug-in's file (``mine.py:score``), else the value itself."""
    if key == "method":
        return [value.rpartition(":")[0]] if ":" in value else []
    if key != "calib":
        return [value]
    try:  # the whole too: a file whose name holds "+" reads as a mixture from another folder
        names = list(dict.fromkeys([value, *(name for name, _ in mixture(value))]))
    except UserError:  # a damaged row's mixture: its whole text is all there is to protect
        names = [value]
    return [name for name in names if name not in BUILT_IN_SOURCES]


def _run_folder(env: str | None) -> str | None:
    """The working folder a run was recorded from (``Store.create_run``), if its row says."""
    try:
        folder = json.loads(env).get("folder") if env else None
    except (ValueError, AttributeError):
        return None
    return folder if isinstance(folder, str) else None


def saved_checkpoint(run: RunRecord) -> Path | None:
    """The checkpoint ``run`` saved (``--save``), if it is there: the folder ``protected_places`` keeps
    from every write (``runs rm`` says it kept it)."""
    if run.settings_unknown:
        return None
    folder = run.env.get("folder") if isinstance(run.env, dict) else None
    found = _existing(run.config.save, "save", folder if isinstance(folder, str) else None)
    return found[0] if found else None


class StoreReader:
    """The run store at ``path``, read (``acetui_core.storage.store.Store`` also writes it).

    Opening validates the file and creates or migrates the schema; a bad path or foreign file raises
    ``UserError``, and so does a store that does not exist when ``create`` is False (commands that read).
    Instances hold no open connection, so one may be shared by threads, and any number of processes may
    open the same file. ``clock`` gives "now" (tests pass a fixed one).
    """

    def __init__(self, path: str | os.PathLike | None = None, *, clock=time.time, create: bool = True):
        self.path = store_path(path)
        self.clock = clock
        open_database(self.path, create)

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    @property
    def folder(self) -> Path:
        """The folder of the store, where runs keep their files (logs, job folders)."""
        return self.path.parent

    def log_path(self, run_id: str) -> Path:
        """The run's own log file: its events, warnings, and its traceback when it fails."""
        return store_files.log_path(self.folder, run_id)

    def masks_path(self, run_id: str) -> Path:
        """Where a run keeps its masks (``--keep-masks``, ``acetui_core.scores.maskfile``)."""
        return store_files.masks_path(self.folder, run_id)

    def masks_kept(self, run: RunRecord) -> Path | None:
        """The file of the masks ``run`` kept (``--keep-masks``) in this store, moved or copied since or not;
        None when it kept none."""
        recorded = run.results.masks if run.results else None
        return store_files.in_store(self.folder, recorded) if recorded else None

    def places(self) -> tuple[tuple[Path, str], ...]:
        """The store and the folders it keeps runs' files in, as ``(path, what it is)``: no checkpoint
        may be saved over or into them."""
        return store_files.places(self.path)

    def protected_places(self) -> list[tuple[Path, str]]:
        """What no file acetui writes may replace or enter, even with ``--overwrite`` (``acetui_core.basics.outputs``):
        the store with its SQLite companions, study lock and folders, the data folder, and the local models,
        calibration files and plug-in files its runs read and the checkpoints they saved (a relative path as
        seen from the folder the run was recorded from)."""
        places = list(self.places())
        root = data_dir()
        if root is not None:
            places.append((root, "the data folder (ACETUI_DATA_DIR)"))
        with self._db() as db:
            rows = db.execute("SELECT id, status, config, results, env FROM runs").fetchall()
        for row in rows:
            folder = _run_folder(row["env"])
            for column, key, what in (
                ("config", "model", "the model of run"),
                ("config", "calib", "the calibration file of run"),
                ("config", "method", "the plug-in metric of run"),
                ("results", "saved_to", "the checkpoint saved by run"),
            ):
                places += [(path, f"{what} {row['id']}") for path in _local_paths(row[column], key, folder)]
            if row["status"] not in ACTIVE:  # stopped after saving, its results (none) do not name the checkpoint
                places += [
                    (path, f"the --save folder of run {row['id']}")
                    for path in _local_paths(row["config"], "save", folder)
                ]
        return places

    def check_log_folder(self) -> None:
        """Make sure runs can write their logs beside the store, before any run is recorded."""
        store_files.check_log_folder(self.folder)

    def _db(self, write: bool = False, snapshot: bool = True):
        """A short connection inside one transaction (``acetui_core.storage.store_db.transaction``)."""
        return transaction(self.path, write, snapshot)

    def resolve(self, run_id: str) -> str:
        """The full id for ``run_id`` or a unique prefix of one; ``UserError`` otherwise."""
        text = str(run_id).strip()
        if re.fullmatch(r"[0-9A-Za-z_-]+", text):
            with self._db() as db:
                matches = [
                    row[0]
                    for row in db.execute(
                        "SELECT id FROM runs WHERE substr(id, 1, ?) = ? ORDER BY id", (len(text), text)
                    )
                ]
            if text in matches:
                return text
            if len(matches) == 1:
                return matches[0]
            if matches:
                raise UserError(
                    f"Run id '{run_id}' is ambiguous: it starts {len(matches)} runs ({', '.join(matches[:4])}"
                    f"{', …' if len(matches) > 4 else ''})."
                )
        raise UserError(f"There is no run '{run_id}' in {self.path} (acetui runs lists them).")

    def get_run(self, run_id: str, *, layers: bool = True) -> RunRecord:
        """The run with this id (or unique id prefix), with its layers unless ``layers=False``."""
        full = self.resolve(run_id)
        dead = self.reap()
        with self._db() as db:
            row = db.execute(f"{SELECT_RUNS} WHERE id = ?", (full,)).fetchone()
            if row is None:  # removed since it was resolved (runs rm in another terminal, as the app reads it)
                raise UserError(f"There is no run '{run_id}' in {self.path} (acetui runs lists them).")
            [record] = liveness.shown_ended([record_from_row(row)], dead)
            if layers:
                attach_layers(db, [record])
        return record

    def list_runs(
        self,
        *,
        ids: list[str] | None = None,
        model: str | None = None,
        status: str | None = None,
        last: int | None = None,
        layers: bool = False,
        active_on: str | None = None,
    ) -> list[RunRecord]:
        """Runs oldest first, optionally only these ids (prefixes allowed, in the given order), one
        model (matched exactly or by its last path component), one status, the ``last`` N, or only the
        queued and running runs of one executor (``active_on="slurm"``)."""
        dead = self.reap()
        where, params = [], []
        if ids is not None:
            full = [self.resolve(i) for i in ids]
            where.append(f"id IN ({','.join('?' * len(full))})")
            params += full
        if status is not None and status != RunStatus.INTERRUPTED:  # a read-only store's dead runs read active
            where.append("status = ?")
            params.append(status)
        if active_on is not None:
            where.append(f"executor = ? AND status IN {sql_list(ACTIVE)}")
            params.append(active_on)
        sql = SELECT_RUNS + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY created, id"
        with self._db() as db:
            records = liveness.shown_ended([record_from_row(row) for row in db.execute(sql, params)], dead)
            if status is not None:
                records = [r for r in records if r.status == status]
            if model is not None:  # as typed, or its path from here: `./models/m` finds the runs of `models/m`
                here = os.path.normpath(Path.cwd() / user_path(model))  # an absolute path stays itself
                records = [
                    r
                    for r in records
                    if model in model_names(r.config.model) | model_names(r.model_key) or here == r.model_key
                ]
            if last is not None:
                records = records[-last:] if last > 0 else []
            if ids is not None:
                order = {run_id: i for i, run_id in enumerate(full)}
                records.sort(key=lambda r: order[r.id])
            if layers and records:
                attach_layers(db, records)
        return records

    def evidence(self, run_ids: list[str]) -> dict[str, RunEvidence]:
        """What each run kept for tests of a difference (full run ids); an empty ``RunEvidence`` for a run
        recorded before acetui kept it, or whose record is damaged."""
        if not run_ids:
            return {}
        marks = ",".join("?" * len(run_ids))
        with self._db() as db:
            rows = db.execute(
                f"SELECT run_id, evaluation, record FROM evidence WHERE run_id IN ({marks}) ORDER BY run_id, evaluation",
                run_ids,
            ).fetchall()
        return evidence_from_rows(run_ids, rows)

    def layers_since(self, run_id: str, after: int = -1) -> list[LayerRecord]:
        """The run's recorded layers with index above ``after``: for live views that poll."""
        full = self.resolve(run_id)
        with self._db() as db:
            return [layer for layer in read_layers(db, [full])[full] if layer.index > after]

    def reap(self) -> dict[str, liveness.Ending]:
        """Mark active local runs whose process is gone as ``interrupted``; return how each ended.

        Readers call this, so no run shows ``running`` forever after a SIGKILL or a reboot. A Slurm run's
        end is imported from its job folder instead (``acetui_core.execution.slurm.sync``).
        """
        return liveness.reap(self._db, self.clock())
