"""The one-node Slurm test cluster works with plain submitit, as acetui's Slurm executor will use it.

Runs only with ACETUI_TEST_SLURM=1 (see tests/slurm_cluster.py); skipped otherwise.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
import slurm_cluster as cluster_module
from runhelpers import wait_until
from slurm_cluster import KILL_WAIT_S, SlurmCluster

# sacct states of a job not finished yet (submitit's list).
UNFINISHED = {"READY", "PENDING", "RUNNING", "UNKNOWN", "REQUEUED", "COMPLETING", "PREEMPTED"}


def square_on_a_gpu(x: int) -> tuple[int, str, str, str]:
    return (
        x * x,
        os.environ["SLURM_ARRAY_JOB_ID"],
        os.environ["SLURM_ARRAY_TASK_ID"],
        os.environ["CUDA_VISIBLE_DEVICES"],
    )


def wait_for_sigterm(folder: str) -> str:
    """Mark the start, then sleep; on SIGTERM note it and exit as a terminated process does."""

    def on_sigterm(signum, frame):
        Path(folder, "sigterm").write_text(str(time.time()))
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_sigterm)  # replaces submitit's handler, which ignores SIGTERM
    Path(folder, "started").write_text(str(time.time()))
    time.sleep(300)
    return "never cancelled"


def beat_until_killed(folder: str) -> None:
    """Write the time every 0.1 s, under submitit's own signal handlers, until the process dies."""
    beat, draft = Path(folder, "heartbeat"), Path(folder, "heartbeat.draft")
    while True:
        draft.write_text(str(time.time()))
        draft.replace(beat)  # atomic, so the test never reads a half-written beat
        time.sleep(0.1)


def test_missing_slurm_binaries_are_named_with_the_script_that_installs_them(monkeypatch, tmp_path):
    monkeypatch.setattr(cluster_module, "SEARCH_PATH", str(tmp_path))  # a folder with no binaries

    problem = cluster_module.missing_requirements()

    assert problem.startswith(
        "the Slurm test cluster needs mungekey, munged, mariadb-install-db, mariadbd, "
        "slurmdbd, slurmctld, slurmd, sinfo, squeue, sbatch, sacct, scancel"
    )
    assert problem.endswith(": run .ci/slurm-deps (as root)")


def test_a_job_array_of_two_functions_returns_both_results(slurm_cluster, request):
    executor = make_executor(slurm_cluster, request.node.name, gpus_per_node=1)

    jobs = executor.map_array(square_on_a_gpu, [3, 4])

    array_id = jobs[0].job_id.split("_")[0]
    assert [job.job_id for job in jobs] == [f"{array_id}_0", f"{array_id}_1"]
    results = [job.result() for job in jobs]
    assert [result[:3] for result in results] == [(9, array_id, "0"), (16, array_id, "1")]
    assert all(result[3] in {"0", "1"} for result in results)  # one of the node's two counted GPUs each
    assert [final_state(job) for job in jobs] == ["COMPLETED", "COMPLETED"]


def test_scancel_sends_sigterm_to_the_function_and_leaves_the_job_cancelled(slurm_cluster, request):
    from submitit.core.utils import UncompletedJobError

    executor = make_executor(slurm_cluster, request.node.name)
    marks = executor.folder / "marks"
    marks.mkdir(parents=True)
    job = executor.submit(wait_for_sigterm, str(marks))
    wait_for_file(marks / "started")

    slurm_cluster.run("scancel", job.job_id)

    wait_for_file(marks / "sigterm")
    assert final_state(job) == "CANCELLED by 0"  # by uid 0, root
    assert job.done()
    # With no result pickle, result() waits 15 s for one (submitit's allowance for slow file systems), then:
    with pytest.raises(UncompletedJobError, match=r"has not produced any output \(state: CANCELLED by 0\)"):
        job.result()
    assert not job.paths.result_pickle.exists()
    assert f"*** JOB {job.job_id} ON" in job.stderr() and "CANCELLED AT" in job.stderr()


def test_scancel_kills_a_function_that_keeps_submitits_handlers_after_kill_wait(slurm_cluster, request):
    executor = make_executor(slurm_cluster, request.node.name)
    marks = executor.folder / "marks"
    marks.mkdir(parents=True)
    job = executor.submit(beat_until_killed, str(marks))
    wait_for_file(marks / "heartbeat")

    slurm_cluster.run("scancel", job.job_id)
    cancelled_at = time.time()

    assert final_state(job) == "CANCELLED by 0"  # at once, while the function still runs
    # sacct first gives the step exit code 0:0, then 0:9 (SIGKILL) when the kill comes, KillWait s later.
    deadline = time.monotonic() + KILL_WAIT_S + 60
    while step_exit_code(slurm_cluster, job.job_id) != "0:9" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert step_exit_code(slurm_cluster, job.job_id) == "0:9"
    last_beat = (marks / "heartbeat").read_text()
    time.sleep(0.5)
    assert (marks / "heartbeat").read_text() == last_beat  # dead
    assert float(last_beat) - cancelled_at > KILL_WAIT_S / 2  # but it went on after the SIGTERM
    assert "Bypassing signal SIGTERM" in job.stdout()


def make_executor(cluster: SlurmCluster, name: str, **parameters):
    """A submitit executor on the cluster's partition, its job folder under the cluster's work folder."""
    import cloudpickle
    import submitit

    # This module is not importable inside the job (tests/ is not on its path): send its functions by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    executor = submitit.SlurmExecutor(folder=cluster.work_dir / name)
    executor.update_parameters(partition=cluster.partition, time=5, cpus_per_task=1, **parameters)
    return executor


def final_state(job, timeout: float = 60) -> str:
    """The job's sacct state once finished (accounting lags the job by about a second)."""

    def finished():
        state = job.get_info(mode="force").get("State", "UNKNOWN")
        return state if state not in UNFINISHED else None

    return wait_until(finished, f"job {job.job_id} to finish", timeout, every=0.5)


def step_exit_code(cluster: SlurmCluster, job_id: str) -> str:
    """sacct's "exit code:signal" of the job's first step (the srun running the function); "" before it starts."""
    lines = cluster.run("sacct", "--jobs", job_id, "--format=JobID,ExitCode", "--parsable2", "--noheader").splitlines()
    codes = dict(line.split("|") for line in lines)
    return codes.get(f"{job_id}.0", "")


def wait_for_file(path: Path, timeout: float = 60) -> None:
    wait_until(path.exists, f"{path} to appear", timeout)
