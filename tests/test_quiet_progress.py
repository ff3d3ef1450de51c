"""transformers' own tqdm bars (loading weights, writing shards, the GGUF reader's de-quantizing bar)
stay out of the CLI's live display and out of run logs: our Stage events show those steps."""

from __future__ import annotations

from acetui_core.modeling.checkpoint import save_checkpoint
from acetui_core.modeling.models import load_model, quiet_transformers

BAR_WORDS = ("Loading weights", "Writing model shards", "de-quantizing", "it/s]")


def test_loading_and_saving_a_model_draw_no_library_bars(make_tiny_model, tmp_path, capfd):
    model = str(make_tiny_model("llama"))  # built (and saved, with its bar) before the capture starts
    capfd.readouterr()
    loaded = load_model(model, device="cpu", dtype="float32")
    save_checkpoint(loaded.model, loaded.tokenizer, str(tmp_path / "saved"), overwrite=False)
    err = capfd.readouterr().err
    assert not [word for word in BAR_WORDS if word in err], err


def test_the_gguf_readers_own_bar_is_muted_and_comes_back_after(capfd):
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    with quiet_transformers():
        list(gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."))
        assert not hf_logging.is_progress_bar_enabled()
    assert "de-quantizing" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()  # the switch is put back for other users of transformers
    list(gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."))
    assert "de-quantizing" in capfd.readouterr().err  # the test above can fail
