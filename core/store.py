"""The run store: one SQLite file (WAL mode) that records every run as it goes.

Every face reads and writes runs through :class:`Store`; a run is a process and the app is a window
onto the store. Several processes may write (one per run) and any number may read at the same time:
each operation opens its own short connection, and writes are single ``BEGIN IMMEDIATE`` transactions,
so a reader sees a layer or a result either whole or not at all.

Where it lives: ``Store(path)``; else ``$ACETUI_HOME/runs.db``; else ``runs.db`` in the user's data
directory (platformdirs). The schema is versioned (``PRAGMA user_version``) and tagged
(``PRAGMA application_id``); an older acetui store is migrated on open, and a file that is not an
acetui store, is corrupt, or comes from a newer acetui is refused with one sentence, never written.

A run's life::

    queued -> running -> finished | failed | cancelled
                      \\-> interrupted   (its process died: SIGKILL, OOM killer, reboot)

``interrupted`` is decided by readers: a queued or running run whose process is gone (same host: the
pid is dead, a zombie, or a different process with a reused pid) or, for a run on another host, whose
heartbeat is older than ``STALE_AFTER`` seconds, is marked interrupted when the store is read. The
layers it finished stay recorded.

Usage by a face (the app, the CLI)::

    store = Store()
    for run in store.list_runs():              # RunRecord, without .layers (cheap)
        print(run.id, run.status, run.label, run.ppl)
    run = store.get_run("3fa9")                # a unique id prefix is enough; has .layers
    store.request_cancel(run.id)               # the run stops after its current layer
    new = store.layers_since(run.id, after=3)  # incremental polling for live views

Recording (what ``acetui_core.runner`` does)::

    run_id = store.create_run(config, env=...)   # queued, owned by this process
    store.claim(run_id)                          # running, started now, pid/host of this process
    store.record_event(run_id, event)            # each pipeline event; LayerPruned is one transaction
    store.heartbeat(run_id)                      # every second or so; returns True when cancel asked
    store.cancel_requested(run_id)               # a cheap read, for polling more often than that
    store.finish(run_id, result)  or  store.set_status(run_id, "failed", error="...")
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from acetui_core.config import RunConfig
from acetui_core.errors import UserError
from acetui_core.events import LayerPruned, LayerStarted, RunFinished, RunStarted, Stage
from acetui_core.paths import home

SCHEMA_VERSION = 1
APPLICATION_ID = 0x41434554  # "ACET": marks the file as an acetui store
STORE_FILENAME = "runs.db"

STATUSES = ("queued", "running", "finished", "failed", "cancelled", "interrupted")
ACTIVE = ("queued", "running")
TERMINAL = ("finished", "failed", "cancelled", "interrupted")

STALE_AFTER = 60.0  # seconds without a heartbeat before a run on another host counts as interrupted
BUSY_TIMEOUT = 30.0  # seconds a write waits for another writer's transaction
PID_START_TOLERANCE = 1.0  # seconds: psutil's create_time is rounded differently across calls

INTERRUPTED_ERROR = "The process running it stopped without finishing (killed, or its machine restarted)."

_HOST = socket.gethostname()

_SCHEMA = """
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'finished', 'failed', 'cancelled', 'interrupted')),
    created REAL NOT NULL,
    started REAL,
    finished REAL,
    heartbeat REAL,
    host TEXT,
    pid INTEGER,
    pid_started REAL,       -- the process's start time: tells our process from a later one with the same pid
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    config TEXT NOT NULL,   -- RunConfig.to_dict() as JSON
    env TEXT NOT NULL DEFAULT '{}',
    error TEXT,
    num_layers INTEGER,
    current_layer INTEGER,  -- the layer being pruned now (NULL between layers and after the loop)
    stage TEXT,             -- the last Stage event as JSON: progress outside the layer loop
    results TEXT            -- the pipeline's result object as JSON
);
CREATE INDEX runs_created ON runs (created);
CREATE TABLE layers (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    layer INTEGER NOT NULL,
    total INTEGER,
    seconds REAL NOT NULL,
    recorded REAL NOT NULL,
    PRIMARY KEY (run_id, layer)
);
CREATE TABLE linears (
    run_id TEXT NOT NULL,
    layer INTEGER NOT NULL,
    position INTEGER NOT NULL,
    name TEXT NOT NULL,
    d_out INTEGER,
    d_in INTEGER,
    sparsity REAL,
    seconds REAL,
    act_stats TEXT,         -- JSON: {"x2_mean": {"min", "median", "max"}, "x2_var": {...}}
    histogram TEXT,         -- JSON: {"edges", "counts", "threshold", "log"} or NULL
    PRIMARY KEY (run_id, layer, position),
    FOREIGN KEY (run_id, layer) REFERENCES layers (run_id, layer) ON DELETE CASCADE
);
"""


def default_store_path() -> Path:
    """``$ACETUI_HOME/runs.db`` when ``ACETUI_HOME`` is set, else ``runs.db`` in the user's data directory."""
    root = home()
    if root:
        return root / STORE_FILENAME
    import platformdirs

    return Path(platformdirs.user_data_dir("acetui", appauthor=False)) / STORE_FILENAME


@dataclass
class RunRecord:
    """One run as the store holds it. Times are POSIX seconds (``None`` until they happen).

    ``layers`` is filled by :meth:`Store.get_run` (and ``list_runs(layers=True)``): one dict per
    finished decoder layer, ``{"layer", "total", "seconds", "recorded", "sparsity", "linears": [
    {"name", "d_out", "d_in", "sparsity", "seconds", "act_stats", "histogram"}]}`` where
    ``histogram`` is ``{"edges", "counts", "threshold", "log"}`` or ``None``. ``layers_done`` counts
    them even when ``layers`` was not loaded. ``results`` is the pipeline's result object (the JSON
    ``acetui prune --json`` prints), ``{}`` until the run finishes.
    """

    id: str
    status: str
    config: RunConfig
    created: float
    started: float | None = None
    finished: float | None = None
    heartbeat: float | None = None
    env: dict = field(default_factory=dict)
    error: str | None = None
    pid: int | None = None
    host: str | None = None
    cancel_requested: bool = False
    num_layers: int | None = None
    current_layer: int | None = None
    stage: dict | None = None
    results: dict = field(default_factory=dict)
    layers_done: int = 0
    layers: list[dict] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The paper's row name, e.g. ``CosP+VarP-16``."""
        return self.config.label

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def ppl(self) -> float | None:
        return self.results.get("ppl_wikitext2")

    @property
    def prune_seconds(self) -> float | None:
        return self.results.get("prune_seconds")

    def to_dict(self) -> dict:
        """JSON-ready: every field, ``config`` as a dict, plus ``label``."""
        data = asdict(self)
        data["config"] = self.config.to_dict()
        data["label"] = self.label
        return data


def _dumps(value) -> str | None:
    return None if value is None else json.dumps(value)


def _loads(text, default=None):
    return default if text is None else json.loads(text)


def _process_start(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def process_alive(pid: int | None, pid_started: float | None) -> bool:
    """Whether ``pid`` on this machine is still the live process that started at ``pid_started``."""
    if pid is None:
        return False
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:  # killed, not yet reaped by its parent
            return False
        return pid_started is None or abs(process.create_time() - pid_started) <= PID_START_TOLERANCE
    except psutil.AccessDenied:  # another user's live process: it exists, and we cannot say more
        return True
    except psutil.Error:
        return False


def _layer_sparsity(linears: list[dict]) -> float | None:
    """Zeros over weights across the layer's linears."""
    sizes = [(l["d_out"] or 0) * (l["d_in"] or 0) for l in linears]
    if not sum(sizes):
        return None
    return sum(l["sparsity"] * size for l, size in zip(linears, sizes)) / sum(sizes)


class Store:
    """The run store at ``path`` (see the module docstring for where it lives by default).

    Opening validates the file and creates or migrates the schema; a bad path or foreign file raises
    ``UserError``. Instances hold no open connection, so one may be shared by threads, and any number
    of processes may open the same file. ``clock`` gives "now" (tests pass a fixed one).
    """

    def __init__(self, path: str | os.PathLike | None = None, *, clock=time.time):
        self.path = Path(path).expanduser() if path is not None else default_store_path()
        self.path = self.path.absolute()
        self.clock = clock
        self._open()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    # ---- opening, schema, migration ----------------------------------------------------------

    def _open(self) -> None:
        path = self.path
        if path.is_dir():
            raise UserError(f"The run store {path} is a folder; give a file path such as {path / STORE_FILENAME}.")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UserError(f"Cannot create the folder for the run store {path}: {error.strerror or error}.") from None
        if path.exists() and not os.access(path, os.R_OK | os.W_OK):
            raise UserError(f"The run store {path} cannot be read and written by this user.")
        if not os.access(path.parent, os.W_OK):
            raise UserError(f"The folder of the run store {path} is not writable (SQLite needs to create files beside it).")
        with self._db() as db:
            current = self._schema_state(db) == (APPLICATION_ID, SCHEMA_VERSION)
        if not current:
            with self._db(write=True) as db:  # check again inside the lock: another process may have done it
                self._prepare_schema(db)
        with self._db(snapshot=False) as db:  # the journal mode cannot change inside a transaction
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise UserError(f"The run store {path} cannot use SQLite's WAL mode (journal mode stays '{mode}'); put it on a local disk.")

    @staticmethod
    def _schema_state(db: sqlite3.Connection) -> tuple[int, int]:
        return db.execute("PRAGMA application_id").fetchone()[0], db.execute("PRAGMA user_version").fetchone()[0]

    def _prepare_schema(self, db: sqlite3.Connection) -> None:
        """Create the schema in an empty file, or migrate an older acetui store; refuse anything else."""
        app_id, version = self._schema_state(db)
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if app_id == APPLICATION_ID:
            if version > SCHEMA_VERSION:
                raise UserError(f"The run store {self.path} was written by a newer acetui (schema {version}, "
                                f"this one knows {SCHEMA_VERSION}); upgrade acetui to open it.")
        elif not tables:
            _create_schema(db)
            version = SCHEMA_VERSION
        elif app_id == 0 and _is_version0(db, tables):
            version = 0
        else:
            raise UserError(f"{self.path} is not an acetui run store; it was left untouched "
                            f"(choose another file with --store or ACETUI_HOME).")
        while version < SCHEMA_VERSION:
            MIGRATIONS[version](db)
            version += 1
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @contextmanager
    def _db(self, write: bool = False, snapshot: bool = True):
        """A short connection inside one transaction: ``BEGIN IMMEDIATE`` to write (committed on exit),
        else a read transaction, so that several SELECTs see one snapshot of the store."""
        try:
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None)
        except sqlite3.Error as error:
            raise UserError(f"Cannot open the run store {self.path}: {error}.") from None
        try:
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA foreign_keys = ON")
            if write:
                db.execute("BEGIN IMMEDIATE")
            elif snapshot:
                db.execute("BEGIN")
            yield db
            if db.in_transaction:
                db.execute("COMMIT")
        except sqlite3.DatabaseError as error:
            if db.in_transaction:
                db.execute("ROLLBACK")
            if "not a database" in str(error):
                raise UserError(f"{self.path} is not an acetui run store (not an SQLite database); "
                                f"it was left untouched.") from None
            raise UserError(f"The run store {self.path} could not be used: {error}.") from None
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    # ---- writing -----------------------------------------------------------------------------

    def create_run(self, config: RunConfig, *, env: dict | None = None, run_id: str | None = None,
                   owner_pid: int | None = None) -> str:
        """Record a new ``queued`` run and return its id (8 hex digits unless ``run_id`` is given).

        The run is owned by ``owner_pid`` (default: this process) until a process claims it: if the
        owner dies first, readers mark the run interrupted.
        """
        pid = owner_pid if owner_pid is not None else os.getpid()
        with self._db(write=True) as db:
            while run_id is None:
                candidate = secrets.token_hex(4)
                if not db.execute("SELECT 1 FROM runs WHERE id = ?", (candidate,)).fetchone():
                    run_id = candidate
            db.execute(
                "INSERT INTO runs (id, status, created, heartbeat, host, pid, pid_started, config, env)"
                " VALUES (?, 'queued', ?, ?, ?, ?, ?, ?, ?)",
                (run_id, self.clock(), self.clock(), _HOST, pid, _process_start(pid),
                 json.dumps(config.to_dict()), json.dumps(env or {})))
        return run_id

    def set_owner(self, run_id: str, pid: int) -> None:
        """Hand a queued run to process ``pid`` on this host (a detached child), so liveness checks follow it."""
        with self._db(write=True) as db:
            db.execute("UPDATE runs SET pid = ?, pid_started = ?, host = ?, heartbeat = ? WHERE id = ?",
                       (pid, _process_start(pid), _HOST, self.clock(), run_id))

    def claim(self, run_id: str) -> None:
        """This process starts executing the run: status ``running``, ``started`` now, its pid and host."""
        now, pid = self.clock(), os.getpid()
        with self._db(write=True) as db:
            changed = db.execute(
                "UPDATE runs SET status = 'running', started = ?, heartbeat = ?, host = ?, pid = ?, pid_started = ?"
                " WHERE id = ? AND status = 'queued'",
                (now, now, _HOST, pid, _process_start(pid), run_id)).rowcount
            if not changed:
                status = db.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
                raise UserError(f"Run {run_id} cannot start: it is {status[0] if status else 'not in the store'}.")

    def heartbeat(self, run_id: str) -> bool:
        """Note that the run's process is alive; return True when a cancel was requested."""
        with self._db(write=True) as db:
            # A run wrongly presumed dead (a stale heartbeat from another host) comes back to life.
            db.execute("UPDATE runs SET heartbeat = ?, status = CASE status WHEN 'interrupted' THEN 'running' "
                       "ELSE status END, error = CASE status WHEN 'interrupted' THEN NULL ELSE error END, "
                       "finished = CASE status WHEN 'interrupted' THEN NULL ELSE finished END WHERE id = ?",
                       (self.clock(), run_id))
        return self.cancel_requested(run_id)

    def cancel_requested(self, run_id: str) -> bool:
        """Whether someone asked the run to stop (``request_cancel``)."""
        with self._db() as db:
            row = db.execute("SELECT cancel_requested FROM runs WHERE id = ?", (run_id,)).fetchone()
        return bool(row and row[0])

    def update_env(self, run_id: str, **values) -> None:
        """Merge ``values`` into the run's environment record (e.g. the device name once known)."""
        with self._db(write=True) as db:
            row = db.execute("SELECT env FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row:
                db.execute("UPDATE runs SET env = ? WHERE id = ?", (json.dumps({**json.loads(row[0]), **values}), run_id))

    def record_event(self, run_id: str, event) -> None:
        """Persist one pipeline event (``acetui_core.events``). Each call is one transaction: a layer is
        written with all its linears or not at all; ``RunFinished`` stores the results and marks the
        run finished together (see :meth:`finish`)."""
        if isinstance(event, RunFinished):
            self.finish(run_id, event.result)
            return
        with self._db(write=True) as db:
            if isinstance(event, RunStarted):
                row = db.execute("SELECT env FROM runs WHERE id = ?", (run_id,)).fetchone()
                env = {**json.loads(row[0]), "device": event.device} if row else {}
                db.execute("UPDATE runs SET num_layers = ?, env = ? WHERE id = ?",
                           (event.num_layers, json.dumps(env), run_id))
            elif isinstance(event, Stage):
                db.execute("UPDATE runs SET stage = ? WHERE id = ?", (json.dumps(asdict(event)), run_id))
            elif isinstance(event, LayerStarted):
                db.execute("UPDATE runs SET current_layer = ?, num_layers = ? WHERE id = ?",
                           (event.index, event.total, run_id))
            elif isinstance(event, LayerPruned):
                self._write_layer(db, run_id, event)

    def _write_layer(self, db: sqlite3.Connection, run_id: str, event: LayerPruned) -> None:
        db.execute("DELETE FROM layers WHERE run_id = ? AND layer = ?", (run_id, event.index))
        db.execute("INSERT INTO layers (run_id, layer, total, seconds, recorded) VALUES (?, ?, ?, ?, ?)",
                   (run_id, event.index, event.total, event.seconds, self.clock()))
        db.executemany(
            "INSERT INTO linears (run_id, layer, position, name, d_out, d_in, sparsity, seconds, act_stats, histogram)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(run_id, event.index, position, record.name, record.d_out, record.d_in, record.sparsity, record.seconds,
              json.dumps(record.act_stats or {}),
              _dumps(asdict(record.histogram) if record.histogram is not None else None))
             for position, record in enumerate(event.linears)])
        db.execute("UPDATE runs SET current_layer = NULL WHERE id = ?", (run_id,))

    def finish(self, run_id: str, results: dict) -> None:
        """Store the results and mark the run ``finished`` in one transaction (idempotent)."""
        with self._db(write=True) as db:
            db.execute("UPDATE runs SET results = ?, status = 'finished', finished = ?, current_layer = NULL,"
                       " error = NULL WHERE id = ? AND status IN ('queued', 'running', 'interrupted')",
                       (json.dumps(results), self.clock(), run_id))

    def set_status(self, run_id: str, status: str, error: str | None = None) -> bool:
        """Move an active run to ``status`` (with the error text for ``failed``); a run that already
        ended keeps its status. Returns whether the status changed."""
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        finished = self.clock() if status in TERMINAL else None
        with self._db(write=True) as db:
            return bool(db.execute(
                "UPDATE runs SET status = ?, error = ?, finished = ?, current_layer = NULL"
                " WHERE id = ? AND status IN ('queued', 'running')",
                (status, error, finished, run_id)).rowcount)

    def request_cancel(self, run_id: str) -> str:
        """Ask a run to stop. A queued run is cancelled at once; a running one is flagged, its process
        sees the flag within a second (heartbeat) and stops after the current layer. Returns the
        status the run has now; a run that already ended raises ``UserError``."""
        run = self.get_run(run_id, layers=False)
        if not run.active:
            raise UserError(f"Run {run.id} has already ended ({run.status}); there is nothing to cancel.")
        with self._db(write=True) as db:
            db.execute("UPDATE runs SET cancel_requested = 1 WHERE id = ?", (run.id,))
            db.execute("UPDATE runs SET status = 'cancelled', finished = ? WHERE id = ? AND status = 'queued'",
                       (self.clock(), run.id))
            return db.execute("SELECT status FROM runs WHERE id = ?", (run.id,)).fetchone()[0]

    def delete_run(self, run_id: str) -> None:
        """Remove a run and its layers. A run still queued or running is refused (cancel it first)."""
        run = self.get_run(run_id, layers=False)
        if run.active:
            raise UserError(f"Run {run.id} is {run.status}; cancel it first (acetui runs cancel {run.id}).")
        with self._db(write=True) as db:
            db.execute("DELETE FROM runs WHERE id = ?", (run.id,))

    # ---- reading -----------------------------------------------------------------------------

    def resolve(self, run_id: str) -> str:
        """The full id for ``run_id`` or a unique prefix of one; ``UserError`` otherwise."""
        text = str(run_id).strip()
        if re.fullmatch(r"[0-9A-Za-z_-]+", text):
            with self._db() as db:
                matches = [row[0] for row in db.execute(
                    "SELECT id FROM runs WHERE substr(id, 1, ?) = ? ORDER BY id", (len(text), text))]
            if text in matches:
                return text
            if len(matches) == 1:
                return matches[0]
            if matches:
                raise UserError(f"Run id '{run_id}' is ambiguous: it starts {len(matches)} runs ({', '.join(matches[:4])}…).")
        raise UserError(f"There is no run '{run_id}' in {self.path} (acetui runs lists them).")

    def get_run(self, run_id: str, *, layers: bool = True) -> RunRecord:
        """The run with this id (or unique id prefix), with its layers unless ``layers=False``."""
        full = self.resolve(run_id)
        self.reap()
        with self._db() as db:
            row = db.execute(f"{_SELECT_RUNS} WHERE id = ?", (full,)).fetchone()
            record = _record(row)
            if layers:
                record.layers = _layers(db, [full])[full]
        return record

    def list_runs(self, *, ids: list[str] | None = None, model: str | None = None, status: str | None = None,
                  last: int | None = None, layers: bool = False) -> list[RunRecord]:
        """Runs oldest first, optionally only these ids (prefixes allowed, in the given order), one
        model (matched exactly or by its last path component), one status, or the ``last`` N."""
        self.reap()
        where, params = [], []
        if ids is not None:
            full = [self.resolve(i) for i in ids]
            where.append(f"id IN ({','.join('?' * len(full))})")
            params += full
        if status is not None:
            where.append("status = ?")
            params.append(status)
        sql = _SELECT_RUNS + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY created, id"
        with self._db() as db:
            records = [_record(row) for row in db.execute(sql, params)]
            if model is not None:
                records = [r for r in records if model in _names(r.config.model)]
            if last is not None:
                records = records[-last:] if last > 0 else []
            if ids is not None:
                order = {run_id: i for i, run_id in enumerate(full)}
                records.sort(key=lambda r: order[r.id])
            if layers and records:
                by_run = _layers(db, [r.id for r in records])
                for record in records:
                    record.layers = by_run[record.id]
        return records

    def layers_since(self, run_id: str, after: int = -1) -> list[dict]:
        """The run's recorded layers with index above ``after``: for live views that poll."""
        full = self.resolve(run_id)
        with self._db() as db:
            return [layer for layer in _layers(db, [full])[full] if layer["layer"] > after]

    def reap(self) -> list[str]:
        """Mark active runs whose process is gone as ``interrupted``; return their ids.

        Same host: the recorded pid must be alive, not a zombie, and started when recorded. Another
        host: the heartbeat must be fresher than ``STALE_AFTER``. Readers call this, so no run shows
        ``running`` forever after a SIGKILL or a reboot.
        """
        now = self.clock()
        with self._db() as db:
            rows = db.execute("SELECT id, host, pid, pid_started, heartbeat, started, created FROM runs"
                              " WHERE status IN ('queued', 'running')").fetchall()
        dead = []
        for row in rows:
            if row["host"] == _HOST:
                alive = process_alive(row["pid"], row["pid_started"])
            else:
                last_sign = row["heartbeat"] or row["started"] or row["created"]
                alive = now - last_sign <= STALE_AFTER
            if not alive:
                dead.append(row)
        if dead:
            with self._db(write=True) as db:
                for row in dead:
                    # Conditional on the heartbeat we judged by: a run that just beat is left alone.
                    db.execute("UPDATE runs SET status = 'interrupted', error = ?, current_layer = NULL,"
                               " finished = COALESCE(heartbeat, started, created) WHERE id = ?"
                               " AND status IN ('queued', 'running') AND heartbeat IS ?",
                               (INTERRUPTED_ERROR, row["id"], row["heartbeat"]))
        return [row["id"] for row in dead]


_SELECT_RUNS = ("SELECT runs.*, (SELECT COUNT(*) FROM layers WHERE layers.run_id = runs.id) AS layers_done"
                " FROM runs")


def model_name(model: str) -> str:
    """A short display name: the last component of a path or hub id, without ``.gguf``."""
    return model.rstrip("/").rsplit("/", 1)[-1].removesuffix(".gguf")


def _names(model: str) -> set[str]:
    """What a user may type to mean ``model``: itself, its last component, its display name."""
    return {model, model.rstrip("/").rsplit("/", 1)[-1], model_name(model)}


def _record(row: sqlite3.Row) -> RunRecord:
    return RunRecord(
        id=row["id"], status=row["status"], config=RunConfig.from_dict(json.loads(row["config"])),
        created=row["created"], started=row["started"], finished=row["finished"], heartbeat=row["heartbeat"],
        env=_loads(row["env"], {}), error=row["error"], pid=row["pid"], host=row["host"],
        cancel_requested=bool(row["cancel_requested"]), num_layers=row["num_layers"],
        current_layer=row["current_layer"], stage=_loads(row["stage"]), results=_loads(row["results"], {}),
        layers_done=row["layers_done"])


def _layers(db: sqlite3.Connection, run_ids: list[str]) -> dict[str, list[dict]]:
    marks = ",".join("?" * len(run_ids))
    by_run: dict[str, list[dict]] = {run_id: [] for run_id in run_ids}
    index: dict[tuple[str, int], dict] = {}
    for row in db.execute(f"SELECT * FROM layers WHERE run_id IN ({marks}) ORDER BY run_id, layer", run_ids):
        layer = {"layer": row["layer"], "total": row["total"], "seconds": row["seconds"],
                 "recorded": row["recorded"], "sparsity": None, "linears": []}
        by_run[row["run_id"]].append(layer)
        index[(row["run_id"], row["layer"])] = layer
    for row in db.execute(f"SELECT * FROM linears WHERE run_id IN ({marks}) ORDER BY run_id, layer, position", run_ids):
        index[(row["run_id"], row["layer"])]["linears"].append({
            "name": row["name"], "d_out": row["d_out"], "d_in": row["d_in"], "sparsity": row["sparsity"],
            "seconds": row["seconds"], "act_stats": _loads(row["act_stats"], {}), "histogram": _loads(row["histogram"])})
    for layer in index.values():
        layer["sparsity"] = _layer_sparsity(layer["linears"])
    return by_run


def _create_schema(db: sqlite3.Connection) -> None:
    # Statement by statement: ``executescript`` would commit the caller's open transaction first.
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)


# ---- migrations: MIGRATIONS[v] turns a version-v store into version v+1, inside the open transaction ----

_V0_COLUMNS = {"id", "status", "created", "config", "results"}


def _is_version0(db: sqlite3.Connection, tables: set[str]) -> bool:
    """acetui 0.0 wrote no application id; recognise its two tables by their columns."""
    if tables != {"runs", "layers"}:
        return False
    columns = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    layer_columns = {row[1] for row in db.execute("PRAGMA table_info(layers)")}
    return _V0_COLUMNS <= columns and {"run_id", "layer", "seconds", "linears"} <= layer_columns


def _migrate_0_to_1(db: sqlite3.Connection) -> None:
    """Version 0 kept each layer's linears as one JSON list and had no heartbeat, host, environment or
    cancel flag. Its runs move over unchanged; its layers are split into the ``linears`` table."""
    old_runs = [dict(row) for row in db.execute("SELECT * FROM runs")]
    old_layers = [dict(row) for row in db.execute("SELECT * FROM layers")]
    db.execute("DROP TABLE layers")
    db.execute("ALTER TABLE runs RENAME TO runs_v0")
    _create_schema(db)
    for run in old_runs:
        status = run["status"] if run["status"] in STATUSES else "failed"
        db.execute("INSERT INTO runs (id, status, created, started, finished, pid, config, error, results)"
                   " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (run["id"], status, run["created"], run.get("started"), run.get("finished"), run.get("pid"),
                    run["config"], run.get("error"), run.get("results")))
    db.execute("DROP TABLE runs_v0")
    for layer in old_layers:
        linears = json.loads(layer["linears"])
        db.execute("INSERT INTO layers (run_id, layer, total, seconds, recorded) VALUES (?, ?, NULL, ?, ?)",
                   (layer["run_id"], layer["layer"], layer["seconds"], 0.0))
        db.executemany(
            "INSERT INTO linears (run_id, layer, position, name, d_out, d_in, sparsity, seconds, act_stats, histogram)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(layer["run_id"], layer["layer"], position, linear["name"], linear.get("d_out"), linear.get("d_in"),
              linear.get("sparsity"), linear.get("seconds"), json.dumps(linear.get("act_stats") or {}),
              _dumps(linear.get("histogram")))
             for position, linear in enumerate(linears)])


MIGRATIONS = {0: _migrate_0_to_1}
