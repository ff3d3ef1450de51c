"""Hostile inputs: one sentence on stderr, exit 2, never a traceback, and nothing recorded in the store.

The table names the command, how to prepare the place it reads, and a fragment of the sentence a user
must see. Causes are fixed, not cases: one parser for numbers and lists, one guard for OS errors on
paths, model loading that turns any loader failure into a sentence, checks before any work.
"""

from __future__ import annotations

import functools
import json
import math
import shutil
import string
from pathlib import Path

import pytest
import torch
from runhelpers import cli

from acetui_core.basics.errors import UserError
from acetui_core.storage.store import Store


def _calib(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def _data_with_test_split(tmp: Path, name: str, records: str) -> Path:
    """A data folder whose WikiText-2 test split holds ``records`` (JSON), and nothing else."""
    split = tmp / name / "wikitext-2-raw" / "hf_rows" / "test.json"
    split.parent.mkdir(parents=True)
    split.write_text(records)
    return tmp / name


def _broken_checkpoint(tmp: Path, model: Path, how: str) -> Path:
    folder = tmp / f"broken-{how}"
    shutil.copytree(model, folder)
    weights = folder / "model.safetensors"
    if how == "truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif how in ("no-weights", "no-tokenizer"):  # a config.json alone, or weights without their tokenizer
        for path in folder.iterdir():
            if path.name != "config.json" and (how == "no-weights" or "token" in path.name or "vocab" in path.name):
                path.unlink()
    else:
        config = json.loads((folder / "config.json").read_text())
        config["hidden_size"] = "wide" if how == "wrong-type" else 32
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def _checkpoint_with(tmp: Path, model: Path, name: str, extra: str | None) -> Path:
    """A copy of ``model``'s checkpoint folder, with one file of the user's in it when ``extra`` is given."""
    folder = tmp / name
    shutil.copytree(model, folder)
    if extra:
        (folder / extra).write_text("the user's own file")
    return folder


BROKEN = ("truncated", "wrong-type", "wrong-shape", "no-weights", "no-tokenizer")
GOOD_RUN = "a0000001"  # a finished run already in the store: no command below may touch it

# case -> (arguments, the sentence's fragment[, environment]); {name} is a place the test prepares. Every
# command runs from a working folder holding a file of the user's, with a store holding one finished run.
CASES = {
    "an empty -o": (["export", "--format", "csv", "-o", ""], "-o is empty; give a file name"),
    "an empty --store": (["runs", "--store", ""], "--store is empty; name the run store's file"),
    "an empty report folder": (["study", "report", "study.toml", "-o", ""], "-o is empty; give the report's folder."),
    "empty calibration file": (["prune", "{model}", "--calib", "{empty}"], "holds no text to calibrate on"),
    "text that is a number": (["prune", "{model}", "--calib", "{number}"], "whose 'text' is not a string (record 2)"),
    "text that is null": (["prune", "{model}", "--calib", "{null}"], "whose 'text' is not a string (record 1)"),
    "calibration record that is not JSON": (  # json counted the record's newline: "line 2 column 1"
        ["prune", "{model}", "--calib", "{corrupt}"],
        "corrupt.jsonl: line 1 is not a valid JSON record (Expecting ',' delimiter at column 15).",
    ),
    "JSON lines in a .json file": (
        ["prune", "{model}", "--calib", "{lines}"],
        "lines.json: line 3 is not a valid JSON record (Expecting ',' delimiter at column 13).",
    ),
    "negative share of a mixture": (
        ["prune", "{model}", "--calib", "c4@-1+wikitext2"],
        "acetui: The share of c4 in --calib must be positive (got -1).",
    ),
    "calibration text shorter than a window": (["prune", "{model}", "--calib", "{short}"], "does not hold 128 windows"),
    "a hub id with the hub switched off": (["prune", "MODEL"], "the hub is switched off (HF_HUB_OFFLINE)"),
    "more calibration windows than memory holds": (
        ["prune", "{model}", "--nsamples", "1000000000000"],
        "of memory (acetui plan; the calibration activations of --nsamples 1000000000000 windows",
    ),
    "unicode digit": (["prune", "{model}", "--seqlen", "²"], "--seqlen must be a number of tokens or 'full', not '²'"),
    "letters for a number": (["prune", "{model}", "--nsamples", "abc"], "--nsamples must be a whole number, not 'abc'"),
    "a negative count": (["prune", "{model}", "--nsamples", "-5"], "--nsamples must be at least 1 (got -5)"),
    "a negative seed": (["compare", "{model}", "--seeds", "0,-1"], "--seeds must be at least 0 (got -1)"),
    "a store inside the model": (["prune", "{home}", "--store", "{home}/r.db"], "lies inside the source model"),
    "a store inside the data folder": (
        ["prune", "{model}", "--method", "magnitude", "--eval", "none", "--store", "{nodata}/r.db"],
        "lies inside the data folder",
        {"ACETUI_DATA_DIR": "{nodata}"},
    ),
    "OWL's M at 0": (["prune", "{model}", "--allocation", "owl", "--owl-m", "0"], "--owl-m must be positive (got 0)"),
    "unicode digit in a list": (["compare", "{model}", "--seeds", "0,³"], "--seeds must be a whole number, not '³'"),
    "a seed given twice": (["compare", "{model}", "--seeds", "0,1,0"], "--seeds gives 0 twice; give each value once."),
    "a model given twice": (["compare", "{model}", "{model}"], "twice; give each model once."),
    "a model given twice by two paths": (
        ["sweep", "{model}", "{model}/.", "--seeds", "0,1"],
        "/.); give each model once.",
    ),
    "one calibration file named two ways": (
        ["compare", "{model}", "--calib", "{text},{nodata}/../text.txt"],
        "/text.txt twice (as ",  # it ran the same cells twice
    ),
    "one plug-in named two ways": (
        ["compare", "{model}", "--methods", "{plugin}:score,{nodata}/../plugin.py:score"],
        "/plugin.py:score twice (as ",
    ),
    "one sparsity written two ways": (
        ["compare", "{model}", "--sparsity", "0.5,2:4,0.50"],
        "--sparsity gives 0.5 twice; give each value once.",
    ),
    "a list option given twice": (  # it ran magnitude alone
        ["compare", "{model}", "--methods", "wanda", "--methods", "magnitude"],
        "--methods is given twice; give it once (a list is comma-separated: --methods wanda,magnitude).",
    ),
    "unicode digit for --last": (["runs", "--last", "²"], "--last must be a whole number, not '²'"),
    "letters for the zero-shot limit": (["eval", "{model}", "--limit", "x"], "--limit must be a whole number, not 'x'"),
    "letters for seconds": (["runs", "watch", GOOD_RUN, "--interval", "abc"], "--interval must be a number, not 'abc'"),
    "negative seconds": (["runs", "watch", GOOD_RUN, "--interval", "-1"], "--interval must be at least 0.1"),
    "a missing argument": (["runs", "show"], "Missing argument"),
    "unknown option": (["prune", "{model}", "--nsampels", "4"], "No such option: --nsampels"),
    "option without its value": (["prune", "{model}", "--nsamples"], "requires an argument"),
    "truncated safetensors": (["prune", "{truncated}"], "could not be loaded as a model"),
    "a folder of config.json alone": (["prune", "{no-weights}"], "holds no weights: no .safetensors or .bin file"),
    "weights without a tokenizer": (["compare", "{no-tokenizer}"], "holds no tokenizer: none of tokenizer.json"),
    "config value of the wrong type": (["prune", "{wrong-type}"], "could not be loaded as a model"),
    "weights that do not fit the config": (["prune", "{wrong-shape}"], "could not be loaded as a model"),
    "evaluation window too short": (["prune", "{model}", "--eval-seqlen", "1"], "--eval-seqlen must be at least 2"),
    "evaluation window too long": (["prune", "{model}", "--eval-seqlen", "4096"], "longer than the model's context"),
    "zero-shot batch size 0": (
        ["prune", "{model}", "--eval", "zeroshot", "--batch-size", "0"],
        "--batch-size must be at least 1",
    ),
    "a data folder without WikiText-2": (
        ["prune", "{model}", "--calib", "{text}"],
        "has no WikiText-2 test split",
        {"ACETUI_DATA_DIR": "{nodata}"},
    ),
    # found after every layer was pruned, as "Evaluation failed (ZeroDivisionError: ...)" or as calibration text
    "a WikiText-2 test split shorter than a window": (
        ["prune", "{model}", "--calib", "{text}", "--eval-seqlen", "32"],
        "holds only 1 token(s) of this model, fewer than one evaluation window of 32 (--eval-seqlen)",
        {"ACETUI_DATA_DIR": "{shorttest}"},
    ),
    "an empty WikiText-2 test split": (
        ["prune", "{model}", "--calib", "{text}"],
        "test.json holds no text to evaluate on.",
        {"ACETUI_DATA_DIR": "{emptytest}"},
    ),
    "a missing model, detached": (["prune", "/no/such/model", "--detach"], "Model path /no/such/model does not exist"),
    "a missing model in a comparison": (["compare", "/no/such/model"], "Model path /no/such/model does not exist"),
    "a missing model in a detached comparison": (
        ["compare", "{model}", "/no/such/model", "--detach"],
        "Model path /no/such/model does not exist",
    ),
    "a missing model in a sweep": (["sweep", "/no/such/model", "--seeds", "0,1"], "does not exist"),
    "calibration without text, detached": (
        ["compare", "{model}", "--calib", "{empty}", "--detach"],
        "holds no text to calibrate on",
    ),
    "save to -": (  # it made a folder named - in the working folder
        ["prune", "{model}", "--save", "-"],
        "--save - is not the standard output for a model; give the folder to save the checkpoint in.",
    ),
    "save where the OS refuses": (["prune", "{model}", "--save", "/proc/acetui-out"], "cannot be written"),
    "save over the working folder": (["prune", "{model}", "--save", ".", "--overwrite"], "is the working folder"),
    "save over the home folder": (
        ["prune", "{model}", "--save", "{home}", "--overwrite"],
        "is the home folder",
        {"HOME": "{home}"},
    ),
    "save over a folder with the user's files": (
        ["prune", "{model}", "--save", "{project}/figures", "--overwrite"],
        "--overwrite replaces only a checkpoint folder",
    ),
    "save over a checkpoint with a file of the user's": (
        ["prune", "{model}", "--save", "{annotated}", "--overwrite"],
        "holds notes.md",
    ),
    "save over the folder of the run store": (
        ["prune", "{model}", "--save", "{store-folder}", "--overwrite"],
        "runs.db",
    ),
    "a file where the logs folder goes": (
        ["prune", "{model}", "--store", "{blocked}/runs.db"],
        "Runs cannot keep their logs in",
    ),
    "sparsity 1.3": (["compare", "{model}", "--sparsity", "0.5,1.3"], "out of range"),
    "3:2": (["sweep", "{model}", "--sparsity", "3:2"], "smaller than M"),
    "unknown metric": (["compare", "{model}", "--methods", "wanda,cosine"], "Unknown method 'cosine'"),
    "OWL with N:M": (["prune", "{model}", "--allocation", "owl", "--sparsity", "2:4"], "needs unstructured sparsity"),
    "OWL lambda too wide": (["prune", "{model}", "--allocation", "owl", "--owl-lambda", "0.6"], "--owl-lambda 0.6"),
    "OWL lambda past 1 at a high sparsity": (  # it was told "must be at least 0"
        ["prune", "{model}", "--allocation", "owl", "--sparsity", "0.95", "--owl-lambda", "0.08"],
        "--owl-lambda 0.08 at --sparsity 0.95 could give a layer a sparsity of 1.03 (the layer with the fewest "
        "outliers, when every other has the most), pruning all of it: give a lambda under 0.05.",
    ),
    # a layer OWL would take to 0 or below is pruned at 0.01 as in OWL's code: --sparsity 0.05 --owl-lambda 0.08
    # (OWL's own lambda) was refused, told its layers would range over -0.03..0.13
    "OWL lambda below 0": (
        ["prune", "{model}", "--allocation", "owl", "--owl-lambda", "-0.1"],
        "--owl-lambda must be at least 0 (got -0.1).",
    ),
    "OWL M not a number": (["prune", "{model}", "--allocation", "owl", "--owl-m", "five"], "--owl-m must be a number"),
    "OWL with SparseGPT": (["prune", "{model}", "-m", "sparsegpt", "--allocation", "owl"], "needs a scoring method"),
    "OBS update of SparseGPT": (["prune", "{model}", "-m", "sparsegpt", "--update", "obs"], "needs a scoring method"),
    "unknown update": (["prune", "{model}", "--update", "lsq"], "Unknown --update 'lsq'; choose one of: none, obs."),
    "permute unstructured": (["prune", "{model}", "--permute", "lsa", "-s", "0.5"], "needs a sparsity such as 2:4"),
    "permute in a grid with a ratio": (
        ["compare", "{model}", "--permute", "greedy", "--sparsity", "2:4,0.5"],
        "--permute greedy reorders input channels for N:M patterns",
    ),
    "unknown permutation": (
        ["prune", "{model}", "-s", "2:4", "--permute", "ria"],
        "Unknown --permute 'ria'; choose one of: none, greedy, lsa.",
    ),
    "permute SparseGPT": (["prune", "{model}", "-m", "sparsegpt", "-s", "2:4", "--permute", "lsa"], "scoring method"),
    "unknown refinement": (
        ["prune", "{model}", "--refine", "sparsegpt"],
        "Unknown --refine 'sparsegpt'; choose one of: none, dsnot.",
    ),
    "refine SparseGPT": (["prune", "{model}", "-m", "sparsegpt", "--refine", "dsnot"], "needs a scoring method"),
    "DSnoT without cycles": (["prune", "{model}", "--refine", "dsnot", "--dsnot-cycles", "0"], "--dsnot-cycles"),
    "DSnoT negative threshold": (
        ["sweep", "{model}", "--refine", "dsnot", "--dsnot-threshold", "-1"],
        "--dsnot-threshold must be at least 0",
    ),
    "RIA alpha not a number": (["prune", "{model}", "-m", "ria", "--ria-alpha", "abc"], "--ria-alpha must be a number"),
    "RIA alpha negative": (["prune", "{model}", "-m", "ria", "--ria-alpha", "-1"], "--ria-alpha must be at least 0"),
    "DSnoT unknown parameter": (["prune", "{model}", "--refine", "dsnot", "--dsnot-steps", "5"], "--dsnot-steps"),
    "DSnoT unknown acceptance rule": (
        ["compare", "{model}", "--refine", "dsnot", "--dsnot-accept", "lower"],
        "Unknown --dsnot-accept 'lower'; choose one of: threshold, decrease.",
    ),
    "unknown VarP scale": (
        ["compare", "{model}", "--varp-scale", "std"],
        "Unknown --varp-scale 'std'; choose one of: none, rms, max.",
    ),
    "unknown VarP form": (
        ["prune", "{model}", "--varp-form", "exact"],
        "Unknown --varp-form 'exact'; choose one of: series, inverse.",
    ),
    "export of no run": (["export", "--runs", "ffff"], "There is no run 'ffff'"),
    "last 0": (["export", "--last", "0"], "--last must be at least 1"),
    "export where the OS refuses": (["export", "-o", "/proc/acetui.csv"], "Cannot use /proc/acetui.csv"),
    "remove a good and a missing run": (["runs", "rm", GOOD_RUN, "ffff"], "There is no run 'ffff'"),
    "cancel a good and a missing run": (["runs", "cancel", GOOD_RUN, "ffff"], "There is no run 'ffff'"),
}


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_input_gets_one_sentence_exit_2_and_leaves_the_store_unchanged(
    case, tmp_path, make_tiny_model, monkeypatch, capsys
):
    from runhelpers import Clock, insert_run

    from acetui_core.run.config import RunConfig

    model = make_tiny_model("llama")
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "logs").write_text("a file where a folder should be")
    store = tmp_path / "store" / "runs.db"
    insert_run(
        Store(store, clock=Clock()), Clock(), GOOD_RUN, RunConfig("org/m", "wanda", "0.5"), created=1.7e9, ppl=9.0
    )
    project = tmp_path / "project"  # the working folder: the user's files, nothing acetui made
    project.mkdir()
    (project / "paper.tex").write_text("\\section{Results}")
    (project / "figures").mkdir()
    (project / "figures" / "ppl.pdf").write_text("a figure of the user's")
    nodata = tmp_path / "nodata"
    nodata.mkdir()
    ready = {"model": model, "blocked": blocked, "project": project, "nodata": nodata, "store-folder": store.parent}
    # The other places are built only when a case names them: each checkpoint copy is ~25 MB, over 60 rows.
    builders = {
        "home": lambda: _checkpoint_with(tmp_path, model, "home", None),
        "annotated": lambda: _checkpoint_with(tmp_path, model, "annotated", "notes.md"),
        "empty": lambda: _calib(tmp_path, "empty.jsonl", ""),
        "number": lambda: _calib(tmp_path, "number.jsonl", '{"text": "words"}\n{"text": 42}\n'),
        "null": lambda: _calib(tmp_path, "null.jsonl", '{"text": null}\n'),
        "corrupt": lambda: _calib(tmp_path, "corrupt.jsonl", '{"text": "abc"\n{broken\n'),
        "lines": lambda: _calib(tmp_path, "lines.json", '{"text": "a"}\n\n{"text": "b"\n'),
        "text": lambda: _calib(tmp_path, "text.txt", "Calibration text of a few words. " * 50),
        "short": lambda: _calib(tmp_path, "short.txt", "short text"),
        "plugin": lambda: _calib(tmp_path, "plugin.py", "def score(W, stats, opts):\n    return W.abs()\n"),
        "shorttest": lambda: _data_with_test_split(tmp_path, "shorttest", '[{"text": "hi"}]'),
        "emptytest": lambda: _data_with_test_split(tmp_path, "emptytest", "[]"),
        **{how: functools.partial(_broken_checkpoint, tmp_path, model, how) for how in BROKEN},
    }
    args, fragment, *env = CASES[case]
    env = env[0] if env else {}
    named = {field for text in [*args, *env.values()] for _, field, _, _ in string.Formatter().parse(text) if field}
    places = {**ready, **{name: builders[name]() for name in named - ready.keys()}}
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(**places))
    args = [arg.format(**places) for arg in args]
    if "--store" not in args and args[0] != "eval":  # after the command's words: `runs rm` has its own --store
        words = 2 if args[0] in ("runs", "study") and len(args) > 1 and not args[1].startswith("-") else 1
        args = [*args[:words], "--store", str(store), *args[words:]]
    monkeypatch.chdir(project)
    watched = [project, store.parent, *(places[name] for name in ("home", "annotated") if name in places)]
    before = {path: _snapshot(path) for path in watched}
    capsys.readouterr()  # what building the fixtures printed
    code, out, err = cli(monkeypatch, capsys, *args)
    assert code == 2, err
    assert err.startswith("acetui: ") and err.count("\n") == 1 and "Traceback" not in err
    assert fragment in err, err
    assert [(run.id, run.status) for run in Store(store).list_runs()] == [(GOOD_RUN, "finished")]
    if (blocked / "runs.db").exists():
        assert Store(blocked / "runs.db").list_runs() == []
    for path, files in before.items():  # nothing deleted or written beside the user's files
        assert _snapshot(path).keys() - {"runs.db-wal", "runs.db-shm"} == files.keys() - {"runs.db-wal", "runs.db-shm"}


def test_nan_in_a_weight_is_reported_with_the_layer(make_tiny_model, tmp_path):
    from acetui_core.modeling.layouts import decoder_layers
    from acetui_core.modeling.models import load_model
    from acetui_core.pruning import pipeline
    from acetui_core.run.config import RunConfig

    loaded = load_model(str(make_tiny_model("llama")), device="cpu")
    with torch.no_grad():
        decoder_layers(loaded.model)[1].mlp.up_proj.weight[3, 5] = float("nan")
    with pytest.raises(UserError, match="The weights of layer 1 mlp.up_proj contain NaN or inf"):
        pipeline.run(RunConfig(model=loaded.source, method="magnitude", sparsity="0.5", evals=[]), loaded=loaded)


@pytest.mark.parametrize("method", ["ria", "ria+varp"])
def test_an_overflowing_ria_alpha_is_one_sentence_naming_the_linear_and_the_power(method, make_tiny_model):
    """RIA's ``||X_j||^alpha`` passes float32's largest number at a large --ria-alpha: the sentence names
    the setting and the power from which this linear overflows, not torch.histc's complaint about inf."""
    from acetui_core.modeling.models import load_model
    from acetui_core.pruning import pipeline
    from acetui_core.run.config import RunConfig

    loaded = load_model(str(make_tiny_model("llama")), device="cpu")
    config = RunConfig(model=loaded.source, method=method, ria_alpha=1000.0, sparsity="0.5", nsamples=2, evals=[])
    with pytest.raises(UserError) as error:
        pipeline.run(config, loaded=loaded)
    sentence = str(error.value)
    assert sentence.startswith(f"Method '{method}' gave ") and " scores for layer 0 " in sentence, sentence
    assert "to the power --ria-alpha 1000 overflows float32 (it does from a power of " in sentence, sentence
    assert sentence.endswith("give a smaller --ria-alpha."), sentence


@pytest.mark.parametrize("group", ["row", "layer"])  # scored and masked a slice of rows at a time, or scored so
def test_a_builtin_score_that_is_not_finite_is_one_sentence(group, make_tiny_model, monkeypatch):
    from dataclasses import replace

    from acetui_core.modeling.models import load_model
    from acetui_core.pruning import pipeline
    from acetui_core.run.config import RunConfig
    from acetui_core.scores.metrics import METHODS

    monkeypatch.setitem(METHODS, "wanda", replace(METHODS["wanda"], score=lambda W, stats, opts: W / 0))
    loaded = load_model(str(make_tiny_model("llama")), device="cpu")
    config = RunConfig(model=loaded.source, method="wanda", group=group, sparsity="0.5", nsamples=2, evals=[])
    with pytest.raises(UserError, match=r"^Method 'wanda' gave (NaN|infinite) scores for layer 0 .*, so nothing "):
        pipeline.run(config, loaded=loaded)


def test_a_float32_run_is_not_told_to_use_float32(make_tiny_model):
    from acetui_core.modeling.layouts import decoder_layers
    from acetui_core.modeling.models import load_model
    from acetui_core.pruning import pipeline
    from acetui_core.run.config import RunConfig

    loaded = load_model(str(make_tiny_model("llama")), device="cpu")
    with torch.no_grad():
        decoder_layers(loaded.model)[0].input_layernorm.weight.fill_(float("inf"))
    with pytest.raises(UserError) as error:
        pipeline.run(
            RunConfig(model=loaded.source, method="wanda", sparsity="0.5", nsamples=2, evals=[]), loaded=loaded
        )
    assert "contain NaN or inf" in str(error.value) and "--dtype float32" not in str(error.value)


def test_a_perplexity_beyond_floats_is_infinite_not_a_crash():
    from acetui_core.pruning.evaluate import perplexity, ppl

    class Noise(torch.nn.Module):
        """Puts all probability on token 0 with a margin no float can exponentiate back."""

        def __init__(self):
            super().__init__()
            self.anchor = torch.nn.Parameter(torch.zeros(1))

        def forward(self, input_ids, use_cache=False):
            logits = torch.full((*input_ids.shape, 8), -1e4)
            logits[..., 0] = 1e4
            return type("Out", (), {"logits": logits})()

    losses, total = perplexity(Noise(), torch.ones(64, dtype=torch.long), seqlen=16)
    assert ppl(losses) == math.inf and (len(losses.nll), total) == (4, 4)


def test_one_damaged_row_does_not_hide_the_others(tmp_path, monkeypatch, capsys):
    import sqlite3

    from runhelpers import Clock, insert_run

    from acetui_core.run.config import RunConfig

    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    for number in range(3):
        insert_run(
            store,
            clock,
            f"e000000{number}",
            RunConfig(model="org/m", method="wanda", sparsity="0.5", seed=number),
            created=1_700_000_000.0 + number,
            ppl=10.0 + number,
        )
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE runs SET results = '{\"ppl_wikitext2\": \"many\"' WHERE id = 'e0000001'")
    db.close()
    code, out, err = cli(monkeypatch, capsys, "runs", "--store", store.path)
    assert code == 0, err
    assert all(f"e000000{n}" in out for n in range(3))
    assert "finished (damaged)" in out and "run e0000001 is damaged in the store: unreadable results" in out
    code, out, err = cli(monkeypatch, capsys, "export", "--format", "markdown", "--store", store.path)
    # the two readable runs, seeds 0 and 2 (10 and 12: their geometric mean, the centre of a cell's test)
    assert code == 0 and "| Wanda-16 | **10.95** ± 1.41 (n=2) |" in out


@pytest.mark.parametrize(
    ("column", "bad", "what"),
    [("config", "{bad", "settings"), ("results", '{"ppl_wikitext2": "abc"}', "results")],
)
def test_a_run_whose_settings_are_damaged_is_left_out_of_tables_and_said_so(
    tmp_path, monkeypatch, capsys, column, bad, what
):
    """A damaged config row: its numbers cannot be placed in a cell (its settings are unknown), so every
    table, export, verdict and figure leaves it out with one line on stderr, and the run lists keep it. A
    finished run's damaged results were left out of every table without a word."""
    import csv
    import io
    import sqlite3

    from runhelpers import Clock, insert_run

    from acetui_core.run.config import RunConfig

    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    for number, method in enumerate(("wanda", "ria", "ace")):
        insert_run(
            store,
            clock,
            f"e000000{number}",
            RunConfig(model="org/m", method=method, sparsity="0.5"),
            created=1_700_000_000.0 + number,
            ppl=10.0 + number,
        )
    with sqlite3.connect(store.path) as db:
        db.execute(f"UPDATE runs SET {column} = ? WHERE id = 'e0000001'", (bad,))
    db.close()
    note = (
        f"Left out 1 damaged run (e0000001): its {what} cannot be read; "
        "acetui runs show e0000001 says what is damaged.\n"
    )
    for command in (
        ["export", "--format", "latex"],
        ["export", "--format", "markdown"],
        ["verdict"],
        ["figure", "pareto", "-o", tmp_path / "pareto.tex"],
    ):
        code, out, err = cli(monkeypatch, capsys, *command, "--store", store.path)
        assert code == 0 and err == note, (command, err)
        assert "RIA" not in out, (command, out)
    assert "RIA" not in (tmp_path / "pareto.tex").read_text()
    code, out, err = cli(monkeypatch, capsys, "export", "--format", "csv", "--store", store.path)
    assert code == 0 and err == note
    assert [row["id"] for row in csv.DictReader(io.StringIO(out))] == ["e0000000", "e0000002"]
    code, out, err = cli(monkeypatch, capsys, "export", "--runs", "e0000001", "--store", store.path)
    assert code == 2 and err.startswith(note) and "No run in" in err
    code, out, err = cli(monkeypatch, capsys, "runs", "--store", store.path)
    assert code == 0 and "e0000001" in out and f"unreadable {column}" in out, out + err
    code, out, err = cli(monkeypatch, capsys, "runs", "show", "e0000001", "--store", store.path)
    assert code == 0 and f"damaged: unreadable {column}" in out, out + err


def test_a_run_recorded_with_a_choice_this_version_does_not_know_lists_with_its_raw_value(
    tmp_path, monkeypatch, capsys
):
    """A store written by a newer acetui may hold a value a choice setting or the executor does not have
    here (the choices are checked where a user types them, not where a record is read): the run lists and
    shows with that value, never as damaged."""
    import sqlite3

    from runhelpers import Clock, insert_run

    from acetui_core.run.config import SETTINGS, RunConfig

    newer = {name: f"{name}-from-a-newer-acetui" for name, spec in SETTINGS.items() if spec.choices}
    newer["evals"] = ["wikitext2", "evals-from-a-newer-acetui"]
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    config = RunConfig(model="org/m", method="wanda", sparsity="0.5", **newer)
    insert_run(store, clock, "f0000000", config, created=1_700_000_000.0, ppl=10.0)
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE runs SET executor = 'executor-from-a-newer-acetui'")
    db.close()
    assert store.get_run("f0000000").executor == "executor-from-a-newer-acetui"
    code, out, err = cli(monkeypatch, capsys, "runs", "--store", store.path)
    assert code == 0 and "f0000000" in out and "damaged" not in out + err, out + err
    code, out, err = cli(monkeypatch, capsys, "runs", "show", "f0000000", "--store", store.path)
    assert code == 0 and "permute-from-a-newer-acetui" in out and "damaged" not in out + err, out + err
