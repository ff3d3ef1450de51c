"""Masks: exact per-row counts, one per-layer threshold, valid N:M groups, deterministic ties."""

import pytest
import torch

from acetui_core.basics.errors import UserError
from acetui_core.scores.masks import check_nm_fits, kth_smallest, layer_mask, nm_mask, prune_mask, row_mask
from acetui_core.scores.sparsity import parse_sparsity


@pytest.mark.parametrize("ratio", [0.1, 0.5, 0.7, 0.999])
def test_row_mask_prunes_floor_din_times_s_per_row(ratio):
    scores = torch.rand(7, 37, generator=torch.Generator().manual_seed(1))
    mask, cutoff = row_mask(scores, ratio)
    assert cutoff == scores.masked_fill(~mask, -1).max(dim=1).values.median().item()
    assert mask.sum(dim=1).tolist() == [int(37 * ratio)] * 7
    # every pruned score is below every kept score of its row
    for r in range(7):
        assert scores[r][mask[r]].max() <= scores[r][~mask[r]].min()


def test_layer_mask_uses_one_threshold():
    scores = torch.rand(9, 20, generator=torch.Generator().manual_seed(2))
    mask, cutoff = layer_mask(scores, 0.4)
    assert mask.sum().item() == int(180 * 0.4)
    assert scores[mask].max() <= scores[~mask].min()
    assert mask.sum(dim=1).tolist() != [8] * 9  # rows differ: the competition is layer-wide
    assert cutoff == scores[mask].max().item()


@pytest.mark.parametrize("pattern", ["2:4", "4:8", "1:3"])
def test_nm_mask_keeps_exactly_n_in_every_group(pattern):
    sp = parse_sparsity(pattern)
    scores = torch.rand(5, 24, generator=torch.Generator().manual_seed(3))
    mask, cutoff = prune_mask(scores, sp, "row")
    assert cutoff is None
    kept = (~mask).reshape(5, 24 // sp.m, sp.m).sum(dim=-1)
    assert (kept == sp.n).all()
    groups = scores.reshape(5, -1, sp.m)
    gm = mask.reshape(5, -1, sp.m)
    assert (groups.masked_fill(~gm, -1).max(-1).values <= groups.masked_fill(gm, 2).min(-1).values).all()


def test_ties_are_broken_by_lowest_index_first():
    scores = torch.ones(2, 8)
    assert row_mask(scores, 0.5)[0][0].tolist() == [True] * 4 + [False] * 4
    assert nm_mask(scores, 2, 4)[0][0].tolist() == [True, True, False, False] * 2
    assert layer_mask(scores, 0.25)[0].flatten().tolist() == [True] * 4 + [False] * 12


def test_nm_needs_divisible_width():
    with pytest.raises(UserError, match="multiple of 3, but layer 0 q has 8 inputs"):
        check_nm_fits(parse_sparsity("2:3"), 8, "layer 0 q")


@pytest.mark.parametrize(
    "text, message",
    [
        ("0", "out of range"),
        ("1", "out of range"),
        ("1.3", "out of range"),
        ("-0.1", "out of range"),
        ("abc", "neither a ratio"),
        ("3:2", "N must be at least 1 and smaller than M"),
        ("0:4", "N must be at least 1"),
        ("a:b", "two whole numbers"),
        ("１:２", "two whole numbers"),  # fullwidth digits: int() reads them, the table would print 1:2
        ("2:4_0", "two whole numbers"),
        ("０.５", "neither a ratio"),
        ("0.2_5", "neither a ratio"),
    ],
)
def test_bad_sparsity_is_one_sentence(text, message):
    with pytest.raises(UserError, match=message):
        parse_sparsity(text)


@pytest.mark.parametrize("method", ["wanda", "magnitude", "varp"])
@pytest.mark.parametrize("sparsity", ["0.5", "2:4"])
def test_scoring_a_bf16_weight_in_slices_of_rows_gives_the_same_masks(make_tiny_model, monkeypatch, method, sparsity):
    """A row-local score is made a slice of rows at a time, never from a whole float32 copy of the weight
    (on the GPU, 896 MiB for a 28672 x 8192 linear), and where each row is chosen alone (Wanda, VarP; N:M)
    the scores are masked, summed and sampled slice by slice, never held whole: the slices change no mask,
    no cut-off, no histogram and no kept score."""
    from acetui_core.modeling.layouts import decoder_layers, prunable_linears, weight_matrix
    from acetui_core.modeling.models import load_model
    from acetui_core.pruning import histograms, pipeline
    from acetui_core.run.config import RunConfig
    from acetui_core.run.events import LayerPruned
    from acetui_core.scores import masks

    monkeypatch.setattr(histograms, "SAMPLE", 97)  # a sampling stride that falls across the slices
    model = str(make_tiny_model("llama"))
    config = RunConfig(model=model, method=method, sparsity=sparsity, nsamples=8, seqlen=16, evals=[])
    pruned, records = [], []
    for per_slice in (masks.SCORES_PER_SLICE, 64 * 3):  # one slice per linear, then three rows of 64 at a time
        monkeypatch.setattr(masks, "SCORES_PER_SLICE", per_slice)
        loaded = load_model(model, device="cpu", dtype="bfloat16")
        events: list = []
        pipeline.prune(loaded, config, on_event=events.append)
        layers = decoder_layers(loaded.model)
        pruned.append([weight_matrix(m) == 0 for layer in layers for m in prunable_linears(layer).values()])
        records.append([linear for e in events if isinstance(e, LayerPruned) for linear in e.layer.linears])
    assert all(torch.equal(a, b) for a, b in zip(*pruned, strict=True))
    for whole, sliced in zip(*records, strict=True):
        assert sliced.histogram == whole.histogram and sliced.histogram.stride > 1
        assert sliced.choice.retained == pytest.approx(whole.choice.retained, rel=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("values", ["normal", "ties and signed zeros", "subnormal"])
def test_bisected_cutoff_is_kthvalue(dtype, values):
    """The per-layer cut-off a GPU finds by bisection (one row, 45M scores) is the value kthvalue gives."""
    generator = torch.Generator().manual_seed(0)
    for _ in range(40):
        n = int(torch.randint(1, 3000, (), generator=generator))
        if values == "normal":
            x = torch.randn(n, generator=generator, dtype=dtype)
        elif values == "ties and signed zeros":
            x = torch.randint(-3, 4, (n,), generator=generator).to(dtype) * 0.5
            x[x == 0] = torch.where(torch.rand(int((x == 0).sum()), generator=generator) < 0.5, 0.0, -0.0).to(dtype)
        else:
            x = torch.rand(n, generator=generator, dtype=dtype) * torch.finfo(dtype).smallest_normal
        for k in (1, n, int(torch.randint(1, n + 1, (), generator=generator))):
            assert kth_smallest(x, k) == torch.kthvalue(x, k).values.item()


def test_the_stored_weights_are_checked_for_their_n_m_groups_in_the_permuted_order():
    """A table's "2:4" was the setting asked for: nothing counted it from the weights themselves."""
    from acetui_core.scores.masks import check_nm_groups

    two_four = parse_sparsity("2:4")
    weight = torch.tensor([[0.0, 1.0, 0.0, 2.0, 3.0, 0.0, 0.0, 4.0]])
    check_nm_groups(weight, two_four, None, "q_proj")
    order = [0, 2, 1, 3, 4, 5, 6, 7]  # the same zeros, taken in a permuted order: groups (0, 0, 1, 2), (3, 0, 0, 4)
    check_nm_groups(weight, two_four, order, "q_proj")
    with pytest.raises(UserError, match="q_proj holds a group of 4 inputs with 1 zeros after pruning to 2:4"):
        check_nm_groups(weight, two_four, [1, 3, 4, 0, 2, 5, 6, 7], "q_proj")  # (1, 2, 3, 0): one zero
    weight[0, 5] = 7.0
    with pytest.raises(UserError, match="needs 2; acetui stops here"):
        check_nm_groups(weight, two_four, None, "q_proj")
