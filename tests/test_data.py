"""Calibration windows: tokenizing lazily draws exactly the windows that tokenizing everything did."""

from __future__ import annotations

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
