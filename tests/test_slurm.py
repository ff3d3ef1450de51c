"""Runs on a cluster through the door: submitit jobs report to their job folders and the store imports
them. The fast tests use submitit's local executor (the same job folders and jobs, as local processes);
``ACETUI_TEST_SLURM=1`` runs the same grid on a real one-node Slurm cluster started by the fixture."""

from __future__ import annotations

from pathlib import Path

import pytest
from runhelpers import GATE, cli, pilot_wait_until, wait_until

from acetui_core.basics.errors import UserError
from acetui_core.execution.jobfolder import sync
from acetui_core.execution.launch import Grid, launch
from acetui_core.execution.slurm import Slurm, minutes
from acetui_core.run.config import RunConfig
from acetui_core.storage.store import Store
from acetui_core.storage.store_schema import TERMINAL

pytest.importorskip("submitit")


LAYERS = 4  # the gated runs' model: a layer before the gate, the gated one, and layers a cancel must skip


def wait_until_ended(store: Store, run_ids: list[str], timeout: float = 240.0) -> list:
    """Import the job folders into the store until every run has ended; return the runs."""

    def ended():
        sync(store)
        runs = store.list_runs(ids=run_ids)
        return runs if all(run.status in TERMINAL for run in runs) else None

    return wait_until(ended, f"runs {run_ids} to end", timeout, every=0.5)


def gated_config(model: Path, calib_file: str) -> RunConfig:
    """A run the gate metric holds in layer 1 until it is cancelled (tests/gate_metric.py)."""
    return RunConfig(
        model=str(model),
        method=f"{GATE}:until_cancelled",
        sparsity="0.5",
        calib=calib_file,
        nsamples=4,
        seqlen=16,
        evals=[],
    )


@pytest.mark.parametrize("text, expected", [("120", 120), ("2:00:00", 120), ("1-00:00:00", 1440), ("90:30", 91)])
def test_slurm_time_limits(text, expected):
    assert minutes(text) == expected


def test_a_bad_time_limit_is_one_sentence():
    with pytest.raises(UserError, match="--time must be a Slurm time limit"):
        Slurm(time="two hours")


@pytest.mark.slow  # starts acetui processes of its own
def test_a_grid_through_submitit_reports_via_its_job_folders(tmp_path, make_tiny_model, calib_file):
    store = Store(tmp_path / "runs.db")
    grid = Grid(
        {"model": [str(make_tiny_model("llama"))], "method": ["wanda", "ace"], "sparsity": ["0.5"]},
        common={"calib": calib_file, "nsamples": 4, "eval_seqlen": 64, "eval_limit": 2},
    )
    run_ids = launch(grid.configs(), Slurm(cluster="local", gpus_per_job=0), store)
    queued = store.list_runs(ids=run_ids)
    assert [run.executor for run in queued] == ["slurm", "slurm"] and all(run.job for run in queued)
    runs = wait_until_ended(store, run_ids)
    assert [(run.status, run.layers_done, run.label) for run in runs] == [
        ("finished", 2, "Wanda-16"),
        ("finished", 2, "CosP+VarP-16"),
    ]
    assert all(run.results.ppl_wikitext2 > 1 and run.results.run_id == run.id for run in runs)
    assert all("layer 1 pruned (2/2 done)" in Path(run.env["log"]).read_text() for run in runs)
    assert sync(store) == 0  # everything was imported once


@pytest.mark.slow  # starts acetui processes of its own
def test_acetui_runs_cancel_stops_a_cluster_run_between_layers(
    tmp_path, make_tiny_model, calib_file, gate, monkeypatch, capsys
):
    store = Store(tmp_path / "runs.db")
    config = gated_config(make_tiny_model("llama", layers=LAYERS), calib_file)
    [run_id] = launch([config], Slurm(cluster="local", gpus_per_job=0), store)
    wait_until((gate / "waiting").exists, "the cluster run to reach the gate (its layer 0 done)", timeout=240)
    sync(store)  # what the job folder holds: the run is running, its layer 0 recorded
    assert (store.get_run(run_id, layers=False).status, store.get_run(run_id, layers=False).layers_done) == (
        "running",
        1,
    )
    code, out, _ = cli(monkeypatch, capsys, "runs", "cancel", run_id, "--store", store.path)
    assert code == 0 and "stops at its next check" in out
    [run] = wait_until_ended(store, [run_id])
    assert run.status == "cancelled" and 1 <= run.layers_done < LAYERS


@pytest.mark.slow  # starts acetui processes of its own
@pytest.mark.asyncio
async def test_the_apps_cancel_reaches_a_cluster_run(tmp_path, make_tiny_model, calib_file, gate):
    """The app's cancel set the store's flag alone, which a job on a node never reads: the run went on.
    It now goes through the cancel ``acetui runs cancel`` uses, the job folder's flag."""
    from acetui.app import make_app

    store = Store(tmp_path / "runs.db")
    config = gated_config(make_tiny_model("llama", layers=LAYERS), calib_file)
    [run_id] = launch([config], Slurm(cluster="local", gpus_per_job=0), store)
    wait_until((gate / "waiting").exists, "the cluster run to reach the gate (its layer 0 done)", timeout=240)
    sync(store)
    app = make_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f4")
        await pilot_wait_until(pilot, lambda: app.screen.check_action("cancel_run", ()), "the run, cancellable")
        await pilot.press("c", "y")  # cancel asks first
        await pilot_wait_until(pilot, lambda: store.cancel_requested(run_id), "the cancel asked")
    [run] = wait_until_ended(store, [run_id])
    assert run.status == "cancelled" and 1 <= run.layers_done < LAYERS


def test_a_preempted_and_requeued_cluster_run_finishes(slurm_cluster, tmp_path, make_tiny_model, calib_file, gate):
    """Preemption: Slurm sends the job SIGTERM, kills it and runs it again. The SIGTERM was heard as a
    stop, the run recorded cancelled, and the result of the requeued job, run to the end, was refused."""
    store = Store(tmp_path / "runs.db")
    executor = Slurm(partition=slurm_cluster.partition, gpus_per_job=1, time="10", folder=slurm_cluster.work_dir)
    # Held in layer 1 until cancelled or let go: a SIGTERM heard as a stop ends it within Slurm's KillWait.
    config = gated_config(make_tiny_model("llama", layers=LAYERS), calib_file)
    [run_id] = launch([config], executor, store)
    wait_until((gate / "waiting").exists, "the Slurm run to reach the gate (its layer 0 done)", timeout=240)
    slurm_cluster.run("scontrol", "requeue", store.get_run(run_id, layers=False).job["job_id"])
    (gate / "waiting").unlink()
    wait_until((gate / "waiting").exists, "the requeued job to reach the gate again", timeout=240)
    (gate / "open").touch()
    [run] = wait_until_ended(store, [run_id])
    assert (run.status, run.layers_done, run.error) == ("finished", LAYERS, None)


def test_a_two_run_grid_on_a_real_slurm_cluster(
    slurm_cluster, tmp_path, make_tiny_model, calib_file, gate, monkeypatch, capsys
):
    """The issue's check: a two-run grid through the door runs as one job array on a real Slurm, its
    progress shows in `acetui runs watch`, both results land in the store, and a job cancelled with
    `scancel` is marked cancelled."""
    store = Store(tmp_path / "runs.db")
    executor = Slurm(partition=slurm_cluster.partition, gpus_per_job=1, time="10", folder=slurm_cluster.work_dir)
    grid = Grid(
        {"model": [str(make_tiny_model("llama"))], "method": ["wanda", "ria"], "sparsity": ["0.5"]},
        common={"calib": calib_file, "nsamples": 4, "eval_seqlen": 64, "eval_limit": 2},
    )
    run_ids = launch(grid.configs(), executor, store)
    jobs = [run.job["job_id"] for run in store.list_runs(ids=run_ids)]
    assert [job.split("_")[1] for job in jobs] == ["0", "1"] and len({job.split("_")[0] for job in jobs}) == 1

    code, out, _ = cli(monkeypatch, capsys, "runs", "watch", run_ids[1], "--store", store.path, "--interval", "0.2")
    assert code == 0 and "layer 1 pruned (2/2 done)" in out and f"run {run_ids[1]} finished: ppl" in out
    runs = wait_until_ended(store, run_ids)
    assert [(run.status, run.layers_done) for run in runs] == [("finished", 2), ("finished", 2)]
    assert all(run.env.get("slurm_job_id") for run in runs)

    gated = gated_config(make_tiny_model("llama", layers=LAYERS), calib_file)
    [gated_id] = launch([gated], executor, store)
    wait_until((gate / "waiting").exists, "the Slurm run to reach the gate (its layer 0 done)", timeout=240)
    slurm_cluster.run("scancel", store.get_run(gated_id, layers=False).job["job_id"])
    [run] = wait_until_ended(store, [gated_id])
    assert run.status == "cancelled" and run.layers_done < LAYERS
