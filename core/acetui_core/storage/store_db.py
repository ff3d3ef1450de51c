"""The run store's SQLite file: checking that a path can hold one, creating or migrating its schema
(``acetui_core.storage.store_schema``), WAL mode, and the short transactions every read and write of the store
goes through. What the rows mean is ``acetui_core.storage.store_rows``; what is done with them, ``acetui_core.storage.store``."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from acetui_core.basics.errors import UserError
from acetui_core.basics.paths import file_in_the_way, home, user_path
from acetui_core.storage import store_schema
from acetui_core.storage.store_schema import APPLICATION_ID, SCHEMA_VERSION

STORE_FILENAME = "runs.db"
BUSY_TIMEOUT = 30.0  # seconds a write waits for another writer's transaction

# Stores this process opened that this user may read but not write (a read-only mount, a colleague's file):
# path -> the URI that reads them. Reading commands work on them; a write is refused (``ReadOnlyStore``).
_READ_ONLY: dict[Path, str] = {}


class ReadOnlyStore(UserError):
    """A write to a run store this user may only read."""


class StoreLocked(UserError):
    """Another process held the store's write lock for longer than ``BUSY_TIMEOUT``."""


def read_only_sentence(path: Path) -> str:
    return (
        f"The run store {path} is read-only (the file or its folder cannot be written): its runs can be "
        "listed and exported, but nothing can be recorded, cancelled or removed in it."
    )


def default_store_path() -> Path:
    """``$ACETUI_HOME/runs.db`` when ``ACETUI_HOME`` is set, else ``runs.db`` in the user's data directory."""
    root = home()
    if root:
        return root / STORE_FILENAME
    import platformdirs

    return Path(platformdirs.user_data_dir("acetui", appauthor=False)) / STORE_FILENAME


def store_path(store: str | os.PathLike | None) -> Path:
    """The run store a ``--store`` option names (``~`` expanded, made absolute), or the default one; an
    empty one (an unset variable) is refused, never read as the working folder."""
    if store is not None and not str(store).strip():
        raise UserError("--store is empty; name the run store's file, or leave --store out for the default one.")
    return user_path(store).absolute() if store is not None else default_store_path()


def open_database(path: Path, create: bool = True) -> None:
    """Check that ``path`` can hold a run store, create or migrate its schema, and switch it to WAL mode;
    a bad path or a foreign file raises ``UserError`` and is left untouched. ``create=False`` (commands
    that only read): a store that does not exist yet, or an empty file, is refused, and nothing is made."""
    if path.is_dir():
        raise UserError(f"The run store {path} is a folder; give a file path such as {path / STORE_FILENAME}.")
    if not create and not path.is_file():
        raise UserError(
            f"There is no run store at {path}; runs are recorded by acetui prune, compare or sweep "
            "(name another store with --store)."
        )
    if not create and path.stat().st_size == 0:
        raise UserError(f"{path} is an empty file, not an acetui run store; it was left untouched.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        blocking = file_in_the_way(path.parent)
        reason = f"{blocking} is a file, not a folder" if blocking else error.strerror or error
        raise UserError(f"Cannot create the folder for the run store {path}: {reason}.") from None
    _READ_ONLY.pop(path, None)
    if path.exists() and not os.access(path, os.R_OK):
        raise UserError(f"The run store {path} cannot be read by this user.")
    if path.exists() and not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):
        _open_read_only(path)
        return
    if not os.access(path.parent, os.W_OK):
        raise UserError(f"The folder of the run store {path} is not writable (SQLite needs to create files beside it).")
    with transaction(path, create=create) as db:
        current = _schema_state(db) == (APPLICATION_ID, SCHEMA_VERSION)
    if not current:
        with transaction(path, write=True) as db:  # check again inside the lock: another process may have done it
            _prepare_schema(path, db, create)
    with transaction(path, snapshot=False) as db:  # the journal mode cannot change inside a transaction
        mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if mode.lower() != "wal":
        raise UserError(
            f"The run store {path} cannot use SQLite's WAL mode (journal mode stays '{mode}'); put it on a local disk."
        )


def _open_read_only(path: Path) -> None:
    """Open a store this user can read but not write, for reading: SQLite's read-only mode, which reads a
    write-ahead log left beside it, or, where that cannot open (no ``-shm`` file, and none can be made on a
    read-only medium or in another user's folder), the file as immutable, which is whole when no log is left. A store that would need
    migrating, or whose log cannot be read, is one sentence."""
    quoted = urllib.parse.quote(str(path))
    wal = Path(f"{path}-wal")
    for uri in (f"file:{quoted}?mode=ro", f"file:{quoted}?immutable=1"):
        if "immutable" in uri and wal.exists() and wal.stat().st_size > 0:
            raise UserError(
                f"The run store {path} is read-only and its write-ahead log {wal} cannot be read without "
                "writing beside it; copy the store with its -wal and -shm files to a folder you can write."
            )
        _READ_ONLY[path] = uri
        try:
            with transaction(path) as db:
                version = _stored_version(path, db, empty=False)
        except UserError as error:
            _READ_ONLY.pop(path, None)
            # no -shm beside it, and none can be made: SQLite says "unable to open" on a read-only medium, and
            # "attempt to write a readonly database" in another user's folder
            if "unable to open" in str(error) or "readonly database" in str(error):
                continue
            raise
        if version == SCHEMA_VERSION:
            return
        _READ_ONLY.pop(path, None)
        raise UserError(
            f"The run store {path} was written by an older acetui and must be updated before it is read, "
            "but it is read-only (the file or its folder cannot be written); open it once as its owner."
        )
    raise UserError(f"The run store {path} is read-only and SQLite cannot open it for reading.")


def check_writable(path: Path) -> None:
    """``ReadOnlyStore`` when the store at ``path`` was opened read-only (``open_database``): before a
    command that records, cancels or removes anything does any of it."""
    if path in _READ_ONLY:
        raise ReadOnlyStore(read_only_sentence(path))


def _schema_state(db: sqlite3.Connection) -> tuple[int, int]:
    return db.execute("PRAGMA application_id").fetchone()[0], db.execute("PRAGMA user_version").fetchone()[0]


def _stored_version(path: Path, db: sqlite3.Connection, *, empty: bool) -> int | None:
    """The schema version of the acetui store ``db`` holds (0: the first, unversioned one), to migrate from;
    None for a file without tables when ``empty`` may be made a store. A newer acetui's store, or anything
    else, is refused with one sentence."""
    app_id, version = _schema_state(db)
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if app_id == APPLICATION_ID:
        if version > SCHEMA_VERSION:
            raise UserError(
                f"The run store {path} was written by a newer acetui (schema {version}, "
                f"this one knows {SCHEMA_VERSION}); upgrade acetui to open it."
            )
        return version
    if not tables and empty:
        return None
    if app_id == 0 and store_schema.is_version0(db, tables):
        return 0
    raise UserError(
        f"{path} is not an acetui run store; it was left untouched (choose another file with --store or ACETUI_HOME)."
    )


def _prepare_schema(path: Path, db: sqlite3.Connection, create: bool = True) -> None:
    """Create the schema in an empty file (``create``), or migrate an older acetui store; refuse anything else."""
    version = _stored_version(path, db, empty=create)
    if version is None:
        store_schema.create(db)
        version = 1
    elif version < SCHEMA_VERSION:
        _keep_a_copy(path, version)
    while version < SCHEMA_VERSION:
        store_schema.MIGRATIONS[version](db)
        version += 1
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def migration_backup(path: Path, version: int) -> Path:
    """Where the store at ``path`` is copied before its schema ``version`` is updated."""
    return Path(f"{path}.schema{version}.bak")


def _keep_a_copy(path: Path, version: int) -> None:
    """A copy of the store as it was, beside it, before an update changes it in place (any command that
    opens an older store updates it, ``acetui runs`` too): the older acetui that wrote it can still read
    the copy, and a finished result survives an update that went wrong. Kept if one is there already."""
    backup = migration_backup(path, version)
    if backup.exists():
        return
    # Read through a connection of its own: the caller's holds the write lock (other readers may still
    # read, and nothing is written before the copy is whole), and SQLite's backup retries forever on it.
    source, copy = sqlite3.connect(path, timeout=BUSY_TIMEOUT), None
    try:
        copy = sqlite3.connect(backup)
        source.backup(copy)
    except (sqlite3.Error, OSError) as error:
        backup.unlink(missing_ok=True)
        raise UserError(
            f"The run store {path} was written by an older acetui and is updated in place, but a copy of it "
            f"could not be kept first at {backup} ({error}); nothing was changed."
        ) from None
    finally:
        source.close()
        if copy is not None:
            copy.close()


# Less room than this beside the store, when a write failed, is why it failed: SQLite says "disk I/O error"
# for a full disk as often as "database or disk is full".
_NEARLY_FULL = 16 << 20


def _full_disk(path: Path) -> str:
    """Why a write to the store failed, when the disk that holds it is (nearly) full; else nothing."""
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        return ""
    if free >= _NEARLY_FULL:
        return ""
    return f" (the disk that holds it has {free >> 20} MiB free; make room there: what it recorded before is kept)"


@contextmanager
def transaction(
    path: Path, write: bool = False, snapshot: bool = True, create: bool = False
) -> Iterator[sqlite3.Connection]:
    """A short connection inside one transaction: ``BEGIN IMMEDIATE`` to write (committed on exit),
    else a read transaction, so that several SELECTs see one snapshot of the store. A store opened
    read-only (``open_database``) is read through SQLite's read-only URI, and a write to it is
    ``ReadOnlyStore``. Only ``open_database`` may make the file (``create``): a store moved or removed
    while a process has it open is one sentence, not a new empty store left at its old path."""
    uri = _READ_ONLY.get(path)
    if write and uri is not None:
        raise ReadOnlyStore(read_only_sentence(path))
    if uri is None and not create:
        if not path.exists():
            raise UserError(
                f"The run store {path} is no longer there (moved or removed since acetui opened it); "
                "put it back, or name where it is now with --store."
            )
        uri = f"file:{urllib.parse.quote(str(path))}?mode=rw"
    try:
        if uri is not None:
            db = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT, isolation_level=None)
        else:
            db = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None)
    except sqlite3.Error as error:
        raise UserError(f"Cannot open the run store {path}: {error}.") from None
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
            with contextlib.suppress(sqlite3.Error):  # a full disk can fail the rollback too: SQLite undoes it
                db.execute("ROLLBACK")
        if "not a database" in str(error):
            raise UserError(
                f"{path} is not an acetui run store (not an SQLite database); it was left untouched."
            ) from None
        kind = StoreLocked if "database is locked" in str(error) else UserError
        raise kind(f"The run store {path} could not be used: {error}{_full_disk(path)}.") from None
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    finally:
        db.close()
