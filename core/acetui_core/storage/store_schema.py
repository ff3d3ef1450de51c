"""The run store's SQLite schema and its migrations.

A new store is made as version 1 and brought up to ``SCHEMA_VERSION`` by the same migrations an
older store goes through, so a fresh store and a migrated one are the same by construction.
``MIGRATIONS[v]`` turns a version-v store into version v+1, inside the caller's open transaction.
"""

from __future__ import annotations

import json
import sqlite3

from acetui_core.basics.choices import RunStatus

SCHEMA_VERSION = 7
APPLICATION_ID = 0x41434554  # "ACET": marks the file as an acetui store
STATUSES = tuple(RunStatus)
ACTIVE = (RunStatus.QUEUED, RunStatus.RUNNING)
TERMINAL = tuple(status for status in RunStatus if status not in ACTIVE)


def sql_list(values) -> str:
    """``values`` (names from a closed set, never user text) as an SQL list: ``('queued', 'running')``."""
    return "(" + ", ".join(f"'{value}'" for value in values) + ")"


# Version 1 as it was: its CHECK lists the statuses of the day, so a new ``RunStatus`` needs a migration
# (fresh and migrated stores must stay the same).
_SCHEMA_V1 = """
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


def create(db: sqlite3.Connection) -> None:
    """Make an empty file a version-1 store (the caller then migrates it to the current version)."""
    # Statement by statement: ``executescript`` would commit the caller's open transaction first.
    for statement in _SCHEMA_V1.split(";"):
        if statement.strip():
            db.execute(statement)


_V0_COLUMNS = {"id", "status", "created", "config", "results"}


def is_version0(db: sqlite3.Connection, tables: set[str]) -> bool:
    """acetui 0.0 wrote no application id; recognise its two tables by their columns."""
    if tables != {"runs", "layers"}:
        return False
    columns = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    layer_columns = {row[1] for row in db.execute("PRAGMA table_info(layers)")}
    return columns >= _V0_COLUMNS and {"run_id", "layer", "seconds", "linears"} <= layer_columns


def _migrate_0_to_1(db: sqlite3.Connection) -> None:
    """Version 0 kept each layer's linears as one JSON list and had no heartbeat, host, environment or
    cancel flag. Its runs move over unchanged; its layers are split into the ``linears`` table."""
    old_runs = [dict(row) for row in db.execute("SELECT * FROM runs")]
    old_layers = [dict(row) for row in db.execute("SELECT * FROM layers")]
    db.execute("DROP TABLE layers")
    db.execute("ALTER TABLE runs RENAME TO runs_v0")
    create(db)
    for run in old_runs:
        status = run["status"] if run["status"] in STATUSES else RunStatus.FAILED
        db.execute(
            "INSERT INTO runs (id, status, created, started, finished, pid, config, error, results)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run["id"],
                status,
                run["created"],
                run.get("started"),
                run.get("finished"),
                run.get("pid"),
                run["config"],
                run.get("error"),
                run.get("results"),
            ),
        )
    db.execute("DROP TABLE runs_v0")
    for layer in old_layers:
        linears = json.loads(layer["linears"])
        db.execute(
            "INSERT INTO layers (run_id, layer, total, seconds, recorded) VALUES (?, ?, NULL, ?, ?)",
            (layer["run_id"], layer["layer"], layer["seconds"], 0.0),
        )
        db.executemany(
            "INSERT INTO linears (run_id, layer, position, name, d_out, d_in, sparsity, seconds, act_stats, histogram)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    layer["run_id"],
                    layer["layer"],
                    position,
                    linear["name"],
                    linear.get("d_out"),
                    linear.get("d_in"),
                    linear.get("sparsity"),
                    linear.get("seconds"),
                    json.dumps(linear.get("act_stats") or {}),
                    None if linear.get("histogram") is None else json.dumps(linear["histogram"]),
                )
                for position, linear in enumerate(linears)
            ],
        )


def _migrate_1_to_2(db: sqlite3.Connection) -> None:
    """Version 2 stores typed records (``acetui_core.run.records``) and knows where a run executes
    (``executor``: local, or slurm with its ``job`` folder and the events imported from it so far) and the
    last resource sample of its process. Results of early versions gain the fields every result names
    (model, method, label, sparsity, group, from the run's configuration)."""
    from acetui_core.run.config import RunConfig

    db.execute("ALTER TABLE runs ADD COLUMN executor TEXT NOT NULL DEFAULT 'local'")
    db.execute("ALTER TABLE runs ADD COLUMN job TEXT")  # JSON: {"job_id", "folder", "imported"} for slurm
    db.execute("ALTER TABLE runs ADD COLUMN resources TEXT")  # JSON: the last resources sample
    for run_id, config_text, results_text in db.execute(
        "SELECT id, config, results FROM runs WHERE results IS NOT NULL"
    ).fetchall():
        try:
            config, results = RunConfig.from_dict(json.loads(config_text)), json.loads(results_text)
        except (ValueError, TypeError):
            continue  # left as it is: the reader shows the run as damaged
        named = {
            "model": config.model,
            "method": config.method,
            "label": config.label,
            "sparsity": config.sparsity,
            "group": config.group,
        }
        if isinstance(results.get("calibration"), dict) and not results["calibration"].get("nsamples"):
            results["calibration"] = None  # version 1 wrote zero samples for methods without calibration
        db.execute("UPDATE runs SET results = ? WHERE id = ?", (json.dumps({**named, **results}), run_id))


def _migrate_2_to_3(db: sqlite3.Connection) -> None:
    """Version 3 keeps the output fidelity (``--fidelity``) of each layer and linear: NULL in older runs."""
    db.execute("ALTER TABLE layers ADD COLUMN fidelity TEXT")  # JSON: {"cosine", "rel_error"} or NULL
    db.execute("ALTER TABLE linears ADD COLUMN fidelity TEXT")


def _migrate_3_to_4(db: sqlite3.Connection) -> None:
    """Version 4 keeps what a test of a difference needs, apart from the results so that listing runs
    stays light: each perplexity window's loss and each zero-shot document's correctness. Older runs have
    none; they keep their numbers and say they cannot be tested."""
    db.execute(
        "CREATE TABLE evidence ("
        " run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,"
        " evaluation TEXT NOT NULL,"  # "wikitext2", or "zeroshot:<task>"
        " record TEXT NOT NULL,"  # JSON: records.WindowLosses, or records.TaskOutcomes
        " PRIMARY KEY (run_id, evaluation))"
    )


def _migrate_4_to_5(db: sqlite3.Connection) -> None:
    """Version 5 keeps how each linear's mask was chosen (retained score, --permute's order, --refine's
    swaps: ``records.MaskChoice``): NULL in older runs."""
    db.execute("ALTER TABLE linears ADD COLUMN choice TEXT")


def _migrate_5_to_6(db: sqlite3.Connection) -> None:
    """Version 6 records which runs were queued together (one ``acetui compare`` or ``sweep``, one start
    from the New run form): a ``batch`` id shared by them. Older runs get the batch that was inferred from
    them before: each contiguous stretch (in creation order) of runs owned by one process on one host."""
    db.execute("ALTER TABLE runs ADD COLUMN batch TEXT")
    batch, owner = None, None
    for run_id, host, pid in db.execute("SELECT id, host, pid FROM runs ORDER BY created, id").fetchall():
        if pid is None or (host, pid) != owner:
            batch, owner = run_id, (host, pid) if pid is not None else None
        db.execute("UPDATE runs SET batch = ? WHERE id = ?", (batch, run_id))


def _migrate_6_to_7(db: sqlite3.Connection) -> None:
    """Version 7 keeps each mixture-of-experts layer's token load with the layer (``records.Experts``), so
    it shows while the run goes on: NULL in older runs and in dense layers."""
    db.execute("ALTER TABLE layers ADD COLUMN experts TEXT")


MIGRATIONS = {
    0: _migrate_0_to_1,
    1: _migrate_1_to_2,
    2: _migrate_2_to_3,
    3: _migrate_3_to_4,
    4: _migrate_4_to_5,
    5: _migrate_5_to_6,
    6: _migrate_6_to_7,
}
