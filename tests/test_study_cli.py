"""What ``acetui study`` says: a cell of a method without calibration data in words, a folder named where a
study file goes, and a stop that cancelled the study's queue (the runs themselves are test_study.py's)."""

from __future__ import annotations

from pathlib import Path

import pytest
from runhelpers import cli, stopped_by_sigterm

from acetui.commands import study as study_command
from acetui_core.storage.store import Store

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
