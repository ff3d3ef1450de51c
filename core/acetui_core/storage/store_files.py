"""The files a run store keeps beside its SQLite file: a folder of run logs, one of kept masks
(``--keep-masks``) and one of Slurm job folders; where a run's own files go, and which files are a run's
(what deleting the run removes, never a checkpoint the user saved). The database itself is
``acetui_core.storage.store``."""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

from acetui_core.basics.errors import UserError
from acetui_core.storage.store_rows import RunRecord

LOG_FOLDER = "logs"  # beside the store: one log file per run
MASK_FOLDER = "masks"  # beside the store: one mask file per run that kept its masks (--keep-masks)
JOB_FOLDER = "slurm"  # beside the store: the Slurm job folders
STUDY_LOCK_SUFFIX = ".study.lock"  # beside the store's real file: one `acetui study run` at a time (studylock.py)


def log_path(folder: Path, run_id: str) -> Path:
    return folder / LOG_FOLDER / f"{run_id}.log"


def masks_path(folder: Path, run_id: str) -> Path:
    return folder / MASK_FOLDER / f"{run_id}.npz"


def places(store: Path) -> tuple[tuple[Path, str], ...]:
    """The store file, its SQLite companions, its study lock, the folders beside it and the copies kept
    before schema updates (``store_db.migration_backup``), as ``(path, what it is)``: a folder saved over a
    companion or the lock would stop every later command from opening the store."""
    return (
        (store, "the run store"),
        *((Path(f"{store}{end}"), "the run store") for end in ("-wal", "-shm", "-journal")),
        (Path(f"{store.resolve()}{STUDY_LOCK_SUFFIX}"), "the run store's study lock"),
        *((store.parent / name, "a folder of the run store") for name in (LOG_FOLDER, MASK_FOLDER, JOB_FOLDER)),
        *(
            (copy, "the run store's copy from before its update")
            for copy in store.parent.glob(f"{store.name}.schema*.bak")
        ),
    )


def check_log_folder(folder: Path) -> None:
    """The store's log folder exists and is writable, or one sentence saying why not."""
    logs = folder / LOG_FOLDER
    try:
        logs.mkdir(exist_ok=True)
    except OSError as error:
        raise UserError(f"Runs cannot keep their logs in {logs}: {error.strerror or error}.") from None
    if not os.access(logs, os.W_OK):
        raise UserError(f"Runs cannot keep their logs in {logs}: it is not writable.")


def in_store(folder: Path, recorded: str | os.PathLike) -> Path:
    """Where a file a run recorded by its absolute path (its masks, its Slurm job folder) is in the store
    in ``folder``: the same place under this store's folder when the store was copied or moved since
    (the path recorded still names the store it was recorded in, whose files are not this store's)."""
    path = Path(recorded)
    if path.parent.name == MASK_FOLDER:
        return folder / MASK_FOLDER / path.name
    if path.parent.name == JOB_FOLDER:  # a job folder
        return folder / JOB_FOLDER / path.name
    if path.parent.parent.name == JOB_FOLDER:  # a file in a job folder
        return folder / JOB_FOLDER / path.parent.name / path.name
    return path


def files_of(folder: Path, run: RunRecord) -> list[Path]:
    """What a run wrote: files named ``<run id>.*`` in the log and mask folders of the store in ``folder``
    and in its job folder (run ids are unique, so the name says whose a file is), and its Slurm job's own
    folder; never a file of another copy of the store."""
    folders = [folder / LOG_FOLDER, folder / MASK_FOLDER]
    files = []
    if run.job and run.job.get("folder"):
        job_folder = in_store(folder, run.job["folder"])
        folders.append(job_folder)
        if run.job.get("job_id"):
            files.append(job_folder / str(run.job["job_id"]))
    for place in dict.fromkeys(folders):
        files += place.glob(f"{glob.escape(run.id)}.*")
    return [path for path in files if path.exists() or path.is_symlink()]


def remove(paths: list[Path]) -> None:
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
