"""--save: a checkpoint appears whole or not at all, --overwrite replaces only what acetui could have written,
and a failure after pruning says where the pruned weights are or how to keep them."""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap

import pytest

from acetui_core.basics.errors import UserError
from acetui_core.execution.launch import InProcess, launch
from acetui_core.modeling.checkpoint import save_checkpoint
from acetui_core.modeling.models import load_model
from acetui_core.pruning import evaluate, pipeline
from acetui_core.run.config import RunConfig
from acetui_core.storage.store import Store


def _config(model, **changes) -> RunConfig:
    return RunConfig(**{"model": str(model), "method": "magnitude", "sparsity": "0.5", "evals": [], **changes})


def _siblings(folder):
    return sorted(path.name for path in folder.iterdir())


@pytest.mark.parametrize("offload", ["none", "auto"])  # a run without evaluation streams: written layer by layer
def test_overwrite_replaces_a_checkpoint_acetui_wrote(make_tiny_model, tmp_path, offload):
    model, out = make_tiny_model("llama"), tmp_path / "pruned"
    weights = out / ("model.safetensors" if offload == "none" else "model.safetensors.index.json")
    first = pipeline.run(_config(model, save=str(out), offload=offload))
    assert first.saved_to == str(out) and weights.is_file()
    stamp = weights.stat().st_mtime_ns
    with pytest.raises(UserError, match="exists and is not empty; pass --overwrite"):
        pipeline.run(_config(model, save=str(out), offload=offload))
    pipeline.run(_config(model, save=str(out), overwrite=True, sparsity="0.25", offload=offload))
    assert weights.stat().st_mtime_ns != stamp
    assert _siblings(tmp_path) == ["pruned"]  # no temporary folder left beside it
    assert "config.json" in _siblings(out) and all(not name.startswith(".") for name in _siblings(out))


def test_a_full_disk_leaves_no_half_checkpoint_and_keeps_the_old_one(make_tiny_model, tmp_path, monkeypatch):
    loaded = load_model(str(make_tiny_model("llama")), device="cpu")
    out = tmp_path / "pruned"
    save_checkpoint(loaded.model, loaded.tokenizer, str(out), overwrite=False)
    before = {path.name: path.read_bytes() for path in out.iterdir()}

    def full_disk(folder, **kwargs):
        (folder / "model.safetensors").write_bytes(b"half a tensor")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(loaded.model, "save_pretrained", full_disk)
    with pytest.raises(UserError, match=r"failed \(No space left on device\); no partial checkpoint was left"):
        save_checkpoint(loaded.model, loaded.tokenizer, str(out), overwrite=True)
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before
    with pytest.raises(UserError, match="no partial checkpoint was left"):
        save_checkpoint(loaded.model, loaded.tokenizer, str(tmp_path / "fresh"), overwrite=False)
    assert _siblings(tmp_path) == ["pruned"]


def test_a_file_size_limit_the_os_enforces_is_one_sentence(make_tiny_model, tmp_path):
    """The real writers (safetensors, the tokenizer's JSON) meet a real OS refusal: a file size limit."""
    script = textwrap.dedent(
        f"""
        import resource, signal
        from acetui_core.modeling.checkpoint import save_checkpoint
        from acetui_core.basics.errors import UserError
        from acetui_core.modeling.models import load_model
        loaded = load_model({str(make_tiny_model("llama"))!r}, device="cpu")
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing us
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        try:
            save_checkpoint(loaded.model, loaded.tokenizer, {str(tmp_path / "out")!r}, overwrite=False)
        except UserError as error:
            print(error)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "no partial checkpoint was left" in done.stdout, done.stdout
    assert _siblings(tmp_path) == []


def _failing_evaluation(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(evaluate, "perplexity", broken)


def test_a_failed_evaluation_says_how_to_keep_the_weights_and_keeps_the_layers(make_tiny_model, tmp_path, monkeypatch):
    _failing_evaluation(monkeypatch)
    store = Store(tmp_path / "runs.db")
    config = RunConfig(model=str(make_tiny_model("llama")), method="magnitude", sparsity="0.5", eval_limit=1)
    [run_id] = launch([config], InProcess(), store)
    run = store.get_run(run_id)
    assert run.status == "failed" and len(run.layers) == 2
    assert "Evaluation failed (RuntimeError: CUDA error" in run.error
    assert run.error.endswith("The pruned weights were not kept; pass --save DIR to keep them next time.")


def test_a_failed_evaluation_after_save_names_the_checkpoint(make_tiny_model, tmp_path, monkeypatch):
    _failing_evaluation(monkeypatch)
    out = tmp_path / "pruned"
    config = RunConfig(model=str(make_tiny_model("llama")), method="magnitude", sparsity="0.5", save=str(out))
    with pytest.raises(UserError, match=f"The pruned model is saved in {out}"):
        pipeline.run(config)
    assert (out / "model.safetensors").is_file()
