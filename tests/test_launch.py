"""The one door for runs: grids, every check before anything is queued, one code path for the CLI and the
app, and the import contracts that keep the engine free of the faces."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from runhelpers import cli, pilot_wait_until
from textual.widgets import Input

from acetui.app import make_app
from acetui_core.execution.launch import Grid, InProcess, LocalProcesses, launch, queue
from acetui_core.storage.store import Store

REPO = Path(__file__).resolve().parent.parent


def test_methods_without_calibration_run_once_per_model_and_sparsity():
    axes = {"model": ["m"], "method": ["magnitude", "wanda"], "sparsity": ["0.5", "2:4"], "seqlen": [16, "full"]}
    configs = Grid(axes | {"seed": [0, 1]}).configs()
    assert [(c.sparsity, c.seqlen, c.seed) for c in configs if c.method == "magnitude"] == [
        ("0.5", 16, 0),
        ("2:4", 16, 0),
    ]
    wanda = [(c.seqlen, c.seed, c.sparsity) for c in configs if c.method == "wanda"]
    assert len(wanda) == len(set(wanda)) == 8


@pytest.fixture
def started(monkeypatch):
    """The executors' start, recorded instead of run: what each face handed to the door."""
    calls = []
    monkeypatch.setattr(LocalProcesses, "start", lambda self, store, ids: calls.append(("local processes", ids)))
    monkeypatch.setattr(InProcess, "start", lambda self, store, ids: calls.append(("in process", ids)))
    return calls


@pytest.mark.asyncio
async def test_the_app_and_the_cli_queue_the_same_runs_through_the_door(
    tmp_path, make_tiny_model, started, monkeypatch, capsys
):
    model = str(make_tiny_model("llama"))
    cli_store = tmp_path / "cli" / "runs.db"
    code, _, err = cli(
        monkeypatch,
        capsys,
        "compare",
        model,
        "--methods",
        "magnitude,wanda",
        "--sparsity",
        "0.5,2:4",
        "--seqlen",
        "16,full",
        "--detach",
        "--store",
        cli_store,
    )
    assert code == 0, err
    [(executor, cli_ids)] = started
    assert executor == "local processes"

    app_store = Store(tmp_path / "app" / "runs.db")
    app = make_app(app_store)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        screen.query_one("#model", Input).value = model
        metrics = screen.query_one("#metrics")
        metrics.deselect_all()
        metrics.select("magnitude")
        metrics.select("wanda")
        screen.query_one("#sparsity", Input).value = "0.5, 2:4"
        screen.query_one("#seqlen", Input).value = "16, full"
        await pilot.pause()
        await pilot.press("ctrl+r")
        await pilot_wait_until(pilot, lambda: len(started) == 2, "the launch, from its thread")
        # Then the app follows the first run (leaving mid-mount failed the test on a loaded machine).
        first = started[1][1][0]
        following = lambda: any(f"run {first}" in str(title.render()) for title in app.screen.query("#run-title"))  # noqa: E731
        await pilot_wait_until(pilot, following, "the Run screen following the first run")
    assert [executor for executor, _ in started] == ["local processes"] * 2
    from_cli = [run.config for run in Store(cli_store).list_runs(ids=cli_ids)]
    from_app = [run.config for run in app_store.list_runs(ids=started[1][1])]
    assert from_app == from_cli
    assert [(c.method, c.sparsity, c.seqlen) for c in from_cli] == [
        ("magnitude", "0.5", 16),
        ("magnitude", "2:4", 16),
        ("wanda", "0.5", 16),
        ("wanda", "2:4", 16),
        ("wanda", "0.5", "full"),
        ("wanda", "2:4", "full"),
    ]


@pytest.mark.parametrize(
    "args, sentence",
    [
        (
            ["compare", "{model}", "--eval", "wikitext2,zeroshot", "--tasks", "boolq,piqa"],
            "Unknown zero-shot task 'piqa'",
        ),
        (["compare", "{tmp}/missing-model", "--methods", "wanda"], "Model path {tmp}/missing-model does not exist."),
        (["prune", "{tmp}/missing-model", "--detach"], "Model path {tmp}/missing-model does not exist."),
        (["prune", "{model}", "--calib", "{tmp}/empty.jsonl", "--detach"], "holds no text to calibrate on"),
        (["compare", "{model}", "--methods", "wanda", "--calib", "{tmp}/empty.jsonl"], "holds no text to calibrate on"),
    ],
)
def test_a_bad_grid_is_refused_before_anything_is_queued(
    tmp_path, make_tiny_model, started, monkeypatch, capsys, args, sentence
):
    (tmp_path / "empty.jsonl").write_text("")
    store = tmp_path / "runs.db"
    fill = {"model": make_tiny_model("llama"), "tmp": tmp_path}
    code, out, err = cli(monkeypatch, capsys, *(a.format(**fill) for a in args), "--store", store)
    assert code == 2 and sentence.format(**fill) in err and err.count("\n") == 1
    assert started == [] and Store(store).list_runs() == []


def test_the_runs_queued_together_share_one_batch(tmp_path, make_tiny_model):
    store = Store(tmp_path / "runs.db")
    axes = {"model": [str(make_tiny_model("llama"))], "method": ["magnitude"], "sparsity": ["0.25", "0.5"]}
    configs = Grid(axes, common={"evals": []}).configs()
    grid, alone = queue(configs, store, InProcess()), queue(configs[:1], store, InProcess())
    batches = {run.id: run.batch for run in store.list_runs()}
    assert batches[grid[0]] == batches[grid[1]] != batches[alone[0]]


def test_in_process_runs_record_their_events_and_log(tmp_path, make_tiny_model):
    from acetui_core.run.config import RunConfig

    store = Store(tmp_path / "runs.db")
    events = []
    calib = tmp_path / "calib.txt"
    calib.write_text((REPO / "README.md").read_text())
    config = RunConfig(
        model=str(make_tiny_model("llama")),
        method="wanda",
        sparsity="0.5",
        nsamples=4,
        calib=str(calib),
        eval_seqlen=64,
        eval_limit=2,
    )
    [run_id] = launch([config], InProcess(on_event=lambda run_id, event: events.append((run_id, event))), store)
    run = store.get_run(run_id)
    assert run.status == "finished" and run.results.run_id == run_id and run.layers_done == 2
    assert {rid for rid, _ in events} == {run_id}
    log = Path(run.env["log"]).read_text()
    assert "layer 1 pruned (2/2 done)" in log and "finished: prune" in log


# ---- the import contracts ----------------------------------------------------------------------------


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--config", str(REPO / "pyproject.toml")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory) -> Path:
    """The three packages under their import names, as lint-imports sees them from a working folder."""
    root = tmp_path_factory.mktemp("contracts")
    for folder, name in (("acetui", "acetui"), ("core/acetui_core", "acetui_core"), ("themes", "acetui_themes")):
        shutil.copytree(REPO / folder, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_the_import_contracts_hold(source_copy):
    done = _lint_imports(source_copy)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    "module, line, contract",
    [
        ("acetui_core/pruning/pipeline.py", "import textual", "The engine imports no face"),
        (
            "acetui_core/scores/masks.py",
            "from acetui_core.storage import store",
            "Scores, masks and statistics know nothing",
        ),
        ("acetui/progress.py", "import acetui.cli", "No import circle"),
    ],
)
def test_a_forbidden_import_breaks_a_contract(source_copy, tmp_path, module, line, contract):
    root = tmp_path / "copy"
    shutil.copytree(source_copy, root)
    path = root / module
    path.write_text(path.read_text() + f"\n{line}\n")
    done = _lint_imports(root)
    assert done.returncode != 0
    assert contract in done.stdout and "BROKEN" in done.stdout


def test_a_run_checks_its_settings_once(tmp_path, make_tiny_model, monkeypatch, capsys):
    """launch.queue checks every setting before the run is recorded; the run itself only checks the fit
    to the loaded model (the runner tells pipeline.run its configuration was checked)."""
    from acetui_core.execution import launch as door
    from acetui_core.pruning import pipeline, validate

    checked = []

    def counting(config, **options):
        checked.append(config.method)
        return validate.check_config(config, **options)

    monkeypatch.setattr(door, "check_config", counting)
    monkeypatch.setattr(pipeline, "check_config", counting)
    model = str(make_tiny_model("llama"))
    quick = ["--nsamples", "4", "--seqlen", "16", "--eval", "none", "--store", tmp_path / "runs.db"]
    code, _, err = cli(monkeypatch, capsys, "prune", model, "--method", "wanda", *quick)
    assert code == 0, err
    assert checked == ["wanda"]
