"""Score histograms with their pruned/kept split per bin, from the mask the pipeline applied."""

import json

import torch

from acetui_core.pruning import histograms, pipeline
from acetui_core.run.config import RunConfig
from acetui_core.run.events import LayerPruned
from acetui_core.run.records import Histogram, from_dict
from acetui_core.scores.masks import prune_mask
from acetui_core.scores.sparsity import parse_sparsity

# Rows 1..8, 9..16, 17..24, 25..32: four linear bins of width 7.75 hold one row each.
SCORES = torch.arange(1, 33, dtype=torch.float32).reshape(4, 8)


def test_two_of_four_prunes_half_of_every_bin():
    mask, threshold = prune_mask(SCORES, parse_sparsity("2:4"), "row")
    h = histograms.histogram(SCORES, threshold, pruned=mask, bins=4)
    assert threshold is None and not h.log
    assert h.counts == [8, 8, 8, 8]
    assert h.pruned == [4, 4, 4, 4]  # in each group of four, the two lowest: 1, 2, 5, 6 in the first row


def test_one_threshold_for_the_layer_prunes_the_low_bins_whole():
    mask, threshold = prune_mask(SCORES, parse_sparsity("0.5"), "layer")
    h = histograms.histogram(SCORES, threshold, pruned=mask, bins=4)
    assert threshold == 16.0
    assert h.pruned == [8, 8, 0, 0]


def test_without_a_mask_there_is_no_split():
    assert histograms.histogram(SCORES, None, bins=4).pruned is None


def test_a_histogram_stored_before_the_split_still_reads():
    old = {"edges": [0.0, 1.0, 2.0], "counts": [3, 4], "threshold": 1.0, "log": False, "stride": 1}
    h = from_dict(Histogram, json.loads(json.dumps(old)))
    assert h.pruned is None and h.counts == [3, 4]


def test_the_pipeline_records_the_masks_pruned_counts(make_tiny_model):
    """On a tiny LLaMA at 2:4 every linear is small enough to be binned whole (stride 1): the pruned
    counts add up to exactly half its weights."""
    config = RunConfig(
        model=str(make_tiny_model("llama")), method="wanda", sparsity="2:4", nsamples=2, seqlen=8, evals=[]
    )
    events = []
    pipeline.run(config, events.append)
    linears = [linear for e in events if isinstance(e, LayerPruned) for linear in e.layer.linears]
    assert linears
    for linear in linears:
        h = linear.histogram
        assert h.stride == 1 and h.threshold is None
        assert sum(h.pruned) == linear.d_out * linear.d_in // 2, linear.name
        assert all(0 <= p <= c for p, c in zip(h.pruned, h.counts, strict=False))
