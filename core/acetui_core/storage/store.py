"""The run store: one SQLite file (WAL mode) that records every run as it goes.

Every face reads and writes runs through :class:`Store`; a run is a process and the app is a window
onto the store. Several processes may write (one per run) and any number may read at the same time:
each operation opens its own short connection, and writes are single ``BEGIN IMMEDIATE`` transactions,
so a reader sees a layer or a result either whole or not at all. What is stored are the typed records
of ``acetui_core.run.records`` as JSON; what is read back are those records again.

This module owns what is written (record, claim, beat, record events, cancel, delete); reading runs
(resolve, get, list, evidence) is ``acetui_core.storage.store_reader``, which ``Store`` extends. The SQLite
file itself (opening, schema, transactions) is ``acetui_core.storage.store_db``; rows as records and back,
``acetui_core.storage.store_rows``; the files beside it (logs, masks, job folders), ``acetui_core.storage.store_files``;
whether a run's process is alive, ``acetui_core.storage.liveness``.

Where it lives: ``Store(path)``; else ``$ACETUI_HOME/runs.db``; else ``runs.db`` in the user's data
directory (platformdirs). The schema is versioned (``acetui_core.storage.store_schema``); an older acetui store
is migrated on open, and a file that is not an acetui store, is corrupt, or comes from a newer acetui is
refused with one sentence, never written. One damaged row never hides the others: it is read as a run
marked ``damaged``; one whose settings are what is damaged lists, but no table places its numbers
(``acetui_core.analysis.comparison.placeable``).

A run's life::

    queued -> running -> finished | failed | cancelled
                      \\-> interrupted   (its process died: SIGKILL, OOM killer, reboot)

``interrupted`` is decided by readers (``acetui_core.storage.liveness``) for local runs; a Slurm run's fate is
imported from its job folder (``acetui_core.execution.slurm``).
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import asdict, replace
from pathlib import Path

from acetui_core.basics.choices import ExecutorKind, RunStatus
from acetui_core.basics.errors import UserError
from acetui_core.run.config import RunConfig
from acetui_core.run.events import Event, LayerPruned, LayerStarted, RunFinished, RunStarted, Stage
from acetui_core.run.records import to_dict
from acetui_core.storage import liveness, store_db, store_files
from acetui_core.storage.store_reader import StoreReader
from acetui_core.storage.store_rows import RunRecord, dumps, evidence_rows, write_layer
from acetui_core.storage.store_schema import ACTIVE, STATUSES, TERMINAL, sql_list

MIN_CHANGE_PREFIX = 4  # the shortest id prefix that removes or cancels a run (reading takes any unique one)


def working_folder() -> str | None:
    """This process's working folder (None when it has been deleted under it)."""
    try:
        return os.getcwd()
    except OSError:
        return None


class Store(StoreReader):
    """The run store at ``path`` (see the module docstring for where it lives by default), read
    (``StoreReader``) and written: what is done with runs, each write one transaction.
    """

    def create_run(
        self,
        config: RunConfig,
        *,
        env: dict | None = None,
        run_id: str | None = None,
        owner_pid: int | None = None,
        executor: ExecutorKind = ExecutorKind.LOCAL,
        batch: str | None = None,
    ) -> str:
        """Record a new ``queued`` run and return its id (8 hex digits unless ``run_id`` is given).
        ``batch``: the id the runs queued together share (by default the run's own id: a batch of one).

        A local run is owned by ``owner_pid`` (default: this process) until a process claims it: if the
        owner dies first, readers mark the run interrupted.
        """
        pid = owner_pid if owner_pid is not None else os.getpid()
        with self._db(write=True) as db:
            while run_id is None:
                candidate = secrets.token_hex(4)
                if not db.execute("SELECT 1 FROM runs WHERE id = ?", (candidate,)).fetchone():
                    run_id = candidate
            # the folder its relative paths (model, calibration file, --save) are read from, whatever
            # folder a later command runs in (``protected_places``)
            env = {**(env or {}), "log": str(self.log_path(run_id)), "folder": working_folder()}
            db.execute(
                "INSERT INTO runs (id, status, created, heartbeat, host, pid, pid_started, config, env, executor, batch)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    RunStatus.QUEUED,
                    self.clock(),
                    self.clock(),
                    liveness.HOST,
                    pid,
                    liveness.process_start(pid),
                    json.dumps(config.to_dict()),
                    json.dumps(env),
                    executor,
                    batch or run_id,
                ),
            )
        return run_id

    def set_owner(self, run_id: str, pid: int) -> None:
        """Hand a queued run to process ``pid`` on this host (a worker child), so liveness checks follow it."""
        with self._db(write=True) as db:
            db.execute(
                "UPDATE runs SET pid = ?, pid_started = ?, host = ?, heartbeat = ? WHERE id = ?",
                (pid, liveness.process_start(pid), liveness.HOST, self.clock(), run_id),
            )

    def set_job(self, run_id: str, job: dict) -> None:
        """Record (or update) the Slurm job that executes a run."""
        with self._db(write=True) as db:
            db.execute("UPDATE runs SET job = ? WHERE id = ?", (json.dumps(job), run_id))

    def claim(
        self,
        run_id: str,
        env: dict | None = None,
        *,
        pid: int | None = None,
        host: str | None = None,
        when: float | None = None,
    ) -> None:
        """A process starts executing the run: status ``running``, ``started`` now, its pid and host, and
        the facts of where it executes merged into the run's environment (once)."""
        now = when if when is not None else self.clock()
        pid = pid if pid is not None else os.getpid()
        host = host or liveness.HOST
        with self._db(write=True) as db:
            row = db.execute("SELECT status, env FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None or row["status"] != RunStatus.QUEUED:
                raise UserError(f"Run {run_id} cannot start: it is {row['status'] if row else 'not in the store'}.")
            started = liveness.process_start(pid) if host == liveness.HOST else None
            db.execute(
                "UPDATE runs SET status = ?, started = ?, heartbeat = ?, host = ?, pid = ?,"
                " pid_started = ?, env = ? WHERE id = ?",
                (
                    RunStatus.RUNNING,
                    now,
                    now,
                    host,
                    pid,
                    started,
                    json.dumps({**json.loads(row["env"]), **(env or {})}),
                    run_id,
                ),
            )

    def heartbeat(self, run_id: str, resources: dict | None = None, *, when: float | None = None) -> bool:
        """Note that the run's process is alive (with its latest resource sample); return True when a
        cancel was requested."""
        with self._db(write=True) as db:
            # A run wrongly presumed dead (a stale heartbeat from another host) comes back to life.
            db.execute(
                "UPDATE runs SET heartbeat = :when, resources = COALESCE(:resources, resources),"
                " status = CASE status WHEN :interrupted THEN :running ELSE status END,"
                " error = CASE status WHEN :interrupted THEN NULL ELSE error END,"
                " finished = CASE status WHEN :interrupted THEN NULL ELSE finished END WHERE id = :id",
                {
                    "when": when if when is not None else self.clock(),
                    "resources": dumps(resources),
                    "interrupted": RunStatus.INTERRUPTED,
                    "running": RunStatus.RUNNING,
                    "id": run_id,
                },
            )
        return self.cancel_requested(run_id)

    def cancel_requested(self, run_id: str) -> bool:
        """Whether someone asked the run to stop (``request_cancel``)."""
        with self._db() as db:
            row = db.execute("SELECT cancel_requested FROM runs WHERE id = ?", (run_id,)).fetchone()
        return bool(row and row[0])

    def update_env(self, run_id: str, **values) -> None:
        """Merge ``values`` into the run's environment record (e.g. its log file)."""
        with self._db(write=True) as db:
            row = db.execute("SELECT env FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row:
                db.execute(
                    "UPDATE runs SET env = ? WHERE id = ?", (json.dumps({**json.loads(row[0]), **values}), run_id)
                )

    def record_event(self, run_id: str, event: Event) -> None:
        """Persist one pipeline event (``acetui_core.run.events``). Each call is one transaction: a layer is
        written with all its linears or not at all; ``RunFinished`` stores the result and marks the run
        finished together."""
        with self._db(write=True) as db:
            if isinstance(event, RunStarted):
                row = db.execute("SELECT env FROM runs WHERE id = ?", (run_id,)).fetchone()
                env = {**json.loads(row[0]), "device": event.device, "device_name": event.device_name} if row else {}
                db.execute(
                    "UPDATE runs SET num_layers = ?, env = ? WHERE id = ?", (event.num_layers, json.dumps(env), run_id)
                )
            elif isinstance(event, Stage):
                db.execute("UPDATE runs SET stage = ? WHERE id = ?", (json.dumps(asdict(event)), run_id))
            elif isinstance(event, LayerStarted):
                db.execute(
                    "UPDATE runs SET current_layer = ?, num_layers = ? WHERE id = ?", (event.index, event.total, run_id)
                )
            elif isinstance(event, LayerPruned):
                write_layer(db, run_id, event.layer, self.clock())
            elif isinstance(event, RunFinished):
                result = event.result
                finished = db.execute(
                    "UPDATE runs SET results = ?, status = ?, finished = ?, current_layer = NULL,"
                    f" error = NULL WHERE id = ? AND status IN {sql_list((*ACTIVE, RunStatus.INTERRUPTED))}",
                    (
                        json.dumps(to_dict(replace(result, window_losses=None, task_outcomes=None))),
                        RunStatus.FINISHED,
                        self.clock(),
                        run_id,
                    ),
                ).rowcount
                if finished:
                    db.executemany(
                        "INSERT OR REPLACE INTO evidence (run_id, evaluation, record) VALUES (?, ?, ?)",
                        [(run_id, name, text) for name, text in evidence_rows(result)],
                    )

    def set_status(self, run_id: str, status: RunStatus, error: str | None = None) -> bool:
        """Move an active run to ``status`` (with the error text for ``failed``); a run that already
        ended keeps its status. Returns whether the status changed."""
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        finished = self.clock() if status in TERMINAL else None
        with self._db(write=True) as db:
            return bool(
                db.execute(
                    "UPDATE runs SET status = ?, error = ?, finished = ?, current_layer = NULL"
                    f" WHERE id = ? AND status IN {sql_list(ACTIVE)}",
                    (status, error, finished, run_id),
                ).rowcount
            )

    def check_writable(self) -> None:
        """``ReadOnlyStore`` (one sentence) when this user may only read the store: before a command that
        records, cancels or removes anything does any of it (``acetui_core.storage.store_db``)."""
        store_db.check_writable(self.path)

    def check_log_folder(self) -> None:
        """Before any run is recorded: the store can be written, and runs can keep their logs beside it."""
        self.check_writable()
        super().check_log_folder()

    def resolve_to_change(self, run_id: str, doing: str) -> str:
        """The full id a command that removes or stops a run means (``doing``: "remove", "cancel"):
        ``resolve``'s, but a prefix shorter than ``MIN_CHANGE_PREFIX`` characters is refused with one
        sentence naming the run it matches (one mistyped key must not remove a finished result)."""
        self.check_writable()
        full = self.resolve(run_id)
        text = str(run_id).strip()
        if text != full and len(text) < MIN_CHANGE_PREFIX:
            run = self.get_run(full, layers=False)
            raise UserError(
                f"Run id '{text}' is too short a prefix to {doing} a run by: it matches run {full} ({run.brief}); "
                f"give at least {MIN_CHANGE_PREFIX} characters of its id, such as {full[:MIN_CHANGE_PREFIX]}."
            )
        return full

    def request_cancel(self, run_id: str) -> RunStatus:
        """Ask a run to stop. A queued run is cancelled at once; a running one is flagged, its process
        sees the flag within a second (heartbeat) and stops after the current layer. Returns the
        status the run has now; a run that already ended raises ``UserError``, and so does an id prefix
        shorter than ``MIN_CHANGE_PREFIX`` (``resolve_to_change``)."""
        run = self.get_run(self.resolve_to_change(run_id, "cancel"), layers=False)
        if not run.active:
            raise UserError(f"Run {run.id} has already ended ({run.status}); there is nothing to cancel.")
        with self._db(write=True) as db:
            db.execute("UPDATE runs SET cancel_requested = 1 WHERE id = ?", (run.id,))
            db.execute(
                "UPDATE runs SET status = ?, finished = ? WHERE id = ? AND status = ?",
                (RunStatus.CANCELLED, self.clock(), run.id, RunStatus.QUEUED),
            )
            return RunStatus(db.execute("SELECT status FROM runs WHERE id = ?", (run.id,)).fetchone()[0])

    def delete_runs(self, run_ids: list[str]) -> list[tuple[RunRecord, list[Path]]]:
        """Remove runs, their layers and every file they made (log, masks finished or partial, a Slurm
        job's files), and nothing else: a saved checkpoint is the user's. Every id is resolved and checked
        before any is deleted: a prefix shorter than ``MIN_CHANGE_PREFIX`` is refused
        (``resolve_to_change``), and so is a run still queued or running (cancel it first). Returns each
        run removed, once however many of ``run_ids`` name it (a prefix and the full id), with the files
        removed with it."""
        full = [self.resolve_to_change(run_id, "remove") for run_id in run_ids]
        runs = [self.get_run(run_id, layers=False) for run_id in dict.fromkeys(full)]
        for run in runs:
            if run.active:
                raise UserError(f"Run {run.id} is {run.status}; cancel it first (acetui runs cancel {run.id}).")
        files = {run.id: store_files.files_of(self.folder, run) for run in runs}
        with self._db(write=True) as db:
            db.executemany("DELETE FROM runs WHERE id = ?", [(run.id,) for run in runs])
        for run in runs:
            store_files.remove(files[run.id])
        return [(run, files[run.id]) for run in runs]
