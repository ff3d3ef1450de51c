"""A cluster job's side of the run store: each job reports to its job folder, never to the user's SQLite
file (which must not be written over a network file system), and the store imports what the folder holds.

A job folder holds, per run, ``<run id>.events.jsonl`` (one JSON object per line: the run's claim, its
heartbeats, its pipeline events and how it ended), ``<run id>.log`` (the run's log) and, when someone
asked the run to stop, ``<run id>.cancel``. ``JobFolder`` is the recorder a job hands to
``acetui_core.execution.runner.execute``; ``sync`` imports the new lines of every active Slurm run into the store,
so ``acetui runs watch``, ``acetui runs sync`` and the app show cluster runs live.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from acetui_core.basics.choices import ExecutorKind, RunStatus
from acetui_core.basics.errors import UserError
from acetui_core.run.events import Event, event_from_dict, event_to_dict
from acetui_core.storage import liveness
from acetui_core.storage.store import Store

ENDED_WITHOUT_FINISHING = "The Slurm job {job} ended without finishing ({state})."
STILL_THERE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}


class JobFolder:
    """The recorder of runs executing in a cluster job: appends to the run's events file."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def events_path(self, run_id: str) -> Path:
        return self.folder / f"{run_id}.events.jsonl"

    def log_path(self, run_id: str) -> Path:
        return self.folder / f"{run_id}.log"

    def masks_path(self, run_id: str) -> Path:
        """Where the run keeps its masks (``--keep-masks``)."""
        return self.folder / f"{run_id}.masks.npz"

    def cancel_path(self, run_id: str) -> Path:
        return self.folder / f"{run_id}.cancel"

    def _append(self, run_id: str, entry: dict) -> None:
        # One write of one whole line: a reader never sees half an entry it would then skip.
        line = json.dumps({"at": time.time(), **entry}) + "\n"
        with open(self.events_path(run_id), "a", encoding="utf-8") as events:
            events.write(line)

    def claim(self, run_id: str, env: dict | None = None) -> None:
        self._append(run_id, {"what": "claim", "env": env or {}, "pid": os.getpid(), "host": liveness.HOST})

    def heartbeat(self, run_id: str, resources: dict | None = None) -> bool:
        self._append(run_id, {"what": "heartbeat", "resources": resources})
        return self.cancel_requested(run_id)

    def cancel_requested(self, run_id: str) -> bool:
        return self.cancel_path(run_id).exists()

    def record_event(self, run_id: str, event: Event) -> None:
        self._append(run_id, {"what": "event", "event": event_to_dict(event)})

    def set_status(self, run_id: str, status: RunStatus, error: str | None = None) -> bool:
        self._append(run_id, {"what": "status", "status": status, "error": error})
        return True


def _apply(store: Store, run_id: str, entry: dict) -> None:
    what = entry.get("what")
    if what == "claim":
        try:
            store.claim(run_id, entry.get("env"), pid=entry.get("pid"), host=entry.get("host"), when=entry.get("at"))
        except UserError:
            pass  # already claimed: this line was imported before an interrupted sync recorded its offset
    elif what == "heartbeat":
        store.heartbeat(run_id, entry.get("resources"), when=entry.get("at"))
    elif what == "event":
        store.record_event(run_id, event_from_dict(entry["event"]))
    elif what == "status":
        store.set_status(run_id, RunStatus(entry["status"]), entry.get("error"))


def import_run(store: Store, run_id: str, job: dict) -> int:
    """Import the new complete lines of one run's events file; return how many."""
    path = JobFolder(Path(job["folder"])).events_path(run_id)
    if not path.exists():
        return 0
    with open(path, "rb") as events:
        events.seek(job.get("imported", 0))
        data = events.read()
    complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits for the next sync
    lines = [line for line in complete.decode("utf-8").splitlines() if line.strip()]
    for line in lines:
        _apply(store, run_id, json.loads(line))
    if complete:
        store.set_job(run_id, {**job, "imported": job.get("imported", 0) + len(complete)})
    return len(lines)


def queued_jobs(job_ids: list[str]) -> set[str] | None:
    """Which of the jobs the Slurm controller still runs or queues (``squeue``), or None when it cannot be
    asked from here (no Slurm commands, no controller): then nothing is judged."""
    if not job_ids:
        return set()
    try:
        # -r: one line per array task (a pending array is otherwise one line, "12_[0-1]")
        done = subprocess.run(
            ["squeue", "-h", "-r", "-o", "%i %T", "-j", ",".join(job_ids)], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 and "Invalid job id" not in done.stderr:
        return None
    return {line.split()[0] for line in done.stdout.splitlines() if line.strip()}


def _job_alive(job: dict, queued: set[str] | None) -> bool | None:
    """Whether a job may still report: True, False, or None when it cannot be told."""
    if job.get("cluster") == "local":  # submitit's local cluster: the job id is the process id
        return liveness.process_alive(int(job["job_id"]), None)
    return None if queued is None else job["job_id"] in queued


def ended_state(job_id: str) -> str:
    """How a job that left the queue ended (``CANCELLED``, ``TIMEOUT``, ``OUT_OF_MEMORY``...), as the
    controller still remembers it for a few minutes (``scontrol``), or ``UNKNOWN``."""
    try:
        done = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "UNKNOWN"
    for field in done.stdout.split():
        if field.startswith("JobState="):
            return field.removeprefix("JobState=")
    return "UNKNOWN"


def sync(store: Store) -> int:
    """Import every active Slurm run's new events; a run whose job is gone without saying how it ended is
    marked cancelled (when a cancel was asked) or interrupted. Returns the number of events imported."""
    jobs = {run.id: run.job for run in store.list_runs(active_on=ExecutorKind.SLURM) if run.job}
    imported = sum(import_run(store, run_id, job) for run_id, job in jobs.items())
    still = {run.id: run for run in store.list_runs(active_on=ExecutorKind.SLURM) if run.id in jobs and run.job}
    queued = queued_jobs([run.job["job_id"] for run in still.values() if run.job and run.job.get("cluster") != "local"])
    for run in still.values():
        job = run.job or {}
        if _job_alive(job, queued) is not False:
            continue
        imported += import_run(store, run.id, job)  # its last words, if it had time to write them
        state = ended_state(job["job_id"])
        if state in STILL_THERE:  # squeue and scontrol disagree for a moment: ask again next time
            continue
        if state == "CANCELLED" or run.cancel_requested:
            store.set_status(run.id, RunStatus.CANCELLED, error=f"The Slurm job {job['job_id']} was cancelled.")
        else:
            store.set_status(
                run.id, RunStatus.INTERRUPTED, error=ENDED_WITHOUT_FINISHING.format(job=job["job_id"], state=state)
            )
    return imported
