"""What ``acetui study`` says: a cell of a method without calibration data in words, a folder named where a
study file goes, a stop that cancelled the study's queue, and one that came while it only checked or waited
and cancelled nothing (the runs themselves are test_study.py's)."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest
from runhelpers import cli, stopped_by_sigterm

from acetui.commands import study as study_command
from acetui_core.storage.store import Store
from acetui_core.studies.study import load_study

QUICK = 'nsamples = 4\neval_seqlen = 32\neval_limit = 2\ndevice = "cpu"\n'


def _study(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_status_says_a_magnitude_cell_reads_no_calibration(tmp_path, monkeypatch, capsys, make_tiny_model, calib_file):
    """It read ``FILE, seed 0, nsamples 128`` (settings a magnitude run never uses), where acetui runs shows
    ``-``."""
    model = make_tiny_model("llama")
    study = _study(
        tmp_path / "s.toml",
        f'model = "{model}"\nmethod = ["magnitude", "wanda"]\nseed = [0, 1]\nnsamples = [4, 8]\n'
        f'calib = "{calib_file}"\n{QUICK.replace("nsamples = 4", "")}',
    )
    Store(tmp_path / "runs.db")  # an empty store: status only reads one
    code, out, err = cli(monkeypatch, capsys, "study", "status", str(study), "--store", str(tmp_path / "runs.db"))
    assert code == 0, err
    lines = [line.split(None, 2)[2] for line in out.splitlines()]  # after the state and the run's id
    assert lines == [
        f"Magnitude at 0.5 on {model.name}, no calibration",  # once, whatever the seeds and sample counts
        *(f"Wanda-16 at 0.5 on {model.name}, {calib_file}, seed {s}, nsamples {n}" for s in (0, 1) for n in (4, 8)),
    ]


def test_status_of_a_gpu_study_reads_on_a_machine_without_one(tmp_path, monkeypatch, capsys, make_tiny_model):
    """Its cells were checked as for a run here: "--device cuda was asked for, but torch sees no CUDA GPU"
    (exit 2), though a status reads the store alone (the study ran on a GPU machine)."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    study = _study(tmp_path / "s.toml", f'model = "{make_tiny_model("llama")}"\ndevice = "cuda"\n')
    Store(tmp_path / "runs.db")
    code, out, err = cli(monkeypatch, capsys, "study", "status", str(study), "--store", str(tmp_path / "runs.db"))
    assert (code, err.splitlines()[-1]) == (0, "0 done, 0 running, 0 failed, 0 interrupted, 1 missing of 1 cells.")
    code, _, err = cli(monkeypatch, capsys, "study", "run", str(study), "--store", str(tmp_path / "runs.db"))
    assert code == 2 and "torch sees no CUDA GPU" in err, err


@pytest.mark.parametrize("command", ["run", "status", "report"])
def test_a_folder_is_not_a_study_file(tmp_path, monkeypatch, capsys, command):
    """It was said not to exist."""
    Store(tmp_path / "runs.db")
    extra = ["-o", str(tmp_path / "report")] if command == "report" else []
    code, out, err = cli(monkeypatch, capsys, "study", command, str(tmp_path), *extra, "--store", tmp_path / "runs.db")
    assert (code, out) == (2, "")
    assert err == f"acetui: {tmp_path} is a folder, not a study file; name the study's TOML file.\n"


def test_a_stopped_study_says_how_many_runs_were_cancelled(tmp_path, monkeypatch, capsys, make_tiny_model, calib_file):
    """SIGTERM while the first of three cells ran: every cell's run is cancelled (the queued ones "before this
    run started"), and the CLI said "the run is recorded as cancelled", as if one were."""
    model = make_tiny_model("llama")
    study = _study(
        tmp_path / "s.toml", f'model = "{model}"\nsparsity = ["0.5", "4:8", "2:4"]\ncalib = "{calib_file}"\n{QUICK}'
    )

    args = ("study", "run", str(study), "--store", str(tmp_path / "runs.db"))
    code, _, err = stopped_by_sigterm(monkeypatch, capsys, study_command, *args)
    assert code == 143
    assert err.splitlines()[-1] == (
        "acetui: stopped; 3 runs are recorded as cancelled: those under way and those still queued "
        "(acetui runs lists them)."
    )
    assert [run.status for run in Store(tmp_path / "runs.db").list_runs()] == ["cancelled"] * 3


def test_a_cell_that_finished_as_the_study_was_stopped_is_printed(
    tmp_path, monkeypatch, capsys, make_tiny_model, calib_file
):
    """SIGTERM as the first of three cells finished: its line was never printed (a cell's line came with the
    next run's first event, which the stop never sent), though the store held it finished. It is printed;
    the cancelled ones are not cells that ended."""
    import signal

    from acetui_core.basics.errors import Cancelled
    from acetui_core.execution.launch import InProcess, queue

    model = make_tiny_model("llama")
    study = _study(
        tmp_path / "s.toml", f'model = "{model}"\nsparsity = ["0.5", "4:8", "2:4"]\ncalib = "{calib_file}"\n{QUICK}'
    )
    run_the_first = study_command.run_and_wait

    def first_finished_then_stopped(configs, store, executor, *, on_event, **_):
        finished, _ = run_the_first(configs[:1], store, executor, on_event=on_event, checked=True)
        cancelled = queue(configs[1:], store, InProcess(), checked=True)
        for run_id in cancelled:
            store.request_cancel(run_id)
        return finished + cancelled, Cancelled("before this run started", signum=signal.SIGTERM)

    monkeypatch.setattr(study_command, "run_and_wait", first_finished_then_stopped)
    handler = signal.getsignal(signal.SIGINT)  # the CLI ignores a further Ctrl-C as it exits
    try:
        code, _, err = cli(monkeypatch, capsys, "study", "run", str(study), "--store", str(tmp_path / "runs.db"))
    finally:
        signal.signal(signal.SIGINT, handler)
    assert code == 143, err
    [line] = [line for line in err.splitlines() if line.startswith("[")]
    assert line.startswith(f"[1/3] CosP+VarP-16 at 0.5 on {model.name}, ") and " finished: ppl " in line
    assert err.splitlines()[-1].startswith("acetui: stopped; 2 runs are recorded as cancelled")
    assert [run.status for run in Store(tmp_path / "runs.db").list_runs()].count("finished") == 1


@pytest.mark.parametrize("as_json", [False, True])
def test_status_before_the_first_run_lists_every_cell_missing_and_makes_no_store(
    tmp_path, monkeypatch, capsys, make_tiny_model, calib_file, as_json
):
    """It exited 2, "There is no run store", where the study's cells are simply all missing."""
    import json

    model = make_tiny_model("llama")
    study = _study(
        tmp_path / "s.toml", f'model = "{model}"\nsparsity = ["0.5", "2:4"]\ncalib = "{calib_file}"\n{QUICK}'
    )
    store = tmp_path / "new" / "runs.db"
    code, out, err = cli(
        monkeypatch, capsys, "study", "status", str(study), "--store", str(store), *["--json"] * as_json
    )
    assert code == 0, err
    if as_json:
        assert [(row["state"], row["run"], row["config"]["sparsity"]) for row in json.loads(out)] == [
            ("missing", None, "0.5"),
            ("missing", None, "2:4"),
        ]
    else:
        assert [line.split(None, 2)[:2] for line in out.splitlines()] == [["missing", "-"]] * 2
        assert err.endswith("0 done, 0 running, 0 failed, 0 interrupted, 2 missing of 2 cells.\n")
    assert f"No run store at {store} yet" in err
    assert not (tmp_path / "new").exists()


@contextmanager
def _sigterm_kept_from_pytest():
    """SIGTERM's default would end pytest itself where no handler of the command takes it."""

    def unheard(signum, frame):
        raise AssertionError("SIGTERM reached no handler of the command: by default it ends acetui without a word")

    previous = signal.signal(signal.SIGTERM, unheard)
    previous_int = signal.getsignal(signal.SIGINT)  # the CLI ignores a further Ctrl-C as it exits
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_study_stopped_while_it_waits_for_another_process_says_nothing_was_cancelled(
    tmp_path, monkeypatch, capsys, make_tiny_model, calib_file, signum
):
    """Ctrl-C while `study run` waited for a cell another process runs said "a run in progress is recorded as
    cancelled", though that run went on and nothing was cancelled; SIGTERM ended it without a word."""
    model = make_tiny_model("llama")
    study = _study(tmp_path / "s.toml", f'model = "{model}"\ncalib = "{calib_file}"\n{QUICK}')
    store = Store(tmp_path / "runs.db")
    [cell] = load_study(study).cells(store.path)
    elsewhere = store.create_run(cell)
    store.claim(elsewhere)  # by this live process: the cell is running, and waited for
    polled = study_command.StudyProgress.poll

    def poll_then_stop(progress, run_ids, **kwargs):
        ended = polled(progress, run_ids, **kwargs)
        os.kill(os.getpid(), signum)  # while it waits: the signal's handler runs as this returns
        return ended

    monkeypatch.setattr(study_command.StudyProgress, "poll", poll_then_stop)
    with _sigterm_kept_from_pytest():
        code, _, err = cli(monkeypatch, capsys, "study", "run", str(study), "--store", str(store.path))
    assert code == 128 + signum, err
    assert err.splitlines()[-1] == (
        f"acetui: stopped while waiting for 1 run under way elsewhere, which go on (acetui study status {study}); "
        "no run is recorded as cancelled."
    )
    assert [run.status for run in store.list_runs()] == ["running"]


def test_a_study_stopped_while_it_waits_for_the_lock_says_it_started_no_run(
    tmp_path, monkeypatch, capsys, make_tiny_model, calib_file
):
    """Ctrl-C during `study run --wait`, waiting for another study run to end, said "a run in progress is
    recorded as cancelled" before it had started any."""
    from test_study import _hold_lock

    from acetui_core.studies import studylock

    study = _study(tmp_path / "s.toml", f'model = "{make_tiny_model("llama")}"\ncalib = "{calib_file}"\n{QUICK}')
    holder = _hold_lock(tmp_path / "runs.db", tmp_path / "another.toml")
    tried = studylock._try_lock

    def try_then_stop(fd):
        taken = tried(fd)
        if not taken:  # the wait has begun
            os.kill(os.getpid(), signal.SIGINT)
        return taken

    monkeypatch.setattr(studylock, "_try_lock", try_then_stop)
    try:
        with _sigterm_kept_from_pytest():
            args = ("study", "run", str(study), "--store", str(tmp_path / "runs.db"), "--wait")
            code, _, err = cli(monkeypatch, capsys, *args)
    finally:
        holder.kill()
        holder.wait()
    assert code == 130, err
    assert err.splitlines()[-1] == "acetui: stopped before it started a run; no run is recorded as cancelled."
    assert Store(tmp_path / "runs.db").list_runs() == []


def test_a_study_stopped_while_its_cells_are_checked_says_it_started_no_run(
    tmp_path, monkeypatch, capsys, make_tiny_model, calib_file
):
    """SIGTERM while the study checked its model's files was told as a problem of the model ("could not be
    loaded as a model"), exit 2: the check turns any error of the files into its own sentence."""
    from transformers import AutoConfig

    from acetui_core.modeling import preflight

    study = _study(tmp_path / "s.toml", f'model = "{make_tiny_model("llama")}"\ncalib = "{calib_file}"\n{QUICK}')
    read = AutoConfig.from_pretrained

    def stopped_while_read(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return read(*args, **kwargs)

    monkeypatch.setattr(AutoConfig, "from_pretrained", stopped_while_read)
    preflight._preflight.cache_clear()  # the model is checked afresh, not from an earlier test's check
    with _sigterm_kept_from_pytest():
        code, _, err = cli(monkeypatch, capsys, "study", "run", str(study), "--store", str(tmp_path / "runs.db"))
    assert (code, err) == (143, "acetui: stopped before it started a run; no run is recorded as cancelled.\n")
