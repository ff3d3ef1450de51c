"""Calibration windows: tokenizing lazily draws exactly the windows that tokenizing everything did."""

from __future__ import annotations

import json
import random

import pytest
import torch

from acetui_core.basics.errors import UserError
from acetui_core.modeling.data import LazyTokens, calibration_documents, calibration_windows, tokenized_calibration


def eager_windows(ids, nsamples, seqlen, seed):
    """The reference: over every document tokenized up front (``eager_c4``), Wanda's C4 sampler (lib/data.py
    get_c4): a random document longer than seqlen, a random window in it."""
    random.seed(seed)
    windows = []
    for _ in range(nsamples):
        while True:
            doc = ids[random.randint(0, len(ids) - 1)]
            if len(doc) > seqlen:
                break
        start = random.randint(0, len(doc) - seqlen - 1)
        windows.append(doc[start : start + seqlen])
    return torch.tensor(windows)


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir)


@pytest.fixture(scope="module")
def eager_c4(tokenizer):
    """Every document of the C4 sample tokenized up front in one batch, as acetui did before it tokenized
    lazily (once for the module: it takes seconds)."""
    documents, _ = calibration_documents("c4")
    return tokenizer(documents, add_special_tokens=True)["input_ids"]


@pytest.mark.parametrize(("nsamples", "seqlen", "seed"), [(128, 128, 0), (32, 16, 1), (16, 512, 7), (4, 2048, 3)])
def test_lazy_windows_equal_the_eager_ones_on_c4(tokenizer, eager_c4, nsamples, seqlen, seed):
    ids, _ = tokenized_calibration(tokenizer, "c4")
    lazy = calibration_windows(ids, nsamples, seqlen, seed)
    assert torch.equal(lazy, eager_windows(eager_c4, nsamples, seqlen, seed))


def test_only_the_drawn_documents_are_tokenized(tokenizer):
    ids = LazyTokens(tokenizer, calibration_documents("c4")[0])
    calibration_windows(ids, 16, 128, seed=11)
    assert 16 <= len(ids.ids) < len(ids) / 10


def test_a_corpus_with_no_long_enough_document_is_one_sentence(tokenizer, tmp_path):
    short = tmp_path / "short.jsonl"
    short.write_text('{"text": "a few words"}\n{"text": "and a few more words here"}\n')
    ids, _ = tokenized_calibration(tokenizer, str(short))
    with pytest.raises(
        UserError, match=r"does not hold 4 windows of 16 tokens \(its longest document has \d+ tokens\)"
    ):
        calibration_windows(ids, 4, 16, seed=0)


def test_wikitext2_windows_are_those_of_wandas_get_wikitext2(tokenizer, tmp_path, monkeypatch):
    """``--calib wikitext2`` drew other windows than Wanda's and SparseGPT's ``get_wikitext2``: it joined the
    train split with blank lines where they join it with spaces, and drew its one document before each
    window, which moved the seed's sequence of window starts."""
    from acetui_core.modeling.data import LOCAL_WIKITEXT2, calibration_sample

    rows = [
        {"text": ""},
        {"text": " = Valkyria = \n"},
        *({"text": f" line {i} of the story , told . \n"} for i in range(60)),
    ]
    train = tmp_path / LOCAL_WIKITEXT2["train"]
    train.parent.mkdir(parents=True)
    train.write_text("\n".join(map(json.dumps, rows)))
    monkeypatch.setenv("ACETUI_DATA_DIR", str(tmp_path))
    # The reference (lib/data.py get_wikitext2): one text, one random start per window.
    ids = tokenizer(" ".join(row["text"] for row in rows), return_tensors="pt").input_ids
    random.seed(3)
    starts = [random.randint(0, ids.shape[1] - 16 - 1) for _ in range(8)]
    expected = torch.cat([ids[:, i : i + 16] for i in starts])
    windows, where = calibration_sample(tokenizer, "wikitext2", 8, 16, seed=3)
    assert torch.equal(windows, expected) and where == str(train)
