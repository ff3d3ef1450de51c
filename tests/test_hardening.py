"""Issue 22, one test per cause, written as the user met it: the command and its input, its exit code, its
one sentence, and that nothing was lost or falsely recorded."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from runhelpers import cli as run_cli

from acetui_core.storage.store import Store

QUICK = ["--method", "magnitude", "--eval", "none", "--device", "cpu"]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def cli(monkeypatch, capsys, *args):
    capsys.readouterr()  # what building the fixtures printed
    return run_cli(monkeypatch, capsys, *args)


def _prune(monkeypatch, capsys, store: Path, *args: str):
    return cli(monkeypatch, capsys, "prune", *args, "--store", str(store))


def _one_sentence(code: int, err: str, fragment: str) -> None:
    assert code == 2, err
    assert err.startswith("acetui: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert fragment in err, err


# ---- 1. a save into, over or around what the run reads or keeps ------------------------------------------


def _linked_model(tmp_path: Path, model: Path) -> Path:
    """The model copied to a folder of the user's, reached through a symbolic link."""
    folder = tmp_path / "models" / "tiny"
    shutil.copytree(model, folder)
    link = tmp_path / "link"
    link.symlink_to(folder)
    return link


SAVE_TARGETS = {  # --save target -> (--overwrite, the sentence's fragment)
    "the source model": ("{model}", True, "is the source model"),
    "the source model through its link": ("{real}", True, "is the source model"),
    "a folder holding the source model": ("{models}", True, "holds the source model"),
    "a folder inside the source model": ("{model}/pruned", False, "lies inside the source model"),
    "the data folder": ("{data}", True, "is the data folder"),
    "a folder inside the data folder": ("{data}/pruned", False, "lies inside the data folder"),
    "the store's folder": ("{store_folder}", True, "holds the run store"),
    "the store's logs": ("{store_folder}/logs/pruned", False, "lies inside a folder of the run store"),
}


@pytest.mark.parametrize("case", list(SAVE_TARGETS))
def test_a_save_over_what_the_run_reads_or_keeps_is_refused_before_any_work(
    case, make_tiny_model, tmp_path, monkeypatch, capsys
):
    model = _linked_model(tmp_path, make_tiny_model("llama"))
    data = tmp_path / "data"
    shutil.copytree(os.environ["ACETUI_DATA_DIR"], data, symlinks=True)
    monkeypatch.setenv("ACETUI_DATA_DIR", str(data))
    store = tmp_path / "store" / "runs.db"
    Store(store).check_log_folder()
    places = {
        "model": model,
        "real": model.resolve(),
        "models": model.resolve().parent,
        "data": data,
        "store_folder": store.parent,
    }
    target, overwrite, fragment = SAVE_TARGETS[case]
    before = {folder: _files(folder) for folder in (model.resolve(), store.parent)}
    args = [str(model), *QUICK, "--save", target.format(**places), *(["--overwrite"] if overwrite else [])]
    code, out, err = _prune(monkeypatch, capsys, store, *args)
    _one_sentence(code, err, fragment)
    assert Store(store).list_runs() == []  # refused before anything was recorded
    after = {folder: _files(folder) for folder in before}
    assert after[model.resolve()] == before[model.resolve()]  # the source model is whole
    assert after[store.parent].keys() - {"runs.db-wal", "runs.db-shm"} == before[store.parent].keys() - {
        "runs.db-wal",
        "runs.db-shm",
    }
    from acetui_core.modeling.models import load_model

    load_model(str(model), device="cpu")  # and still loads


def test_a_save_over_another_runs_files_or_the_stores_companions_is_refused(
    make_tiny_model, tmp_path, monkeypatch, capsys
):
    """Another run's source model or checkpoint, a stopped run's --save folder, the store's SQLite
    companions and study lock, and the working folder even empty: refused with --overwrite too (a folder
    saved as runs.db-shm stopped every later command; one saved over another run's model made its record lie)."""
    from runhelpers import Clock, insert_run

    from acetui_core.run.config import RunConfig

    store = tmp_path / "store" / "runs.db"
    base = tmp_path / "base"
    shutil.copytree(make_tiny_model("llama"), base)
    code, out, err = _prune(monkeypatch, capsys, store, str(base), *QUICK, "--save", str(tmp_path / "saved"))
    assert code == 0, err
    stopped = tmp_path / "stopped"
    shutil.copytree(tmp_path / "saved", stopped)  # a run cancelled during its evaluation, after saving
    insert_run(Store(store, clock=Clock()), Clock(), "5709aaaa", RunConfig(model=str(base), save=str(stopped)),
               created=1e9, status="cancelled")  # fmt: skip
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    cases = {
        f"{store}-shm": "is the run store",
        f"{store}.study.lock": "is the run store's study lock",
        str(base): "is the model of run",
        str(tmp_path / "saved"): "is the checkpoint saved by run",
        str(stopped): "is the --save folder of run 5709aaaa",
        ".": "is the working folder",
    }
    before = _files(tmp_path)
    for target, fragment in cases.items():
        model = str(make_tiny_model("llama"))
        for overwrite in ([], ["--overwrite"]):
            code, out, err = _prune(monkeypatch, capsys, store, model, *QUICK, "--save", target, *overwrite)
            _one_sentence(code, err, fragment)
    assert len(Store(store).list_runs()) == 2  # nothing more recorded
    after = _files(tmp_path)
    ignore = {f"store/runs.db{end}" for end in ("", "-wal", "-shm")}
    assert {k: v for k, v in after.items() if k not in ignore} == {k: v for k, v in before.items() if k not in ignore}


# ---- 2. two runs saving to the same folder at once ---------------------------------------------------


@pytest.mark.parametrize(
    ("offload", "overwrite", "old"),
    [("none", False, False), ("disk", False, False), ("none", True, False), ("none", True, True)],
)
def test_two_prunes_saving_to_one_folder_keep_both_checkpoints(
    offload, overwrite, old, make_tiny_model, tmp_path, monkeypatch, capsys
):
    """The second `acetui prune --save SAME` finishes while the first prunes: the first must not replace
    it, and keeps its own checkpoint beside it, saying where. With --overwrite too (both runs), over nothing
    or over an old checkpoint both were checked against: the first replaced the second's model, and both
    runs recorded it as theirs."""
    from acetui_core.pruning import pipeline

    model, out, store = make_tiny_model("llama"), tmp_path / "pruned", tmp_path / "store" / "runs.db"
    if old:  # a checkpoint no run of the store saved: --overwrite may replace it
        shutil.copytree(model, out)
    quick = [*QUICK, *(["--overwrite"] if overwrite else [])]
    prune = pipeline.prune
    inner: list = []

    def prune_then_let_the_other_run_save(loaded, config, *args, **kwargs):
        result = prune(loaded, config, *args, **kwargs)
        if not inner:  # the first run, between its check of --save and its save: the second run saves there
            inner.append(None)
            inner[0] = _prune(monkeypatch, capsys, store, str(model), *quick, "--sparsity", "0.25", "--save", str(out))
        return result

    monkeypatch.setattr(pipeline, "prune", prune_then_let_the_other_run_save)
    args = [str(model), *quick, "--offload", offload, "--save", str(out), "--json"]
    code, stdout, err = _prune(monkeypatch, capsys, store, *args)
    assert inner[0][0] == 0 and code == 0, (inner, err)
    side = tmp_path / "pruned-2"
    assert f"--save {out} was filled by another run meanwhile; this run's model is in {side}." in err
    assert json.loads(stdout)["saved_to"] == str(side)
    runs = {run.config.sparsity: run for run in Store(store).list_runs()}
    assert runs["0.25"].results.saved_to == str(out) and runs["0.5"].results.saved_to == str(side)
    # runs show said where a checkpoint is nowhere but in its config's save=, the other run's folder here
    shown = {s: cli(monkeypatch, capsys, "runs", "show", runs[s].id, "--store", store)[1] for s in ("0.25", "0.5")}
    assert f"saved to: {out}\n" in shown["0.25"]
    assert f"saved to: {side} (not {out}, which another run filled while this one pruned)\n" in shown["0.5"]
    from acetui_core.modeling.models import decoder_layers, load_model

    for folder, sparsity in ((out, 0.25), (side, 0.5)):  # each checkpoint is the run that says it saved it
        weight = decoder_layers(load_model(str(folder), device="cpu").model)[0].mlp.up_proj.weight
        assert (weight == 0).float().mean().item() == pytest.approx(sparsity, abs=0.01)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".acetui")) == []


# ---- 3. a stop signal after the last layer -------------------------------------------------------------


def test_a_sigterm_after_the_last_layer_prints_what_the_store_records(make_tiny_model, tmp_path, monkeypatch, capsys):
    from acetui.progress import EventProgress
    from acetui_core.run.events import LayerPruned

    store = tmp_path / "runs.db"
    show = EventProgress.__call__

    def term_after_the_last_layer(self, event):
        show(self, event)
        if isinstance(event, LayerPruned) and event.layer.index + 1 == event.layer.total:
            os.kill(os.getpid(), signal.SIGTERM)  # handled by the run's stop handler, in this thread

    monkeypatch.setattr(EventProgress, "__call__", term_after_the_last_layer)
    code, out, err = _prune(monkeypatch, capsys, store, str(make_tiny_model("llama")), *QUICK)
    [run] = Store(store).list_runs()
    assert run.status == "finished"  # nothing was left to stop: the run is recorded as it ended...
    assert code == 0 and "cancelled" not in err and "Magnitude at 0.5" in out  # ...and said so


@pytest.mark.parametrize(
    ("stage", "signum", "code", "recorded"),
    [
        ("wikitext2", signal.SIGTERM, 143, "Stopped by SIGTERM during the WikiText-2 evaluation, after window 0 of 2; every layer was pruned and recorded, the pruned weights were not kept."),
        ("wikitext2", signal.SIGINT, 130, "Stopped by Ctrl-C (SIGINT) during the WikiText-2 evaluation, after window 0 of 2;"),
        ("calibration", signal.SIGTERM, 143, "Stopped by SIGTERM while drawing calibration windows (0 of 4 drawn), before any layer was pruned."),
    ],
)  # fmt: skip
def test_a_stop_signal_is_heard_at_every_stage_and_recorded_as_what_happened(
    stage, signum, code, recorded, make_tiny_model, calib_file, tmp_path, monkeypatch, capsys
):
    """SIGTERM during evaluation was recorded as "Stopped on request between layers." and exited 130;
    during calibration it was not heard until the first layer."""
    from acetui.progress import EventProgress
    from acetui_core.run.events import Stage

    store = tmp_path / "runs.db"
    show = EventProgress.__call__

    def signal_at_the_stage(self, event):
        show(self, event)
        if isinstance(event, Stage) and event.name == stage and event.done == 0:
            os.kill(os.getpid(), signum)  # handled by the run's stop handler, in this thread

    monkeypatch.setattr(EventProgress, "__call__", signal_at_the_stage)
    args = ["--method", "wanda", "--calib", calib_file, "--nsamples", "4", "--seqlen", "16", "--device", "cpu"]
    exit_code, _, err = _prune(
        monkeypatch, capsys, store, str(make_tiny_model("llama")), *args, "--eval-limit", "2", "--eval-seqlen", "64"
    )
    [run] = Store(store).list_runs()
    assert (run.status, exit_code) == ("cancelled", code), err
    assert run.error.startswith(recorded), run.error
    assert run.layers_done == (2 if stage == "wikitext2" else 0)


# ---- 4. the Slurm executor without Slurm ----------------------------------------------------------


def _fake_slurm(tmp_path: Path) -> Path:
    """sbatch and srun that exist and refuse every job, as on a cluster with a bad partition."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("sbatch", "srun"):
        (folder / tool).write_text("#!/bin/sh\necho 'sbatch: error: invalid partition specified: gpu' >&2\nexit 1\n")
        (folder / tool).chmod(0o755)
    return folder


@pytest.mark.parametrize("slurm", ["missing", "refusing"])
def test_a_grid_for_slurm_without_slurm_leaves_no_run_queued(slurm, make_tiny_model, tmp_path, monkeypatch, capsys):
    path = os.environ["PATH"] if slurm == "refusing" else ""
    tools = [p for p in path.split(os.pathsep) if p and not (Path(p) / "sbatch").exists()]
    if slurm == "refusing":
        tools.insert(0, str(_fake_slurm(tmp_path)))
    monkeypatch.setenv("PATH", os.pathsep.join(tools))
    store = tmp_path / "runs.db"
    args = ["compare", str(make_tiny_model("llama")), "--methods", "magnitude", "--sparsity", "0.5,2:4"]
    code, out, err = cli(monkeypatch, capsys, *args, "--executor", "slurm", "--store", str(store))
    runs = Store(store).list_runs()
    if slurm == "missing":
        _one_sentence(code, err, "--executor slurm needs Slurm's sbatch and srun on the PATH")
        assert runs == []  # checked before anything was recorded
    else:
        _one_sentence(
            code, err, "acetui: Slurm refused the job array (sbatch: error: invalid partition specified: gpu)"
        )
        assert [(run.status, "invalid partition" in run.error) for run in runs] == [("failed", True)] * 2


# ---- 5. a checkpoint without some of its weights -------------------------------------------------------


def _damaged(tmp_path: Path, model: Path, how: str) -> Path:
    from safetensors.torch import load_file, save_file

    folder = tmp_path / f"damaged-{how}"
    shutil.copytree(model, folder)
    tensors = load_file(folder / "model.safetensors")
    if how == "missing tensor":
        del tensors["model.layers.1.mlp.up_proj.weight"]
    elif how == "fewer layers":
        tensors = {name: t for name, t in tensors.items() if not name.startswith("model.layers.1.")}
    else:
        tensors["model.layers.2.mlp.up_proj.weight"] = tensors["model.layers.1.mlp.up_proj.weight"].clone()
    save_file(tensors, folder / "model.safetensors", {"format": "pt"})
    return folder


DAMAGE = {
    "missing tensor": "it lacks model.layers.1.mlp.up_proj.weight.",
    "fewer layers": "it lacks model.layers.1.input_layernorm.weight, model.layers.1.mlp.down_proj.weight, "
    "model.layers.1.mlp.gate_proj.weight and 6 more.",
    "unexpected tensor": "it holds model.layers.2.mlp.up_proj.weight, which its config.json has no place for.",
}


@pytest.mark.parametrize("offload", ["none", "disk"])
@pytest.mark.parametrize("how", list(DAMAGE))
def test_a_checkpoint_missing_weights_is_refused_naming_them(
    how, offload, make_tiny_model, tmp_path, monkeypatch, capsys
):
    folder = _damaged(tmp_path, make_tiny_model("llama"), how)
    store = tmp_path / "runs.db"
    code, out, err = _prune(monkeypatch, capsys, store, str(folder), *QUICK, "--offload", offload)
    _one_sentence(code, err, f"The checkpoint folder {folder} does not match its config.json: {DAMAGE[how]}")
    assert Store(store).list_runs() == []


def test_loading_a_checkpoint_missing_weights_names_them(make_tiny_model, tmp_path):
    """The load itself refuses too (a hub model is checked only when it loads): no random weights."""
    from acetui_core.basics.errors import UserError
    from acetui_core.modeling.models import load_model

    folder = _damaged(tmp_path, make_tiny_model("llama"), "missing tensor")
    with pytest.raises(UserError, match=r"lacks model\.layers\.1\.mlp\.up_proj\.weight\.$"):
        load_model(str(folder), device="cpu")


# ---- 6. what killed runs leave, and what runs rm removes -------------------------------------------------


@pytest.mark.slow  # starts acetui processes of its own
def test_a_killed_save_is_swept_by_the_next_save_and_by_runs_sync(make_tiny_model, tmp_path, monkeypatch, capsys):
    from runhelpers import tiny_prune_command

    model, out, store = make_tiny_model("llama"), tmp_path / "out" / "pruned", tmp_path / "runs.db"
    command = [*tiny_prune_command(str(model), "--save", str(out), "--store", str(store)), "--offload", "disk"]
    # runs sync also sweeps the system temp folder, where other tests' killed runs leave theirs
    system_temp = tmp_path / "system-temp"
    system_temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_temp))
    # a prune killed while it writes its checkpoint: it leaves its temporary folder behind
    killed = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "TMPDIR": str(system_temp)}
    )
    temps: list[Path] = []
    while killed.poll() is None and not any(p.glob("model-*") for p in temps):
        temps = list(out.parent.glob(".acetui-save-*"))
    killed.kill()
    killed.wait()
    assert temps and not out.exists(), "the run was not killed while saving"
    foreign = out.parent / ".acetui-save-notes"  # a name acetui did not make: not swept
    foreign.mkdir()
    code, printed, err = cli(monkeypatch, capsys, "runs", "sync", "--store", str(store))
    assert code == 0 and f"Removed 1 folder(s) that killed runs left: {temps[0]}." in printed
    assert sorted(p.name for p in out.parent.iterdir()) == [".acetui-save-notes"]
    temps[0].mkdir()  # as if left again: the next save into the folder sweeps it
    (temps[0] / "model-00001-of-00003.safetensors").write_text("half a shard")
    code, printed, err = _prune(monkeypatch, capsys, store, str(model), *QUICK, "--save", str(out))
    assert code == 0, err
    assert sorted(p.name for p in out.parent.iterdir()) == [".acetui-save-notes", "pruned"]


def test_a_streamed_zero_shot_leaves_nothing_beside_the_checkpoint(make_tiny_model, tmp_path, monkeypatch, capsys):
    """Zero-shot of a streamed model offloads its weights to disk: beside the checkpoint, and gone after."""
    out, store = tmp_path / "models" / "pruned", tmp_path / "runs.db"
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "offload").mkdir()  # a folder of the user's that an earlier version wrote into
    (tmp_path / "models" / "offload" / "notes.md").write_text("mine")
    args = [str(make_tiny_model("llama")), *QUICK[:2], "--device", "cpu", "--offload", "disk", "--save", str(out)]
    code, _, err = _prune(monkeypatch, capsys, store, *args, "--eval", "zeroshot", "--tasks", "rte", "--limit", "2")
    assert code == 0, err
    assert sorted(p.name for p in out.parent.iterdir()) == ["offload", "pruned"]
    assert _files(out.parent / "offload") == {"notes.md": b"mine"}


def test_runs_rm_removes_every_file_of_the_run_and_nothing_else(make_tiny_model, tmp_path, monkeypatch, capsys):
    store = tmp_path / "store" / "runs.db"
    model = str(make_tiny_model("llama"))
    for _ in range(2):
        code, out, err = _prune(monkeypatch, capsys, store, model, *QUICK, "--keep-masks")
        assert code == 0, err
    gone, kept = Store(store).list_runs()
    (store.parent / "masks" / f"{gone.id}.npz.partial").write_text("a mask file a killed run left")
    (store.parent / "notes.md").write_text("the user's own file")
    before = _files(store.parent)
    assert {f"logs/{gone.id}.log", f"masks/{gone.id}.npz"} <= before.keys()
    code, out, err = cli(monkeypatch, capsys, "runs", "rm", gone.id, "--store", str(store))
    assert code == 0 and out.startswith(f"Removed run {gone.id} (") and out.endswith(": its record, log and masks.\n")
    after = _files(store.parent)
    assert not [name for name in after if gone.id in name]
    ignore = {"runs.db", "runs.db-wal", "runs.db-shm"}
    assert {k: v for k, v in after.items() if k not in ignore} == {
        k: v for k, v in before.items() if gone.id not in k and k not in ignore
    }
    assert [run.id for run in Store(store).list_runs()] == [kept.id]


# ---- 7. export over a good file on a full disk ---------------------------------------------------------


def test_an_export_that_fails_midway_leaves_the_previous_file_whole(tmp_path, monkeypatch, capsys):
    from runhelpers import Clock, insert_run

    from acetui_core.run.config import RunConfig

    store = tmp_path / "runs.db"
    insert_run(
        Store(store, clock=Clock()), Clock(), "a0000001", RunConfig("org/m", "wanda", "0.5"), created=1.7e9, ppl=9
    )
    table = tmp_path / "table.csv"
    table.write_text("the good table of last week\n")
    table.chmod(0o640)
    # a file size limit stands in for a full disk: once the runs are read, the OS refuses the write midway
    script = (
        "import resource, signal\n"
        "from acetui.commands import export\n"
        "write = export.write_output\n"
        "def on_a_full_disk(*args):\n"
        "    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "    resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))\n"
        "    write(*args)\n"
        "export.write_output = on_a_full_disk\n"
        "from acetui.cli import main\n"
        "main()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, "export", "-o", str(table), "--overwrite", "--store", str(store)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("acetui: Cannot use ") and "File too large" in result.stderr
    assert table.read_text() == "the good table of last week\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    code, out, err = cli(monkeypatch, capsys, "export", "-o", str(table), "--overwrite", "--store", str(store))
    assert code == 0 and table.read_text().startswith("id,status,") and stat.S_IMODE(table.stat().st_mode) == 0o640


# ---- 8. a saved checkpoint's permissions -------------------------------------------------------------


@pytest.mark.parametrize("offload", ["none", "disk"])
def test_a_saved_checkpoint_gets_the_umask_permissions(offload, make_tiny_model, tmp_path, monkeypatch, capsys):
    out = tmp_path / "pruned"
    old = os.umask(0o027)  # a group-readable setup
    try:
        code, _, err = _prune(
            monkeypatch,
            capsys,
            tmp_path / "runs.db",
            str(make_tiny_model("llama")),
            *QUICK,
            "--save",
            str(out),
            "--offload",
            offload,
        )
    finally:
        os.umask(old)
    assert code == 0, err
    assert stat.S_IMODE(out.stat().st_mode) == 0o750
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {0o640}


# ---- 9. settings of the wrong type -----------------------------------------------------------------------


@pytest.mark.asyncio
async def test_preferences_of_the_wrong_type_start_the_app_with_defaults_and_one_notice(tmp_path, monkeypatch):
    from textual.widgets import Input

    from acetui import preferences
    from acetui.app import make_app
    from acetui.app.screens.new_run import NewRunScreen
    from acetui_core.basics.paths import bundled_model

    path = preferences.preferences_path()
    path.parent.mkdir(parents=True)
    hand_edited = {"theme": 3, "notify": "loud", "new_run": {"model": ["a", "b"], "metrics": "ace"}, "plugins": "x"}
    path.write_text(json.dumps(hand_edited))
    app = make_app(Store(tmp_path / "runs.db"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, NewRunScreen)
        assert app.screen.query_one("#model", Input).value == str(bundled_model())  # the default model
        notices = [str(n.message) for n in app._notifications if "settings" in str(n.message)]
        assert notices == [
            f"The settings file {path} has a value of the wrong type for theme, notify, plugins, new_run.model, "
            "new_run.metrics; using the default for each."
        ]
    assert app.return_code in (0, None)
    assert json.loads(path.read_text()) == hand_edited  # nothing rewritten behind the user's back


def test_a_crashed_app_does_not_exit_0(monkeypatch, capsys):
    import acetui.app

    class Crashed:
        return_code = 1  # what Textual sets when the app ended on an exception

        def run(self):
            print("Traceback (Textual's own report of the crash)", file=sys.stderr)

    monkeypatch.setattr(acetui.app, "make_app", lambda *args, **kwargs: Crashed())
    monkeypatch.setattr("acetui.commands.app.require_terminal", lambda: None)  # pytest's stdin is no terminal
    code, out, err = cli(monkeypatch, capsys)
    assert code == 1


# ---- 10. a path under ~ of a user that does not exist -------------------------------------------------


NO_USER = {
    "calibration file": (["prune", "{model}", "--calib", "~nouser/c.txt"], "~nouser/c.txt"),
    "save folder": (["prune", "{model}", "--save", "~nouser/out"], "~nouser/out"),
    "model": (["prune", "~nouser/model"], "~nouser/model"),
    "plug-in file": (["prune", "{model}", "--method", "~nouser/p.py:score"], "~nouser/p.py"),
    "store": (["runs", "--store", "~nouser/runs.db"], "~nouser/runs.db"),
}


@pytest.mark.parametrize("case", list(NO_USER))
def test_a_path_of_an_unknown_user_is_one_sentence(case, make_tiny_model, tmp_path, monkeypatch, capsys):
    args, path = NO_USER[case]
    store = tmp_path / "runs.db"
    args = [arg.format(model=make_tiny_model("llama")) for arg in args]
    extra = [] if "--store" in args else ["--store", str(store)]
    code, out, err = cli(monkeypatch, capsys, *args, *extra)
    _one_sentence(code, err, f"Cannot expand ~nouser in {path}: there is no user 'nouser' on this machine.")
    assert not store.exists() or Store(store).list_runs() == []


# ---- 11. plan on a damaged shard ---------------------------------------------------------------------


def test_plan_on_a_truncated_shard_says_what_prune_says(make_tiny_model, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "truncated"
    shutil.copytree(make_tiny_model("llama"), folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    code, _, planned = cli(monkeypatch, capsys, "plan", str(folder))
    _one_sentence(code, planned, f"The checkpoint folder {folder} could not be loaded as a model: model.safetensors")
    code, _, pruned = cli(monkeypatch, capsys, "prune", str(folder), "--store", str(tmp_path / "runs.db"))
    assert code == 2 and pruned == planned


def test_a_good_shard_that_cannot_be_opened_is_not_called_damaged(make_tiny_model, tmp_path, monkeypatch, capsys):
    """An unreadable model.safetensors (another user's, mode 000) and one under a folder whose name is not
    UTF-8 were each "model.safetensors is damaged (No such file...)": a user told so may delete a good file."""
    import builtins
    import os

    from acetui_core.modeling import preflight

    folder = tmp_path / "theirs"
    shutil.copytree(make_tiny_model("llama"), folder)
    weights = folder / "model.safetensors"

    def refused(path, *args, **kwargs):  # the permission bits, whoever runs the test (root reads anything)
        if str(path) == str(weights):
            raise PermissionError(13, "Permission denied", str(path))
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(preflight, "open", refused, raising=False)
    code, _, err = cli(monkeypatch, capsys, "plan", str(folder))
    _one_sentence(code, err, f"{weights} cannot be read (Permission denied).")
    monkeypatch.undo()
    named = tmp_path / os.fsdecode(b"bad\xffname")
    shutil.copytree(make_tiny_model("llama"), named)
    code, _, err = cli(monkeypatch, capsys, "plan", str(named))
    shown = str(named).replace("\udcff", "\N{REPLACEMENT CHARACTER}")
    _one_sentence(code, err, f"The path {shown} is not valid UTF-8, which safetensors cannot open; rename the folder.")


# ---- 12. plug-in scores that are not scores ------------------------------------------------------------


PLUGIN_SCORES = {
    "bool": ("W > 0", "returned bool scores for layer 0 self_attn.q_proj; scores must be real numbers"),
    "complex": ("W * 1j", "returned complex64 scores for layer 0 self_attn.q_proj; scores must be real numbers"),
    "meta": ("torch.empty_like(W, device='meta')", "returned scores on the meta device for layer 0"),
    "+inf": ("W.abs() / 0", "returned infinite scores for layer 0 self_attn.q_proj; every score must be a finite"),
    "-inf": ("torch.full_like(W, -float('inf'))", "returned infinite scores for layer 0"),
    "one number": ("W.sum()", "returned scores of shape () for layer 0 self_attn.q_proj"),
}


@pytest.mark.parametrize("case", list(PLUGIN_SCORES))
def test_plugin_scores_that_are_not_scores_are_one_sentence(case, make_tiny_model, tmp_path, monkeypatch, capsys):
    expression, fragment = PLUGIN_SCORES[case]
    plugin = tmp_path / "odd.py"
    plugin.write_text(f"import torch\n\n\ndef score(W, stats, opts):\n    return {expression}\n")
    store = tmp_path / "runs.db"
    code, out, err = _prune(
        monkeypatch, capsys, store, str(make_tiny_model("llama")), *QUICK[2:], "-m", f"{plugin}:score"
    )
    last = err.strip().splitlines()[-1]  # after the progress bars of the run that started
    assert code == 2 and "Traceback" not in err and last.startswith(f"acetui: Plug-in method '{plugin}:score' ")
    assert fragment in last, err
    [run] = Store(store).list_runs()
    assert run.status == "failed" and fragment in run.error  # recorded as it ended, with the same sentence


# ---- 13. calibration text that is empty --------------------------------------------------------------


@pytest.mark.parametrize("text", ["", " \n\t\n  "])
def test_a_calibration_text_file_without_text_is_refused_before_any_work(
    text, make_tiny_model, tmp_path, monkeypatch, capsys
):
    calib = tmp_path / "notes.txt"
    calib.write_text(text)
    store = tmp_path / "runs.db"
    code, out, err = _prune(
        monkeypatch, capsys, store, str(make_tiny_model("llama")), "--calib", str(calib), "-m", "wanda"
    )
    _one_sentence(code, err, f"{calib} holds no text to calibrate on.")
    assert Store(store).list_runs() == []


# ---- 14. every setting checked once, before anything is recorded or loaded ---------------------------------


def test_a_sparsity_close_to_1_is_recorded_as_given_and_runs(make_tiny_model, tmp_path, monkeypatch, capsys):
    store = tmp_path / "runs.db"
    code, out, err = _prune(monkeypatch, capsys, store, str(make_tiny_model("llama")), *QUICK, "-s", "0.9999999")
    assert code == 0, err
    [run] = Store(store).list_runs()
    assert run.status == "finished" and run.config.sparsity == "0.9999999"


SETTINGS = {
    "N:M that does not divide a layer's input": (
        ["prune", "{model}", "-s", "1:3"],
        "Sparsity 1:3 needs every layer's input width to be a multiple of 3, but layer 0 mlp.down_proj has 128 inputs.",
    ),
    "N:M in a comparison": (["compare", "{model}", "--sparsity", "0.5,2:4,1:3"], "a multiple of 3"),
    "unknown table cells": (["compare", "{model}", "--cells", "bogus"], "Unknown --cells 'bogus'; choose one of"),
    "unknown plan device": (["plan", "{model}", "--device", "tpu"], "Unknown device 'tpu'; use auto, cpu or cuda[:i]."),
}


@pytest.mark.parametrize("case", list(SETTINGS))
def test_a_bad_setting_is_refused_before_anything_is_recorded_or_loaded(
    case, make_tiny_model, tmp_path, monkeypatch, capsys
):
    from acetui_core.modeling import streaming

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded before the settings were checked")

    monkeypatch.setattr(streaming, "load_for_run", no_loading)
    args, fragment = SETTINGS[case]
    args = [arg.format(model=make_tiny_model("llama")) for arg in args]
    store = tmp_path / "runs.db"
    extra = [] if args[0] == "plan" else ["--store", str(store)]
    code, out, err = cli(monkeypatch, capsys, *args, *extra)
    _one_sentence(code, err, fragment)
    assert not store.exists() or Store(store).list_runs() == []


# ---- 15. options given before the subcommand ---------------------------------------------------------------


def test_options_before_a_subcommand_are_honoured_or_refused(tmp_path, monkeypatch, capsys):
    from runhelpers import Clock, insert_run

    from acetui_core.run.config import RunConfig

    store = tmp_path / "elsewhere" / "runs.db"
    insert_run(
        Store(store, clock=Clock()), Clock(), "a0000001", RunConfig("org/m", "wanda", "0.5"), created=1.7e9, ppl=9
    )
    code, out, err = cli(monkeypatch, capsys, "--store", str(store), "runs")
    assert code == 0 and "a0000001" in out
    code, out, err = cli(monkeypatch, capsys, "--store", str(store), "runs", "show", "a0000")
    assert code == 0 and out.startswith("run a0000001")
    code, out, err = cli(monkeypatch, capsys, "--store", str(store), "export", "--format", "markdown")
    assert code == 0 and "| Wanda-16 |" in out
    code, out, err = cli(monkeypatch, capsys, "--theme", "light", "prune", "org/m")
    _one_sentence(code, err, "acetui prune has no --theme option, so it cannot take one given before it either.")
    assert not (tmp_path / "acetui-home").exists()  # the default store was never opened


@pytest.mark.slow  # a process of its own: huggingface_hub reads its endpoint and offline switch at import
def test_an_unreachable_hub_is_one_sentence_at_once_and_records_nothing(tmp_path):
    """The README's placeholder typed literally: huggingface_hub would retry for 48 s before failing."""
    store = tmp_path / "runs.db"
    env = {**os.environ, "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf")}
    result = subprocess.run(
        [sys.executable, "-m", "acetui", "prune", "MODEL", "--store", str(store)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 2 and "Retry" not in result.stderr, result.stderr
    assert result.stderr.startswith("acetui: The Hugging Face hub cannot be reached") and result.stderr.count("\n") == 1
    assert "pass a local checkpoint folder or a .gguf file" in result.stderr
    assert not store.exists() or Store(store).list_runs() == []


def test_a_comparison_some_of_whose_runs_failed_says_its_table_is_partial(
    make_tiny_model, tmp_path, monkeypatch, capsys
):
    """A grid stopped or failed part-way printed the table of the runs that finished, rows and seeds missing,
    with nothing on stdout (what gets pasted) saying so."""
    plugin = tmp_path / "failing.py"
    plugin.write_text("def score(W, stats, opts):\n    raise ValueError('on purpose')\n")
    store = tmp_path / "runs.db"
    args = ["compare", str(make_tiny_model("llama")), "--methods", f"magnitude,{plugin}:score", "--sparsity", "0.5"]
    code, out, err = cli(monkeypatch, capsys, *args, "--eval-seqlen", "32", "--eval-limit", "2", "--store", str(store))
    assert code == 1 and "Magnitude" in out, err
    assert out.startswith("Partial: 1 of the grid's 2 runs finished; the other 1 (failed) have no place"), out
