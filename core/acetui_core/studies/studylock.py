"""One ``acetui study run`` at a time per store: two at once would both see a cell missing and both start
it (a cell is *running*, and waited for, only once its run is in the store). Per store, not per study
file: two files may share cells (a study and a smaller one drawn from it), and a copy of a file under
another name is the same study.

The lock is a file beside the store, ``<store>.study.lock``, held with ``fcntl.flock``: the
kernel releases it when the holder's process ends, however it ends (SIGKILL included), so a killed
study never leaves a stale lock. The file holds who took it last (pid, host, since when, the study
file), which the refused command reports; its content is only a description, the flock is the lock.

Usage::

    with study_lock(store_path, study, wait=False, on_wait=print):
        ...  # run the study's cells
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from acetui_core.basics.errors import UserError
from acetui_core.storage.store_files import STUDY_LOCK_SUFFIX

POLL_SECONDS = 1.0  # how often a waiting study tries the lock again


def lock_path(store: Path) -> Path:
    """Beside the store's real file: a link to the store and the store itself take the same lock."""
    store = store.resolve()
    return store.with_name(f"{store.name}{STUDY_LOCK_SUFFIX}")


def _holder(path: Path) -> str:
    """Who holds the lock, as its file says: 'study.toml by pid 123 on host since 2026-11-27 00:30:12 UTC'."""
    try:
        held = json.loads(path.read_text(encoding="utf-8"))
        since = datetime.fromtimestamp(held["since"], timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"{held['study']} by pid {held['pid']} on {held['host']} since {since}"
    except (OSError, ValueError, KeyError, TypeError):  # taken a moment ago, its description not yet written
        return "a process that is just starting"


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextmanager
def study_lock(
    store: Path, study_file: Path, *, wait: bool, on_wait: Callable[[str], None] | None = None
) -> Iterator[None]:
    """Hold the studies' lock of ``store`` for the block (``study_file`` is recorded as its holder). Held
    elsewhere: one sentence naming the holder (``UserError``), or with ``wait`` that sentence to ``on_wait``
    and a wait until it is free."""
    path = lock_path(store)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise UserError(f"Could not open the studies' lock {path}: {error.strerror}.") from None
    try:
        if not _try_lock(fd):
            sentence = f"A study run is already under way on {store.name}: {_holder(path)} (lock {path})"
            if not wait:
                raise UserError(f"{sentence}; wait for it, or add --wait to start when it ends.")
            if on_wait is not None:
                on_wait(f"{sentence}; waiting for it to end.")
            while not _try_lock(fd):
                time.sleep(POLL_SECONDS)
        held = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), "study": str(study_file)}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(held).encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the flock
