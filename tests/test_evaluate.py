"""WikiText-2 perplexity never holds a batch's whole logits: the head makes them a few positions at a time,
to the same per-window losses as the whole logits give (issue 35, item 4)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from acetui_core.modeling.data import wikitext2_test_ids
from acetui_core.modeling.models import load_model
from acetui_core.modeling.streaming import load_for_run
from acetui_core.pruning import evaluate


@pytest.fixture
def tiny(make_tiny_model):
    return load_model(str(make_tiny_model("llama")), device="cpu", dtype="float32")


def _largest_head_output(model, monkeypatch, run) -> int:
    largest = [0]
    hook = model.get_output_embeddings().register_forward_hook(
        lambda module, args, out: largest.__setitem__(0, max(largest[0], out.numel()))
    )
    try:
        run()
    finally:
        hook.remove()
    return largest[0]


def test_the_head_makes_a_few_positions_of_logits_at_a_time(tiny, monkeypatch):
    monkeypatch.setattr(evaluate, "LOGIT_ENTRIES_PER_CHUNK", 2**20)
    ids = wikitext2_test_ids(tiny.tokenizer)
    vocabulary = tiny.model.get_output_embeddings().weight.shape[0]
    largest = _largest_head_output(tiny.model, monkeypatch, lambda: evaluate.perplexity(tiny.model, ids, 64, limit=8))
    assert largest <= 2**20 < 8 * 64 * vocabulary  # the batch's whole logits would be 8 x 64 x vocabulary


def test_losses_in_chunks_of_positions_equal_those_of_the_whole_logits(tiny, monkeypatch):
    ids = wikitext2_test_ids(tiny.tokenizer)[: 4 * 64].reshape(4, 64)
    vocabulary = tiny.model.get_output_embeddings().weight.shape[0]
    with torch.no_grad():
        whole = evaluate.windows_nll(tiny.model(input_ids=ids, use_cache=False).logits, ids)
        for positions in (1, 5, 63):  # one position, a chunk that does not divide 63, all at once
            monkeypatch.setattr(evaluate, "LOGIT_ENTRIES_PER_CHUNK", positions * 4 * vocabulary)
            assert evaluate.batch_nll(tiny.model, ids) == whole


def test_a_streamed_evaluation_makes_its_logits_in_chunks_too(make_tiny_model, monkeypatch):
    monkeypatch.setattr(evaluate, "LOGIT_ENTRIES_PER_CHUNK", 2**20)
    loaded = load_for_run(str(make_tiny_model("llama")), device="cpu", dtype="float32", offload="disk")
    ids = wikitext2_test_ids(loaded.tokenizer)
    run = lambda: evaluate.streamed_perplexity(loaded, loaded.streamed, ids, 64, limit=8)  # noqa: E731
    assert _largest_head_output(loaded.model, monkeypatch, run) <= 2**20


def test_a_nan_loss_is_no_perplexity_and_an_overflow_an_infinite_one():
    """A NaN window (an overflow in the model) was reported as an infinite perplexity."""
    import math

    from acetui_core.run.records import WindowLosses

    def losses(nll: list[float]) -> WindowLosses:
        return WindowLosses("wikitext2", "test", 4, None, nll, [4] * len(nll))

    assert math.isnan(evaluate.ppl(losses([8.0, float("nan")])))
    assert evaluate.ppl(losses([8.0, 4e308])) == math.inf and evaluate.ppl(losses([8.0, 8.0])) == pytest.approx(
        math.e**2
    )


def test_a_run_records_the_test_text_it_evaluated_and_another_copy_is_another_text(tiny, tmp_path, monkeypatch):
    """Runs evaluated on another copy of WikiText-2 (an edited file in another ACETUI_DATA_DIR) recorded the
    same windows as these, so tables ranked and paired their perplexities together."""
    import os

    from acetui_core.modeling.data import LOCAL_WIKITEXT2, wikitext2_test_identity
    from acetui_core.run.config import RunConfig

    shared = wikitext2_test_identity()
    config = RunConfig(model="tiny", method="wanda", sparsity="0.5", evals=["wikitext2"], eval_limit=1, eval_seqlen=64)
    assert evaluate.evaluate(tiny, config).ppl_text == shared and len(shared) == 16
    rows = (Path(os.environ["ACETUI_DATA_DIR"]) / LOCAL_WIKITEXT2["test"]).read_text().splitlines()
    for name, text in {"copy": rows, "edited": [*rows[:3], '{"text":" An edited line .\\n"}', *rows[4:]]}.items():
        path = tmp_path / name / LOCAL_WIKITEXT2["test"]
        path.parent.mkdir(parents=True)
        path.write_text("\n".join(text) + "\n")
    monkeypatch.setenv("ACETUI_DATA_DIR", str(tmp_path / "copy"))
    assert wikitext2_test_identity() == shared
    monkeypatch.setenv("ACETUI_DATA_DIR", str(tmp_path / "edited"))
    assert wikitext2_test_identity() != shared
    assert evaluate.evaluate(tiny, config).ppl_text == wikitext2_test_identity()
