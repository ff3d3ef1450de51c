"""Stopping runs: a cancel request (``cancel``), and force-stopping a run whose process ignores one (stuck
in a kernel, a hung data loader).

Cancel is the polite way: the run stops between layers and keeps them. A force kill ends the run's
local worker process at once (SIGKILL, its children too); the run, and every other run that process
had taken or queued, is recorded as cancelled with the reason, before the process goes, so the store
never shows a state the process did not reach.
"""

from __future__ import annotations

import os

import psutil

from acetui_core.basics.choices import ExecutorKind, RunStatus
from acetui_core.basics.errors import UserError
from acetui_core.storage.liveness import HOST
from acetui_core.storage.store import Store
from acetui_core.storage.store_rows import RunRecord

KILLED = "Force-killed on request (its process did not stop when asked to cancel); the layers done are kept."


# When a running run that was asked to stop does so (``errors.check_stop``'s places): not only between
# layers, since a layer's calibration or the evaluation after the last layer can take minutes.
WHEN_IT_STOPS = "it stops at its next check: between calibration batches, layers or evaluation batches"


def cancel(store: Store, run_id: str) -> RunStatus:
    """Ask a run to stop, wherever it runs: a queued run is cancelled at once, a running one stops at its
    next check (``WHEN_IT_STOPS``); a Slurm run is told through its job folder, since its job cannot read the store
    (``acetui_core.execution.slurm.stop_job``). Returns the status the run has now (``Store.request_cancel``)."""
    run = store.get_run(store.resolve_to_change(run_id, "cancel"), layers=False)
    if run.active and run.executor == ExecutorKind.SLURM:
        from acetui_core.execution.slurm import stop_job

        stop_job(run)
    return store.request_cancel(run.id)


def process_runs(store: Store, run: RunRecord) -> list[RunRecord]:
    """The active runs owned by ``run``'s process (a comparison's worker takes them one after another)."""
    return [r for r in store.list_runs() if r.active and r.host == run.host and r.pid == run.pid]


def check_killable(store: Store, run_id: str) -> RunRecord:
    """The run, if a force kill can end it from here; one sentence (UserError) otherwise."""
    run = store.get_run(run_id, layers=False)  # reaps first: a dead or reused pid has ended the run
    if not run.active:
        raise UserError(f"Run {run.id} has already ended ({run.status}); there is nothing to kill.")
    if run.executor != ExecutorKind.LOCAL:
        job = (run.job or {}).get("job_id", "?")
        raise UserError(f"Run {run.id} is Slurm job {job}; end it with scancel {job}.")
    if run.pid is None:
        raise UserError(f"Run {run.id} is {run.status} and no process has taken it yet: cancel it instead.")
    if run.host != HOST:
        raise UserError(f"Run {run.id} runs on {run.host}; kill process {run.pid} there.")
    if run.pid == os.getpid():
        raise UserError(f"Run {run.id} runs in this very process; press Ctrl-C where it was started.")
    return run


def force_kill(store: Store, run_id: str) -> list[str]:
    """SIGKILL the run's local process and its children; returns the ids of the runs recorded as cancelled
    (the run first). UserError when the run cannot be killed from here."""
    run = check_killable(store, run_id)
    try:
        process = psutil.Process(run.pid)
        family = [*process.children(recursive=True), process]
        if process.uids().real != os.getuid() and os.getuid() != 0:
            raise UserError(f"Run {run.id}'s process {run.pid} belongs to another user; it cannot be killed from here.")
    except psutil.NoSuchProcess:
        family = []  # it ended meanwhile: the store's reaper records it
    victims = [run, *(r for r in process_runs(store, run) if r.id != run.id)]
    cancelled = [r.id for r in victims if store.set_status(r.id, RunStatus.CANCELLED, error=KILLED)]
    for member in family:
        try:
            member.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(family, timeout=5)
    return cancelled
