"""The Slurm executor: a grid of runs submitted as one job array through submitit.

Each job executes one run with a ``JobFolder`` recorder (``acetui_core.execution.jobfolder``): it writes its
events and log to the job folder on the shared file system, never to the user's SQLite store, which
imports them (``acetui runs sync``, ``acetui runs watch``, the app). ``acetui runs cancel`` leaves a flag
in the job folder, which stops the run between layers and records it cancelled, as Ctrl-C does on a
workstation. SIGTERM does not stop a run: Slurm sends it to preempt a job, and the job requeued then runs
again and finishes (submitit ignores it for that); a job cancelled with ``scancel`` alone is killed after
Slurm's KillWait and recorded cancelled by the next sync.
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from acetui_core.basics.choices import ExecutorKind, RunStatus
from acetui_core.basics.errors import Cancelled, UserError, first_line
from acetui_core.execution.jobfolder import JobFolder
from acetui_core.run.config import RunConfig
from acetui_core.storage.store import Store
from acetui_core.storage.store_files import JOB_FOLDER
from acetui_core.storage.store_rows import RunRecord

JOB_NAME = "acetui"


# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S.
_TIME = re.compile(r"(?:(?P<days>[0-9]+)-)?(?P<a>[0-9]+)(?::(?P<b>[0-9]+))?(?::(?P<c>[0-9]+))?")


def minutes(text: str) -> int:
    """A Slurm time limit in whole minutes (rounded up)."""
    value = str(text).strip()
    match = _TIME.fullmatch(value)
    if not match:
        raise UserError(f"--time must be a Slurm time limit such as 120, 2:00:00 or 1-00:00:00, not '{value}'.")
    days, a, b, c = (int(group or 0) for group in match.group("days", "a", "b", "c"))
    if match.group("days") is not None:  # D-H[:M[:S]]
        seconds = ((days * 24 + a) * 60 + b) * 60 + c
    elif match.group("c") is not None:  # H:M:S
        seconds = (a * 60 + b) * 60 + c
    else:  # M[:S]
        seconds = a * 60 + b
    if seconds < 60:
        raise UserError(f"--time must be at least one minute, not '{value}'.")
    return -(-seconds // 60)


@dataclass
class Slurm:
    """Submit the runs as one job array; ``folder`` holds the job folders (default: beside the store)."""

    partition: str | None = None
    gpus_per_job: int = 1
    time: str = "2:00:00"
    folder: Path | None = None
    cluster: str = "slurm"  # submitit's cluster; "local" runs the same jobs as local processes (tests)
    kind: ExecutorKind = ExecutorKind.SLURM
    local_device: bool = False  # a GPU is needed on the node, not here

    def __post_init__(self) -> None:
        self.timeout_min = minutes(self.time)
        try:
            import submitit  # noqa: F401  (checked here, before any run is recorded)
        except ImportError:
            raise UserError("--executor slurm needs submitit (pip install submitit).") from None
        missing = [tool for tool in ("sbatch", "srun") if self.cluster == "slurm" and shutil.which(tool) is None]
        if missing:
            raise UserError(
                f"--executor slurm needs Slurm's {' and '.join(missing)} on the PATH, and this machine has "
                "none; submit from a cluster's login node, or use --executor local."
            )

    def start(self, store: Store, run_ids: list[str]) -> None:
        import submitit

        folder = (self.folder or store.folder / JOB_FOLDER) / f"{time.strftime('%Y%m%d-%H%M%S')}-{run_ids[0]}"
        folder.mkdir(parents=True, exist_ok=True)
        parameters = {
            "name": JOB_NAME,
            "timeout_min": self.timeout_min,
            "slurm_array_parallelism": len(run_ids),
            "gpus_per_node": self.gpus_per_job,
            "tasks_per_node": 1,
            "nodes": 1,
        }
        if self.cluster == "local":
            parameters = {"timeout_min": self.timeout_min, "gpus_per_node": self.gpus_per_job}
        if self.partition:
            parameters["slurm_partition"] = self.partition
        runs = store.list_runs(ids=run_ids)
        try:
            executor = submitit.AutoExecutor(folder=folder / "%j", cluster=self.cluster)
            executor.update_parameters(**parameters)
            # submitit prints sbatch's complaint itself before raising it: the user gets it once, in our sentence
            with contextlib.redirect_stderr(io.StringIO()), executor.batch():  # one job array for the grid
                jobs = [executor.submit(run_job, str(folder), run.id, run.config.to_dict()) for run in runs]
        except (subprocess.CalledProcessError, OSError, RuntimeError) as error:  # submitit's errors are RuntimeErrors
            for run in runs:
                store.set_status(run.id, RunStatus.FAILED, error=f"Slurm refused the job array: {first_line(error)}")
            raise UserError(
                f"Slurm refused the job array ({first_line(error)}); its runs are recorded failed."
            ) from None
        recorder = JobFolder(folder)
        for run, job in zip(runs, jobs, strict=False):
            store.set_job(
                run.id, {"job_id": str(job.job_id), "folder": str(folder), "imported": 0, "cluster": self.cluster}
            )
            store.update_env(run.id, log=str(recorder.log_path(run.id)))


def run_job(folder: str, run_id: str, config: dict) -> RunStatus:
    """What one job of the array executes on its node: the run, recorded in the job folder."""
    from acetui_core.execution.heartbeat import Stop
    from acetui_core.execution.runner import execute

    recorder = JobFolder(Path(folder))
    try:
        # A stop of its own, heard from the cancel flag alone: SIGTERM keeps submitit's handler, which
        # ignores it. Heard as a stop, a preemption recorded the run cancelled, and the result of the
        # job that Slurm requeued and ran to the end was refused.
        execute(recorder, run_id, RunConfig.from_dict(config), log=recorder.log_path(run_id), stop=Stop())
    except (Cancelled, KeyboardInterrupt):
        return RunStatus.CANCELLED
    except Exception:
        return RunStatus.FAILED
    return RunStatus.FINISHED


def stop_job(run: RunRecord) -> None:
    """Tell a Slurm run to stop: the flag in its job folder, which the job sees within a second and stops
    at its next check (``kill.WHEN_IT_STOPS``); a job still waiting in the queue is taken out of it (``scancel``; a
    signal alone leaves a pending job queued, to start later only to stop)."""
    if run.job is None:
        return
    JobFolder(Path(run.job["folder"])).cancel_path(run.id).touch()
    if run.status != RunStatus.QUEUED:
        return
    try:
        subprocess.run(["scancel", run.job["job_id"]], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        pass  # no Slurm here (submitit's local cluster): the flag alone stops the run
