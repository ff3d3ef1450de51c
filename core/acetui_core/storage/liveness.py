"""Is the process running a run still alive? The store asks this of every active run it reads, so that
no run shows ``running`` forever after a SIGKILL, an OOM kill or a reboot.

Same host: the recorded pid must be alive, not a zombie, and the same process that was recorded (a
later process may reuse the pid: its start time tells). Another host: its heartbeat must be fresher
than ``STALE_AFTER`` seconds.
"""

from __future__ import annotations

import socket
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import NamedTuple

import psutil

from acetui_core.basics.choices import ExecutorKind, RunStatus
from acetui_core.storage.store_db import ReadOnlyStore
from acetui_core.storage.store_rows import RunRecord
from acetui_core.storage.store_schema import ACTIVE, sql_list

STALE_AFTER = 60.0  # seconds without a heartbeat before a run on another host counts as interrupted
INTERRUPTED_ERROR = "The process running it stopped without finishing (killed, or its machine restarted)."
NEVER_STARTED_ERROR = (
    "Queued and never started: the process that was to run it stopped (killed, or its machine restarted)."
)
PID_START_TOLERANCE = 1.0  # seconds: psutil's create_time is rounded differently across calls

HOST = socket.gethostname()


class Ending(NamedTuple):
    """How a run whose process is gone reads: why it ended, and when (its last sign of life)."""

    error: str
    finished: float


def process_start(pid: int) -> float | None:
    """When process ``pid`` started (POSIX seconds), or None when there is no such process."""
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


def owner_alive(host: str | None, pid: int | None, pid_started: float | None, last_sign: float, now: float) -> bool:
    """Whether the owner of an active run is alive: by its process on this host, else by its last sign of life."""
    if host == HOST:
        return process_alive(pid, pid_started)
    return now - last_sign <= STALE_AFTER


def reap(connect: Callable[..., AbstractContextManager[sqlite3.Connection]], now: float) -> dict[str, Ending]:
    """Mark the active local runs of the store that ``connect`` opens (``Store._db``) as ``interrupted``
    when their process is gone; return how each of them ended. A store this user may only read is left as
    recorded, and its readers show the runs as ended all the same (``shown_ended``): a dead run must not
    read ``running`` for ever in a colleague's store."""
    with connect() as db:
        rows = db.execute(
            "SELECT id, host, pid, pid_started, heartbeat, started, created FROM runs"
            f" WHERE status IN {sql_list(ACTIVE)} AND executor = ?",
            (ExecutorKind.LOCAL,),
        ).fetchall()
    dead: dict[str, tuple[float | None, Ending]] = {}  # id: the heartbeat judged by, and how the run ended
    for row in rows:
        last_sign = row["heartbeat"] or row["started"] or row["created"]
        if not owner_alive(row["host"], row["pid"], row["pid_started"], last_sign, now):
            error = INTERRUPTED_ERROR if row["started"] else NEVER_STARTED_ERROR
            dead[row["id"]] = (row["heartbeat"], Ending(error, last_sign))
    if not dead:
        return {}
    try:
        with connect(write=True) as db:
            for run_id, (heartbeat, ending) in dead.items():
                # Conditional on the heartbeat we judged by: a run that just beat is left alone.
                db.execute(
                    "UPDATE runs SET status = ?, error = ?, current_layer = NULL, finished = ? WHERE id = ?"
                    f" AND status IN {sql_list(ACTIVE)} AND heartbeat IS ?",
                    (RunStatus.INTERRUPTED, ending.error, ending.finished, run_id, heartbeat),
                )
    except ReadOnlyStore:  # a store this user may only read: its readers show the ending without recording it
        pass
    return {run_id: ending for run_id, (_, ending) in dead.items()}


def shown_ended(records: list[RunRecord], dead: dict[str, Ending]) -> list[RunRecord]:
    """``records`` with each run that ``reap`` found dead shown ``interrupted``, where the store still says
    it is active (a store this user may only read, which ``reap`` could not write)."""
    return [
        replace(
            r, status=RunStatus.INTERRUPTED, error=dead[r.id].error, finished=dead[r.id].finished, current_layer=None
        )
        if r.id in dead and r.active
        else r
        for r in records
    ]
