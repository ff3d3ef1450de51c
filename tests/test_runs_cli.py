"""Runs as processes, through the CLI: recording, signals, detached runs, cancel, compare and sweep.

Real pruning runs on tiny random models; calibration text is a small slice of the local C4 copy.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from runhelpers import GATE, cli, gated, held_at_the_gate, stopped_by_sigterm, wait_for_runs, wait_until

from acetui_core.storage.store import Store
from acetui_core.storage.store_schema import TERMINAL

REPO = Path(__file__).resolve().parent.parent
LAYERS = 4  # the gated model: a layer before the gate, the gated one, and layers a cancel must skip


@pytest.fixture(scope="session")
def layered_model(make_tiny_model) -> Path:
    return make_tiny_model("llama", layers=LAYERS)


@pytest.fixture
def fast(calib_file) -> list[str]:
    return ["--calib", str(calib_file), "--nsamples", "4", "--seqlen", "16", "--eval-limit", "2", "--eval-seqlen", "64"]


@pytest.fixture
def store_path(tmp_path) -> Path:
    return tmp_path / "store" / "runs.db"


def spawn(*args, tmp_path: Path) -> subprocess.Popen:
    """``acetui ARGS`` as a separate process (its output in files: a full pipe would block it)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with open(tmp_path / "out.txt", "wb") as out, open(tmp_path / "err.txt", "wb") as err:
        return subprocess.Popen([sys.executable, "-m", "acetui", *map(str, args)], stdout=out, stderr=err, env=env)


@pytest.mark.parametrize("theirs", [None, "COMPATIBLE"])
def test_every_cpu_takes_one_matrix_product_path(theirs):
    """The README's prune printed 448.59 on an Intel Xeon and 445.96 on an AMD EPYC with the same packages:
    MKL chose AVX-512 on one and AVX2 on the other. acetui_core asks for AVX2, strictly (MKL_CBWR), before
    torch's first product, keeping a user's own choice; on this machine the product is then that path's, bit
    for bit."""
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"} | ({"MKL_CBWR": theirs} if theirs else {})
    product = (
        "import hashlib, os, torch; g = torch.Generator().manual_seed(0); "
        "a, b = torch.randn(256, 1024, generator=g), torch.randn(1024, 512, generator=g); "
        "print(os.environ.get('MKL_CBWR'), hashlib.sha256((a @ b).numpy().tobytes()).hexdigest())"
    )
    ours = subprocess.run(
        [sys.executable, "-c", f"import acetui_core; {product}"], env=env, capture_output=True, text=True
    )
    path, digest = ours.stdout.split()
    assert path == (theirs or "AVX2,STRICT"), ours.stderr
    mkl = subprocess.run([sys.executable, "-c", product], env={**env, "MKL_CBWR": path}, capture_output=True, text=True)
    assert mkl.stdout.split() == [path, digest], mkl.stderr


def test_a_run_waits_while_another_process_holds_the_store(make_tiny_model, fast, store_path, monkeypatch, capsys):
    """Another process held the store's write lock (a backup, a `sqlite3` session) longer than the busy
    timeout as a layer was recorded: the run failed with "database is locked", its pruning lost. It waits."""
    import sqlite3
    import threading

    from acetui_core.run.events import LayerPruned
    from acetui_core.storage import store_db

    monkeypatch.setattr(store_db, "BUSY_TIMEOUT", 0.2)  # the lock is held for many of them
    held = threading.Event()

    def hold() -> None:
        db = sqlite3.connect(store_path, isolation_level=None)
        db.execute("BEGIN EXCLUSIVE")
        held.set()
        time.sleep(1.5)
        db.execute("COMMIT")
        db.close()

    record = Store.record_event

    def record_after_a_lock(self, run_id, event):
        if isinstance(event, LayerPruned) and not held.is_set():
            threading.Thread(target=hold).start()
            held.wait()
        return record(self, run_id, event)

    monkeypatch.setattr(Store, "record_event", record_after_a_lock)
    model = make_tiny_model("llama")
    code, out, err = cli(
        monkeypatch, capsys, "prune", model, "--method", "wanda", *fast, "--json", "--store", store_path
    )
    assert code == 0, err
    run = Store(store_path).get_run(json.loads(out)["run_id"])
    assert (run.status, run.layers_done) == ("finished", 2) and held.is_set()


def test_prune_records_the_run_and_runs_commands_show_it(make_tiny_model, fast, store_path, monkeypatch, capsys):
    model = make_tiny_model("llama")
    code, out, _ = cli(monkeypatch, capsys, "prune", model, "--method", "wanda", *fast, "--json", "--store", store_path)
    assert code == 0
    result = json.loads(out)
    run = Store(store_path).get_run(result["run_id"])
    assert (run.status, run.label, run.layers_done, run.num_layers) == ("finished", "Wanda-16", 2, 2)
    assert all(len(layer.linears) == 7 and layer.linears[0].histogram.counts for layer in run.layers)
    assert run.layers[0].linears[0].act_stats
    assert run.ppl == result["ppl_wikitext2"] and run.results.ppl_windows == 2
    assert run.env["device"] == "cpu" and run.env["acetui"]
    # every package whose version can move a number (one moved the README's perplexity), as installed
    moving = ("torch", "transformers", "tokenizers", "gguf", "numpy", "safetensors", "accelerate", "scipy", "lm-eval")
    for package in (*moving, "datasets"):
        assert run.env[package] == importlib.metadata.version(package), package
    assert run.env["mkl_cbwr"] == os.environ["MKL_CBWR"]  # the CPU products' code path (acetui_core sets it)

    code, out, _ = cli(monkeypatch, capsys, "runs", "--store", store_path)
    assert code == 0 and run.id in out and "finished" in out and "Wanda-16" in out
    header, row = out.splitlines()[:2]  # the calib column names the source, as --calib does
    calib = Path(fast[fast.index("--calib") + 1]).name
    assert row.split()[header.split().index("calib")] == calib, out
    code, out, _ = cli(monkeypatch, capsys, "runs", "--json", "--store", store_path)
    assert [r["id"] for r in json.loads(out)] == [run.id]
    code, out, _ = cli(monkeypatch, capsys, "runs", "show", run.id[:5], "--json", "--store", store_path)
    shown = json.loads(out)
    assert (shown["status"], len(shown["layers"]), shown["results"]["ppl_wikitext2"]) == ("finished", 2, run.ppl)
    code, out, _ = cli(monkeypatch, capsys, "runs", "watch", run.id, "--store", store_path)
    assert code == 0 and "layer 1 pruned (2/2 done)" in out and f"run {run.id} finished: ppl" in out

    code, out, err = cli(monkeypatch, capsys, "runs", "cancel", run.id, "--store", store_path)
    assert code == 2 and "already ended (finished)" in err
    code, out, _ = cli(monkeypatch, capsys, "runs", "rm", run.id, "--store", store_path)
    assert code == 0 and Store(store_path).list_runs() == []
    code, out, err = cli(monkeypatch, capsys, "runs", "show", run.id, "--store", store_path)
    assert code == 2 and err == f"acetui: There is no run '{run.id}' in {store_path} (acetui runs lists them).\n"


@pytest.mark.parametrize(
    "command, said",
    [
        ("rm", "Removed run {} (Wanda-16 at 0.5, finished, ppl 9.00): its record."),
        ("cancel", "Run {} cancelled before it started."),
    ],
)
def test_a_run_named_twice_is_removed_or_cancelled_once(store_path, monkeypatch, capsys, command, said):
    """By a prefix and its full id: rm said it twice, cancel refused the second as already ended."""
    from runhelpers import Clock, insert_run

    from acetui_core.run.config import RunConfig

    clock = Clock()
    store = Store(store_path, clock=clock)
    insert_run(store, clock, "b0000001", RunConfig("org/m", "ria", "0.5"), created=1.7e9, ppl=9.5)
    if command == "rm":  # a finished run
        insert_run(store, clock, "d2dc7887", RunConfig("org/m", "wanda", "0.5"), created=1.7e9 + 60, ppl=9.0)
    else:  # a queued one
        store.create_run(RunConfig("org/m", "wanda", "0.5"), env={}, run_id="d2dc7887")
    code, out, err = cli(monkeypatch, capsys, "runs", command, "d2dc", "d2dc7887", "d2dc", "--store", store_path)
    assert (code, err, out) == (0, "", said.format("d2dc7887") + "\n")
    left = {run.id: run.status for run in Store(store_path).list_runs()}
    assert left == ({"b0000001": "finished"} | ({"d2dc7887": "cancelled"} if command == "cancel" else {}))


@pytest.mark.parametrize("command", ["rm", "cancel"])
def test_a_run_is_removed_or_cancelled_only_by_a_prefix_of_at_least_4_characters(
    store_path, tmp_path, monkeypatch, capsys, command
):
    """`runs rm 7` removed a finished result on one mistyped key: a command that removes or stops a run
    takes a prefix of 4 characters or more (reading ones take any unique prefix), and rm says what it removed
    (only what existed) and which saved checkpoint it kept."""
    from runhelpers import Clock, insert_run

    from acetui_core.run.config import RunConfig

    clock = Clock()
    store = Store(store_path, clock=clock)
    saved = tmp_path / "pruned"
    saved.mkdir()
    if command == "rm":
        config = RunConfig("org/m", "wanda", "0.5", save=str(saved))
        insert_run(store, clock, "70609e46", config, created=1.7e9, ppl=87.624)
        for path in (store.log_path("70609e46"), store.masks_path("70609e46")):
            path.parent.mkdir(exist_ok=True)
        store.log_path("70609e46").write_text("the run's log")
        store.masks_path("70609e46").write_text("its masks")
        matches = "70609e46 (Wanda-16 at 0.5, finished, ppl 87.62)"
    else:
        store.create_run(RunConfig("org/m", "wanda", "0.5"), env={}, run_id="70609e46")
        matches = "70609e46 (Wanda-16 at 0.5, queued)"
    insert_run(store, clock, "b0000001", RunConfig("org/m", "ria", "0.5"), created=1.7e9 + 60, ppl=9.5)
    doing = "remove" if command == "rm" else "cancel"
    for prefix in ("7", "706"):
        code, out, err = cli(monkeypatch, capsys, "runs", command, prefix, "--store", store_path)
        assert (code, out) == (2, ""), err
        assert err == (
            f"acetui: Run id '{prefix}' is too short a prefix to {doing} a run by: it matches run {matches}; "
            "give at least 4 characters of its id, such as 7060.\n"
        )
        assert [(r.id, r.status) for r in Store(store_path).list_runs()][0] == (
            "70609e46",
            "finished" if command == "rm" else "queued",
        )
    code, out, err = cli(monkeypatch, capsys, "runs", "show", "7", "--store", store_path)  # reading: any prefix
    assert code == 0 and "70609e46" in out, err
    code, out, err = cli(monkeypatch, capsys, "runs", command, "7060", "--store", store_path)
    assert code == 0, err
    if command == "rm":
        assert out == (f"Removed run {matches}: its record, log and masks; its saved checkpoint {saved} is kept.\n")
        assert saved.exists() and not store.log_path("70609e46").exists()
        assert [r.id for r in Store(store_path).list_runs()] == ["b0000001"]
    else:
        assert out == "Run 70609e46 cancelled before it started.\n"


def test_runs_show_says_a_runs_zero_shot_accuracy(tmp_path, monkeypatch, capsys):
    """A zero-shot-only run ended ``runs show`` with "no perplexity" alone: its accuracies were in --json only."""
    from runhelpers import Clock, insert_run
    from test_export import ZEROSHOT

    from acetui_core.run.config import RunConfig

    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    config = RunConfig("m", "wanda", evals=["zeroshot"], tasks=["boolq", "rte"])
    insert_run(
        store,
        clock,
        "z0000001",
        config,
        created=1.7e9,
        zeroshot={**ZEROSHOT, "rte": {**ZEROSHOT["rte"], "n": 20, "partial": True}},
    )
    code, out, err = cli(monkeypatch, capsys, "runs", "show", "z0000001", "--store", str(tmp_path / "runs.db"))
    assert code == 0, err
    assert (
        "run z0000001 finished: no perplexity, pruned in 30.0 s; zero-shot acc mean 0.6500 (partial): boolq 0.700, rte 0.600."
        in out
    )


def strict_json(text: str):
    """``text`` read as JavaScript's JSON.parse or jq read it: Infinity and NaN are no JSON."""

    def refuse(constant):
        raise ValueError(f"{constant} is not valid JSON")

    return json.loads(text, parse_constant=refuse)


def test_json_of_an_infinite_perplexity_is_valid_json_with_null(tmp_path, monkeypatch, capsys):
    """A model pruned to noise has an infinite perplexity (``inf`` in the tables): ``--json`` wrote
    ``Infinity``, which JavaScript, jq, Go and serde refuse."""
    from runhelpers import Clock, insert_run

    from acetui_core.run.config import RunConfig

    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    insert_run(store, clock, "f0000001", RunConfig("m", "magnitude"), created=1.7e9, ppl=math.inf)
    for args in (["runs", "--json"], ["runs", "show", "f0000001", "--json"]):
        code, out, err = cli(monkeypatch, capsys, *args, "--store", str(tmp_path / "runs.db"))
        assert code == 0, err
        data = strict_json(out)
        run = data[0] if isinstance(data, list) else data
        assert run["results"]["ppl_wikitext2"] is None, out
    code, out, _ = cli(monkeypatch, capsys, "runs", "--store", str(tmp_path / "runs.db"))
    assert "inf" in out  # the table still says what the store keeps


@pytest.mark.parametrize(
    "args, message",
    [
        (["runs", "--store", "{tmp}"], "is a folder"),
        (["runs", "--store", "{tmp}/notes.txt"], "not an acetui run store"),
        (["runs", "--store", "{tmp}/notes.txt/runs.db"], "There is no run store"),
        (["compare", "m", "--methods", "wanda,nope"], "Unknown method 'nope'"),
        (["compare", "m", "--sparsity", "0.5,half"], "Sparsity 'half'"),
        (["sweep", "m", "--seeds", "0,one"], "--seeds must be a whole number, not 'one'"),
        (["runs", "--status", "done"], "Unknown status 'done'"),
    ],
)
def test_bad_input_gets_one_sentence(tmp_path, monkeypatch, capsys, args, message):
    (tmp_path / "notes.txt").write_text("not a database " * 100)
    code, out, err = cli(monkeypatch, capsys, *(a.format(tmp=tmp_path) for a in args))
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.slow  # starts acetui processes of its own
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_ends_a_run_between_layers_as_cancelled(
    layered_model, calib_file, gate, store_path, tmp_path, signum
):
    process = spawn("prune", layered_model, *gated(calib_file), "--store", store_path, tmp_path=tmp_path)
    run = held_at_the_gate(store_path, gate, process)
    process.send_signal(signum)
    assert process.wait(timeout=120) == 128 + signum  # 143 for SIGTERM, 130 for Ctrl-C
    run = Store(store_path).get_run(run.id)
    # The gate lets layer 1 go once the signal has reached the run: it ends after that layer, before layer 2.
    assert (run.status, run.layers_done) == ("cancelled", 2)
    assert [layer.index for layer in run.layers] == [0, 1]
    err = (tmp_path / "err.txt").read_text()
    assert "cancelled" in err and "Traceback" not in err


def catches(pid: int, signum: int = signal.SIGHUP) -> bool:
    """The process has a handler for ``signum`` (bit ``signum - 1`` of its caught-signals mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return bool(int(status.split("SigCgt:")[1].split()[0], 16) >> (signum - 1) & 1)


@pytest.mark.slow  # starts acetui processes of its own
def test_sigterm_while_the_command_starts_is_said_as_ctrl_c_is(layered_model, calib_file, store_path, tmp_path):
    """A SIGTERM in the seconds acetui takes to import its CLI and check the model ended it silently with 143,
    where Ctrl-C at the same point printed a line (CLI audit)."""
    process = spawn("prune", layered_model, "--calib", calib_file, "--store", store_path, tmp_path=tmp_path)
    wait_until(lambda: process.poll() is not None or catches(process.pid, signal.SIGTERM), "the handler", 60)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 143
    said = (tmp_path / "err.txt").read_text().strip().splitlines()[-1]
    assert said.startswith("acetui: interrupted;"), said


@pytest.mark.slow  # starts acetui processes of its own
@pytest.mark.parametrize("hung_up", ["in a layer", "while starting"])
def test_a_run_in_the_foreground_outlives_its_terminal(layered_model, calib_file, gate, store_path, tmp_path, hung_up):
    """SIGHUP (a dropped SSH session, a closed terminal) killed ``acetui prune`` where it stood, the layers
    under way lost and the run left to be found ``interrupted``; it now goes on and finishes. Its progress,
    on the terminal, goes nowhere (writing to a terminal that is gone fails); its ``--json``, sent to a file
    (``prune --json > result.json``), still arrives: the first fix silenced both, and a script got exit 0
    and an empty file. The same from the command's first instant: a hang-up in the seconds it takes to
    import the CLI (Enter, then the laptop closed) killed the command before its run existed."""
    import pty
    import threading

    terminal, stderr = pty.openpty()
    shown = bytearray()
    hangup = threading.Event()

    def show() -> None:  # the terminal: reads what the run prints until it is gone
        while not hangup.is_set():
            try:
                shown.extend(os.read(terminal, 4096))
            except OSError:
                return

    reader = threading.Thread(target=show, daemon=True)
    reader.start()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    args = ["prune", layered_model, *gated(calib_file, "until_opened"), "--json", "--store", store_path]
    with open(tmp_path / "result.json", "wb") as result:
        process = subprocess.Popen(
            [sys.executable, "-m", "acetui", *map(str, args)], stdout=result, stderr=stderr, env=env
        )
    os.close(stderr)

    def hang_up() -> None:
        process.send_signal(signal.SIGHUP)
        hangup.set()
        os.close(terminal)  # the terminal is gone: a write to it now fails

    try:
        if hung_up == "while starting":
            wait_until(lambda: catches(process.pid), "the command to guard against a hang-up", every=0.01)
            assert not store_path.exists()  # still importing: no run recorded, nothing loaded
            hang_up()
        run = held_at_the_gate(store_path, gate, process)
        if hung_up == "in a layer":
            hang_up()
            time.sleep(1)  # the signal reaches the run while the gate still holds it
        assert process.poll() is None
        (gate / "open").touch()
        assert process.wait(timeout=120) == 0
        run = Store(store_path).get_run(run.id)
        assert (run.status, run.layers_done) == ("finished", LAYERS)
        assert json.loads((tmp_path / "result.json").read_text())["run_id"] == run.id
    finally:  # a failure before the gate opens must not leave the run held at it for ever
        if process.poll() is None:
            process.kill()
    assert b"Traceback" not in shown


def test_a_compare_that_evaluates_nothing_lists_its_runs(make_tiny_model, fast, store_path, monkeypatch, capsys):
    """``compare --eval none`` printed nothing on stdout and exited 0: a script had no run id to go on (CLI audit)."""
    model = make_tiny_model("llama")
    args = ("compare", model, "--sparsity", "0.5,2:4", *fast, "--methods", "magnitude", "--eval", "none")
    code, out, err = cli(monkeypatch, capsys, *args, "--store", store_path)
    assert code == 0, err
    assert out.split() == [run.id for run in Store(store_path).list_runs()] and len(out.split()) == 2
    assert "No perplexity table: these 2 runs measured no WikiText-2 perplexity" in err


def test_a_stopped_compare_says_how_many_runs_were_cancelled(make_tiny_model, fast, store_path, monkeypatch, capsys):
    """SIGTERM in the first of three runs cancels the queue too; the CLI said "the run is recorded as cancelled"."""
    from acetui.commands import grid

    model = make_tiny_model("llama")
    args = ("compare", model, "--sparsity", "0.5,4:8,2:4", *fast, "--methods", "wanda", "--store", store_path)
    code, _, err = stopped_by_sigterm(monkeypatch, capsys, grid, *args)
    assert code == 143
    assert err.splitlines()[-1] == (
        "acetui: stopped; 3 runs are recorded as cancelled: those under way and those still queued "
        "(acetui runs lists them)."
    )


@pytest.mark.slow  # starts acetui processes of its own
def test_a_second_ctrl_c_stops_at_once_and_still_says_one_sentence(
    layered_model, calib_file, gate, store_path, tmp_path
):
    """runner.py's documented behaviour: the first Ctrl-C stops the run after its current layer, a second
    one stops it at once (here: inside layer 1, which the gate holds), recorded cancelled with the layers
    done, and the CLI exits 130 with one sentence."""
    process = spawn(
        "prune", layered_model, *gated(calib_file, "until_opened"), "--store", store_path, tmp_path=tmp_path
    )
    run = held_at_the_gate(store_path, gate, process)
    process.send_signal(signal.SIGINT)
    wait_until((gate / "cancel-seen").exists, "the first Ctrl-C to reach the run")
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=120) == 130
    err = (tmp_path / "err.txt").read_text()
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "acetui: interrupted; any run under way is recorded as cancelled."
    run = Store(store_path).get_run(run.id)
    assert (run.status, run.layers_done, run.error) == ("cancelled", 1, "Stopped at once by a second interrupt.")


@pytest.mark.slow  # starts acetui processes of its own
def test_sigkill_leaves_an_interrupted_run_with_its_finished_layers(
    layered_model, calib_file, gate, store_path, tmp_path
):
    process = spawn(
        "prune", layered_model, *gated(calib_file, "until_opened"), "--store", store_path, tmp_path=tmp_path
    )
    run = held_at_the_gate(store_path, gate, process)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    run = Store(store_path).get_run(run.id)
    assert (run.status, run.layers_done) == ("interrupted", 1)
    assert all(len(layer.linears) == 7 for layer in run.layers)
    # its end is the process's last sign of life, seconds before it died: not a time it finished (CLI audit)
    shown = subprocess.run(
        [sys.executable, "-m", "acetui", "runs", "show", run.id, "--store", str(store_path)],
        capture_output=True,
        text=True,
    ).stdout.splitlines()[1]
    assert "last seen" in shown and "finished" not in shown


@pytest.mark.slow  # starts acetui processes of its own
def test_a_detached_run_outlives_its_parent_and_can_be_watched(
    make_tiny_model, fast, gate, store_path, tmp_path, monkeypatch, capsys
):
    """The gate metric holds the run in its last layer, so it is still going when its parent has gone."""
    options = ["--method", f"{GATE}:until_opened", *fast, "--detach", "--store", store_path]
    parent = spawn("prune", make_tiny_model("llama"), *options, tmp_path=tmp_path)
    assert parent.wait(timeout=120) == 0
    run_id = (tmp_path / "out.txt").read_text().strip()
    run = held_at_the_gate(store_path, gate)  # the parent is gone, the run is not (and its SIGHUP guard is set)
    assert run.id == run_id
    assert run.pid != parent.pid and os.getsid(run.pid) == run.pid != os.getsid(0)  # a session of its own
    os.kill(run.pid, signal.SIGHUP)  # what a dropped SSH connection sends; ignored
    (gate / "open").touch()
    code, out, _ = cli(monkeypatch, capsys, "runs", "watch", run_id, "--store", store_path, "--interval", "0.1")
    assert code == 0 and "layer 1 pruned (2/2 done)" in out and f"run {run_id} finished: ppl" in out
    log = Path(Store(store_path).get_run(run_id).env["log"])
    assert log.parent == store_path.parent / "logs" and "finished: prune" in log.read_text()


@pytest.mark.slow  # starts acetui processes of its own
def test_a_detached_grid_goes_on_when_one_run_is_cancelled(
    layered_model, calib_file, gate, store_path, tmp_path, monkeypatch, capsys
):
    options = [option for option in gated(calib_file) if option not in ("--method", f"{GATE}:until_cancelled")]
    code, out, _ = cli(
        monkeypatch,
        capsys,
        "compare",
        layered_model,
        "--methods",
        f"{GATE}:until_cancelled,magnitude",
        "--sparsity",
        "0.5",
        *options,
        "--detach",
        "--store",
        store_path,
    )
    first, second = out.split()
    assert code == 0 and Store(store_path).get_run(second).status == "queued"
    assert held_at_the_gate(store_path, gate).id == first
    code, out, _ = cli(monkeypatch, capsys, "runs", "cancel", first, "--store", store_path)
    assert code == 0 and "stops at its next check" in out
    wait_for_runs(store_path, lambda runs: all(r.status in TERMINAL for r in runs), "both runs to end", timeout=180)
    store = Store(store_path)
    cancelled, finished = store.get_run(first), store.get_run(second)
    assert (cancelled.status, cancelled.layers_done) == ("cancelled", 2)
    assert (finished.status, finished.layers_done, finished.pid) == ("finished", LAYERS, cancelled.pid)


def test_compare_loads_the_model_once_and_prints_the_table(make_tiny_model, fast, store_path, monkeypatch, capsys):
    import acetui_core.modeling.models

    model = make_tiny_model("llama")
    code, out, _ = cli(
        monkeypatch,
        capsys,
        "prune",
        model,
        "--method",
        "ace",
        "--sparsity",
        "2:4",
        *fast,
        "--json",
        "--store",
        store_path,
    )
    alone = json.loads(out)["ppl_wikitext2"]
    loads = []
    real_load = acetui_core.modeling.models.load_model
    monkeypatch.setattr(
        acetui_core.modeling.models, "load_model", lambda *a, **k: loads.append(a) or real_load(*a, **k)
    )
    code, out, _ = cli(
        monkeypatch,
        capsys,
        "compare",
        model,
        "--methods",
        "wanda,ace",
        "--sparsity",
        "0.5,2:4",
        *fast,
        "--store",
        store_path,
    )
    assert code == 0 and len(loads) == 1
    lines = out.splitlines()
    assert lines[2].split() == ["|", "Method", "|", "50%", "|", "2:4", "|"]
    assert [line.split("|")[1].strip() for line in lines[4:6]] == ["Wanda-16", "CosP+VarP-16"]
    grid = Store(store_path).list_runs()[1:]
    assert [(r.status, r.config.method, r.config.sparsity) for r in grid] == [
        ("finished", "wanda", "0.5"),
        ("finished", "wanda", "2:4"),
        ("finished", "ace", "0.5"),
        ("finished", "ace", "2:4"),
    ]
    # The last run pruned a model the others had pruned before: reset must give it the dense weights back.
    assert grid[-1].ppl == pytest.approx(alone, rel=1e-6)


def test_a_model_is_copied_for_reset_only_while_a_later_run_reuses_it(make_tiny_model):
    """A dense copy of the decoder weights costs as much memory as the weights: a single run keeps none,
    a grid keeps one until its last run of the model has its weights back."""
    from dataclasses import replace

    from acetui_core.execution.modelcache import ModelCache
    from acetui_core.modeling.layouts import decoder_layers, prunable_linears
    from acetui_core.run.config import RunConfig

    single = RunConfig(model=str(make_tiny_model("llama")), method="wanda", sparsity="0.5", device="cpu")
    assert not ModelCache([single]).get(single).can_reset
    grid = [single, replace(single, method="ace")]
    cache = ModelCache(grid)
    first = cache.get(grid[0])
    weight = prunable_linears(decoder_layers(first.model)[0])["mlp.up_proj"].weight
    dense = weight.detach().clone()
    with torch.no_grad():
        weight.zero_()  # what a pruning run leaves behind, at its worst
    second = cache.get(grid[1])
    assert second is first and torch.equal(weight, dense)
    assert not second.can_reset


def test_sweep_puts_calibration_lengths_in_columns(make_tiny_model, fast, store_path, monkeypatch, capsys):
    options = [o for o in fast if o not in ("--seqlen", "16")]
    code, out, _ = cli(
        monkeypatch,
        capsys,
        "sweep",
        make_tiny_model("llama"),
        "--method",
        "wanda",
        "--seqlen",
        "8,16",
        *options,
        "--store",
        store_path,
    )
    assert code == 0
    assert out.splitlines()[2].split() == ["|", "Method", "|", "8", "|", "16", "|"]
    assert out.splitlines()[4].split("|")[1].strip() == "Wanda"
    assert [r.config.seqlen for r in Store(store_path).list_runs()] == [8, 16]


@pytest.mark.slow  # starts acetui processes of its own
def test_compare_runs_one_worker_per_gpu(make_tiny_model, fast, store_path, monkeypatch, capsys):
    import acetui_core.execution.launch

    monkeypatch.setattr(
        acetui_core.execution.launch, "visible_gpus", lambda: 2
    )  # this machine has none; the workers run on CPU
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    code, out, _ = cli(
        monkeypatch,
        capsys,
        "compare",
        make_tiny_model("llama"),
        "--methods",
        "wanda",
        "--sparsity",
        "0.5,2:4",
        *fast,
        "--store",
        store_path,
    )
    assert code == 0 and "| Wanda-16 |" in out
    runs = Store(store_path).list_runs()
    assert [r.status for r in runs] == ["finished", "finished"]
    assert [r.env["cuda_visible_devices"] for r in runs] == ["0", "1"] and runs[0].pid != runs[1].pid


def test_the_grid_is_split_over_the_gpus_the_user_made_visible(tmp_path, monkeypatch):
    import acetui_core.execution.worker
    from acetui_core.execution.launch import LocalProcesses

    spawned = []
    monkeypatch.setattr(
        acetui_core.execution.worker, "spawn", lambda store, ids, detach, env=None: spawned.append((ids, env))
    )
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    LocalProcesses(gpus=2).start(Store(tmp_path / "runs.db"), ["r1", "r2", "r3"])
    assert spawned == [(["r1", "r2"], {"CUDA_VISIBLE_DEVICES": "2"}), (["r3"], {"CUDA_VISIBLE_DEVICES": "3"})]
    spawned.clear()
    LocalProcesses(gpus=1).start(Store(tmp_path / "runs.db"), ["r1", "r2"])
    assert spawned == [(["r1", "r2"], None)]  # one GPU or none: one worker, the environment left alone


def test_runs_fits_a_terminal_of_80_columns_and_stays_one_line_a_run_in_a_pipe(tmp_path):
    """``acetui runs`` of SmolLM2's GGUF runs was about 98 columns: an 80-column terminal broke every line
    at its edge. In a terminal the model goes above its runs and long methods wrap; piped, a run is a line."""
    import fcntl
    import pty
    import struct
    import termios

    from runhelpers import Clock, insert_run

    from acetui_core.run.config import RunConfig

    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    gguf, calib = "/models/SmolLM2-135M-Instruct.Q4_1.gguf", "/data/c4-train.00000-of-01024.json"
    configs = [
        RunConfig(gguf, "wanda", sparsity="0.5", calib=calib),
        RunConfig(gguf, "ace", sparsity="2:4", calib=calib),
        RunConfig("Qwen/Qwen1.5-MoE-A2.7B", "wanda", sparsity="0", expert_sparsity=0.5, calib=calib),
    ]
    for n, config in enumerate(configs):
        insert_run(store, clock, f"r000000{n}", config, created=1.7e9 + n, ppl=30.5 + n)
    labels = [text for record in store.list_runs() for text in (record.label, record.config.target)]
    command = [sys.executable, "-m", "acetui", "runs", "--store", str(tmp_path / "runs.db")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("COLUMNS", None)

    piped = subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout.splitlines()
    assert max(len(line) for line in piped) > 80  # the case this test is about
    assert [line.split()[0] for line in piped[1:]] == ["r0000002", "r0000001", "r0000000"]
    assert all("SmolLM2-135M-Instruct.Q4_1" in line and "c4-train.00000-of-01024.json" in line for line in piped[2:])

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    process = subprocess.Popen(command, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    text = b""
    while chunk := _read_or_end(leader):
        text += chunk
    os.close(leader)
    assert process.wait(timeout=60) == 0
    lines = text.decode().replace("\r\n", "\n").rstrip("\n").split("\n")
    assert max(len(line) for line in lines) <= 80, lines
    # the newest first, each model named once above its runs, every word of each method and target on screen
    assert [line for line in lines if line.startswith("model ")] == [
        "model Qwen1.5-MoE-A2.7B",
        "model SmolLM2-135M-Instruct.Q4_1",
    ]
    assert [line.split()[0] for line in lines if line.startswith("r00")] == ["r0000002", "r0000001", "r0000000"]
    shown = " ".join(lines).split()
    assert all(word in shown for label in labels for word in label.split())
    # the calibration file's name folded in its column, under the run's first line
    at, first = lines[0].index("calib"), next(i for i, line in enumerate(lines) if line.startswith("r0000002"))
    pieces = [line[at:].split()[0] for line in lines[first : first + 3]]
    assert "".join(pieces) == "c4-train.00000-of-01024.json"


def _read_or_end(fd: int) -> bytes:
    """What a pseudo-terminal's leader reads next; empty once the process behind it closed it, or after a
    minute without output (the wait for the process then fails rather than the test hanging)."""
    import select

    if not select.select([fd], [], [], 60)[0]:
        return b""
    try:
        return os.read(fd, 4096)
    except OSError:  # EIO: no process holds the follower any more
        return b""
