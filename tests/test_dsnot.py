"""DSnoT refinement (--refine dsnot): fixed sparsity and N:M groups, an error that never grows, the same
swaps as a plain step-by-step computation and as the first, scan-every-cycle implementation, and its place
in a run (before --update obs)."""

import pytest
import torch

from acetui_core import layerloop, pipeline, sparsegpt
from acetui_core.config import RunConfig
from acetui_core.dsnot import DSnoTSettings, refine
from acetui_core.events import LayerPruned
from acetui_core.layouts import decoder_layers, prunable_linears, weight_matrix
from acetui_core.masks import nm_mask, row_mask
from acetui_core.models import load_model

# A 4 x 8 layer with small whole numbers, so every step is exact.
W = torch.tensor(
    [
        [1.0, 2.0, 1.0, 3.0, 2.0, -1.0, 3.0, -1.0],
        [1.0, 3.0, 2.0, -1.0, -2.0, -3.0, -2.0, -1.0],
        [-3.0, 1.0, -1.0, 1.0, -2.0, 1.0, 2.0, 3.0],
        [1.0, 3.0, 2.0, -3.0, 3.0, -3.0, -3.0, 3.0],
    ]
)
MEAN = torch.tensor([-2.0, 2.0, 1.0, 1.0, -1.0, 2.0, -1.0, 2.0])
VAR = torch.tensor([1.0, 4.0, 2.0, 4.0, 4.0, 1.0, 4.0, 2.0])
SCORES = W.abs() * VAR.sqrt()


def by_hand(W, pruned, scores, mean, var, settings, m):
    """DSnoT row by row in plain Python, one swap at a time, as the module's description states it."""
    d_in = W.shape[1]
    result, swaps = [], 0
    for r in range(W.shape[0]):
        effect = [W[r, j].item() * mean[j].item() for j in range(d_in)]
        mask = [bool(pruned[r, j]) for j in range(d_in)]
        growable = [j for j in range(d_in) if mask[j]]
        prunable = [j for j in range(d_in) if not mask[j]]
        error = sum(effect[j] for j in growable)
        for _ in range(settings.cycles):
            if abs(error) <= settings.threshold or not growable:
                break
            sign = 1 if error > 0 else -1
            grow = max(growable, key=lambda j: (sign * effect[j] / var[j].item() ** settings.var_power, -j))
            if m:
                candidates = [j for j in prunable if j // m == grow // m]
            else:
                candidates = [j for j in prunable if effect[j] * sign <= 0]
            if not candidates:
                break
            drop = min(candidates, key=lambda j: (scores[r, j].item(), j))
            after = error - effect[grow] + effect[drop]
            if abs(after) >= abs(error):
                break
            mask[grow], mask[drop] = False, True
            growable.remove(grow)
            prunable.remove(drop)
            error, swaps = after, swaps + 1
        result.append(mask)
    return torch.tensor(result), swaps


def dense_scan(W, pruned, scores, mean, var, settings, m):
    """DSnoT as acetui first implemented it: every cycle scans whole rows for the weight to grow and the
    weight to prune. The sorted-once implementation must make exactly its swaps."""
    rows = torch.arange(W.shape[0])
    effect = W.double() * mean.double()
    grow_key = effect / var.double().clamp_min(1e-12) ** settings.var_power
    low = scores.double()
    pruned = pruned.clone()
    growable, prunable = pruned.clone(), ~pruned
    error = (effect * pruned).sum(dim=1)
    active = torch.ones_like(error, dtype=torch.bool)
    swaps = 0
    for _ in range(settings.cycles):
        active &= error.abs() > settings.threshold
        if not active.any():
            break
        sign = torch.where(error > 0, 1.0, -1.0).to(effect.dtype)[:, None]
        grown = torch.where(growable, grow_key * sign, -torch.inf).argmax(dim=1)
        if m:
            group = (grown // m * m)[:, None] + torch.arange(m)
            candidates = torch.where(prunable.gather(1, group), low.gather(1, group), torch.inf)
            dropped = group.gather(1, candidates.argmin(dim=1, keepdim=True)).squeeze(1)
        else:
            dropped = torch.where(prunable & (effect * sign <= 0), low, torch.inf).argmin(dim=1)
        after = error - effect[rows, grown] + effect[rows, dropped]
        accept = active & growable[rows, grown] & prunable[rows, dropped] & (after.abs() < error.abs())
        where = rows[accept]
        pruned[where, grown[accept]], pruned[where, dropped[accept]] = False, True
        growable[where, grown[accept]], prunable[where, dropped[accept]] = False, False
        error = torch.where(accept, after, error)
        swaps += int(accept.sum())
        active &= accept
    return pruned, swaps


def _layer(pattern, seed, ties):
    """A random 24 x 64 layer and its mask; with ``ties``, whole-number weights and some zero means make
    many growth keys and scores equal, so the order among equals is tested too."""
    torch.manual_seed(seed)
    W, mean, var = torch.randn(24, 64), torch.randn(64), torch.rand(64) + 0.1
    if ties:
        W, mean[::5], var = W.round(), 0.0, var.round() + 1
    scores = W.abs() * var.sqrt()
    if ":" in pattern:
        n, m = map(int, pattern.split(":"))
        return W, mean, var, scores, nm_mask(scores, n, m)[0], m
    return W, mean, var, scores, row_mask(scores, float(pattern))[0], 0


@pytest.mark.parametrize("threshold", [0.0, 0.1])
@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
@pytest.mark.parametrize("pattern", ["2:4", "4:8", "0.5", "0.7"])
def test_sorting_once_makes_the_same_swaps_as_scanning_every_cycle(pattern, ties, threshold):
    for seed in range(4):
        W, mean, var, scores, mask, m = _layer(pattern, seed, ties)
        settings = DSnoTSettings(threshold=threshold)
        refined, record = refine(W, mask, scores, mean, var, settings, m=m)
        expected, swaps = dense_scan(W, mask, scores, mean, var, settings, m)
        assert torch.equal(refined, expected) and record.swaps == swaps > 0, (pattern, seed)


@pytest.mark.parametrize("m", [4, 0], ids=["2:4", "unstructured"])
def test_dsnot_equals_a_step_by_step_computation_on_a_4x8_layer(m):
    mask = nm_mask(SCORES, 2, 4)[0] if m else row_mask(SCORES, 0.5)[0]
    refined, record = refine(W, mask, SCORES, MEAN, VAR, DSnoTSettings(), m=m)
    expected, swaps = by_hand(W, mask, SCORES, MEAN, VAR, DSnoTSettings(), m)
    assert torch.equal(refined, expected)
    assert record.swaps == swaps >= 3  # the example makes several swaps, or it would prove little
    assert torch.equal(dense_scan(W, mask, SCORES, MEAN, VAR, DSnoTSettings(), m)[0], expected)


def test_the_first_row_of_the_4x8_layer_traced_by_hand():
    # Row 0: effects W * mean = [-2, 4, 1, 3, -2, -2, -3, -2]; scores |W| sqrt(var) = [1, 4, 1.41, 6, 4, 1,
    # 6, 1.41]; 2:4 prunes 0, 2 | 5, 7 and the expected error is -2 + 1 - 2 - 2 = -5. Cycle 1 (error < 0):
    # grow the smallest effect / var, 0 (-2, tied with 5, the lower index first); prune the lowest score kept
    # in its group, 1 (4 < 6): error -5 + 2 + 4 = 1. Cycle 2 (error > 0): grow 2 (1 / 2, the largest); its
    # group keeps only 3 still prunable: error 1 - 1 + 3 = 3 > 1, refused; the row stops.
    refined, _ = refine(W, nm_mask(SCORES, 2, 4)[0], SCORES, MEAN, VAR, DSnoTSettings(), m=4)
    assert refined[0].tolist() == [False, True, True, False, False, True, False, True]


@pytest.mark.parametrize("pattern", ["2:4", "4:8", "0.5", "0.7"])
@pytest.mark.parametrize("seed", range(3))
def test_dsnot_keeps_the_sparsity_and_groups_and_never_raises_its_error(pattern, seed):
    torch.manual_seed(seed)
    W = torch.randn(24, 64)
    mean, var = torch.randn(64), torch.rand(64) + 0.1
    scores = W.abs() * var.sqrt()
    if ":" in pattern:
        n, m = map(int, pattern.split(":"))
        mask = nm_mask(scores, n, m)[0]
    else:
        m, mask = 0, row_mask(scores, float(pattern))[0]
    refined, record = refine(W, mask, scores, mean, var, DSnoTSettings(threshold=0.0), m=m)
    assert torch.equal(refined.sum(dim=1), mask.sum(dim=1))  # every row keeps its count
    if m:
        assert torch.equal(refined.reshape(24, -1, m).sum(-1), mask.reshape(24, -1, m).sum(-1))
    effect = W.double() * mean.double()
    before, after = (effect * mask).sum(dim=1).abs(), (effect * refined).sum(dim=1).abs()
    assert (after <= before).all()
    assert record.error_after <= record.error_before and record.swaps > 0
    assert record.swaps == (refined & ~mask).sum().item()


def test_no_cycles_or_a_high_threshold_changes_nothing():
    mask = nm_mask(SCORES, 2, 4)[0]
    for settings in (DSnoTSettings(cycles=0), DSnoTSettings(threshold=100.0)):
        refined, record = refine(W, mask, SCORES, MEAN, VAR, settings, m=4)
        assert torch.equal(refined, mask) and record.swaps == 0


@pytest.fixture(scope="module")
def tiny(make_tiny_model):
    model = load_model(str(make_tiny_model("llama")), device="cpu")
    model.snapshot()
    return model


def _config(tiny, calib, **kw):
    return RunConfig(model=str(tiny.source), calib=calib, nsamples=8, seqlen=16, evals=[], **{"refine": "dsnot", **kw})


@pytest.mark.parametrize(
    "settings",
    [
        {"method": "magnitude", "sparsity": "2:4"},
        {"method": "ria", "sparsity": "2:4", "permute": "lsa"},
        {"method": "wanda", "sparsity": "0.6", "allocation": "owl", "owl_lambda": 0.05},
    ],
    ids=["magnitude 2:4", "ria lsa 2:4", "wanda owl"],
)
def test_a_refined_run_keeps_its_masks_shape_and_records_the_swaps(tiny, calib_file, settings):
    tiny.reset()
    events = []
    result = pipeline.run(_config(tiny, calib_file, **settings), events.append, loaded=tiny)
    linears = {
        (e.layer.index, linear.name): linear for e in events if isinstance(e, LayerPruned) for linear in e.layer.linears
    }
    refinements = [linear.choice.refinement for linear in linears.values()]
    assert sum(r.swaps for r in refinements) > 0
    assert all(r.error_after <= r.error_before for r in refinements)
    if settings["sparsity"] == "2:4":
        for index, layer in enumerate(decoder_layers(tiny.model)):
            for name, module in prunable_linears(layer).items():
                choice = linears[(index, name)].choice
                order = torch.tensor(choice.permutation) if choice.permutation else slice(None)
                kept = (weight_matrix(module)[:, order] != 0).reshape(module.weight.shape[0], -1, 4).sum(-1)
                assert (kept == 2).all(), (index, name)
    tiny.reset()
    unrefined = pipeline.run(_config(tiny, calib_file, **settings, refine="none"), loaded=tiny)
    assert [s.sparsity for s in result.layers] == [s.sparsity for s in unrefined.layers]


def test_with_update_obs_the_update_works_on_the_refined_mask(tiny, calib_file, monkeypatch):
    refined, updated = [], []
    real_refine, real_update = layerloop.refine, sparsegpt.mask_and_update

    def recording_refine(*args, **kw):
        mask, record = real_refine(*args, **kw)
        refined.append(mask.clone())
        return mask, record

    def recording_update(W, H, name, **kw):
        updated.append(kw["mask"].clone())
        return real_update(W, H, name, **kw)

    monkeypatch.setattr(layerloop, "refine", recording_refine)
    monkeypatch.setattr(sparsegpt, "mask_and_update", recording_update)
    tiny.reset()
    pipeline.run(_config(tiny, calib_file, method="wanda", sparsity="0.5", update="obs"), loaded=tiny)
    assert len(refined) == len(updated) == 2 * 7
    assert all(torch.equal(a, b) for a, b in zip(refined, updated, strict=True))
