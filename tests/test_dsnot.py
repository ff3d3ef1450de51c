"""DSnoT refinement (--refine dsnot): by default the reference code's protocol (zyxxmu/DSnoT: attention
linears only, its acceptance rule, its rankings), each departure a variant that changes only what it
names; fixed sparsity and N:M groups, the same swaps as a plain step-by-step computation of the rule, and
its place in a run (before --update obs)."""

import pytest
import torch

from acetui_core.modeling.layouts import decoder_layers, prunable_linears, weight_matrix
from acetui_core.modeling.models import load_model
from acetui_core.pruning import layerloop, pipeline
from acetui_core.pruning.dsnot import DSnoTSettings, refine
from acetui_core.pruning.stats import ColumnStats
from acetui_core.run.config import RunConfig
from acetui_core.run.events import LayerPruned
from acetui_core.run.records import Refinement
from acetui_core.scores import sparsegpt
from acetui_core.scores.masks import nm_mask, row_mask

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


def by_hand(W, pruned, ranks, mean, var, settings, m):
    """DSnoT row by row in plain Python, one swap at a time, as the reference code's rule states it (or
    the ``decrease`` variant's): grow the largest key when e > 0 (among equal keys the last column, as the
    reference reads its ascending sort from the top), the smallest otherwise (the first column); prune the
    lowest-ranked kept weight of the grown one's group (N:M) or of the opposite sign (unstructured)."""
    d_in = W.shape[1]
    result, swaps = [], 0
    for r in range(W.shape[0]):
        effect = [W[r, j].item() * mean[j].item() for j in range(d_in)]
        key = [effect[j] / var[j].item() ** settings.var_power for j in range(d_in)]
        mask = [bool(pruned[r, j]) for j in range(d_in)]
        growable = [j for j in range(d_in) if mask[j]]
        prunable = [j for j in range(d_in) if not mask[j]]
        error = sum(effect[j] for j in growable)
        initial_sign = (error > 0) - (error < 0)
        for _ in range(settings.cycles):
            if abs(error) <= settings.threshold or not growable:
                break
            if error > 0:
                grow = max(growable, key=lambda j: (key[j], j))
            else:
                grow = min(growable, key=lambda j: (key[j], j))
            if m:
                candidates = [j for j in prunable if j // m == grow // m]
            else:
                candidates = [j for j in prunable if effect[j] * error < 0]
            if not candidates:
                break
            drop = min(candidates, key=lambda j: (ranks[r, j].item(), j))
            after = error - effect[grow] + effect[drop]
            if settings.accept == "decrease" and abs(after) >= abs(error):
                break
            if settings.accept == "threshold" and m and (after > 0) - (after < 0) != initial_sign:
                break
            mask[grow], mask[drop] = False, True
            growable.remove(grow)
            prunable.remove(drop)
            error, swaps = after, swaps + 1
        result.append(mask)
    return torch.tensor(result), swaps


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


@pytest.mark.parametrize("accept", ["threshold", "decrease"])
@pytest.mark.parametrize("threshold", [0.0, 0.1])
@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
@pytest.mark.parametrize("pattern", ["2:4", "4:8", "0.5", "0.7"])
def test_sorting_once_makes_the_swaps_of_the_rule_applied_step_by_step(pattern, ties, threshold, accept):
    for seed in range(2):
        W, mean, var, scores, mask, m = _layer(pattern, seed, ties)
        settings = DSnoTSettings(threshold=threshold, accept=accept)
        refined, record = refine(W, mask, scores, mean, var, settings, m=m)
        expected, swaps = by_hand(W, mask, scores, mean, var, settings, m)
        assert torch.equal(refined, expected) and record.swaps == swaps > 0, (pattern, seed)


@pytest.mark.parametrize("m", [4, 0], ids=["2:4", "unstructured"])
def test_the_reference_rule_and_the_decrease_variant_on_a_4x8_layer(m):
    mask = nm_mask(SCORES, 2, 4)[0] if m else row_mask(SCORES, 0.5)[0]
    masks = {}
    for accept in ("threshold", "decrease"):
        settings = DSnoTSettings(accept=accept)
        refined, record = refine(W, mask, SCORES, MEAN, VAR, settings, m=m)
        expected, swaps = by_hand(W, mask, SCORES, MEAN, VAR, settings, m)
        assert torch.equal(refined, expected)
        assert record.swaps == swaps >= 2  # the example makes several swaps, or it would prove little
        masks[accept] = refined
    assert not torch.equal(masks["threshold"], masks["decrease"])  # the layer tells the two rules apart


def test_rows_of_the_4x8_layer_traced_by_hand():
    # Row 0: effects W * mean = [-2, 4, 1, 3, -2, -2, -3, -2]; scores |W| sqrt(var) = [1, 4, 1.41, 6, 4, 1,
    # 6, 1.41]; 2:4 prunes 0, 2 | 5, 7 and the expected error is -2 + 1 - 2 - 2 = -5. Cycle 1 (error < 0):
    # grow the smallest effect / var, 0 (-2, tied with 5, the first column first); prune the lowest score
    # kept in its group, 1 (4 < 6): error -5 + 2 + 4 = 1. The reference refuses it (the sign changes) and
    # the row stops unrefined; the decrease variant takes it (|1| < |-5|), then in cycle 2 (error > 0)
    # grows 2 (1 / 2, the largest) against 3, the only kept weight left in its group: 1 - 1 + 3 = 3, refused.
    mask = nm_mask(SCORES, 2, 4)[0]
    reference, _ = refine(W, mask, SCORES, MEAN, VAR, DSnoTSettings(), m=4)
    assert reference[0].tolist() == mask[0].tolist() == [True, False, True, False, False, True, False, True]
    decrease, _ = refine(W, mask, SCORES, MEAN, VAR, DSnoTSettings(accept="decrease"), m=4)
    assert decrease[0].tolist() == [False, True, True, False, False, True, False, True]
    # Unstructured row 1: effects [-2, 6, 2, -1, 2, -6, 2, -2]; scores [1, 6, 2.83, 2, 4, 3, 4, 1.41]; 50% of
    # the row prunes 0, 7, 2, 3 (the lowest scores): error -2 - 2 + 2 - 1 = -3. Cycle 1 (error < 0): grow
    # the smallest key, 0 (-2 / 1); prune the lowest-scored kept weight with a positive effect, 4 (4 < 6,
    # tied with 6, the first column first): error -3 + 2 + 2 = 1. Cycle 2 (error > 0): grow the largest
    # key, 2 (2 / 2 = 1); prune the lowest-scored kept negative, 5: error 1 - 2 - 6 = -7, which the
    # reference takes (it asks only that |error| exceed the threshold) and the decrease variant refuses.
    mask = row_mask(SCORES, 0.5)[0]
    reference, record = refine(W[1:2], mask[1:2], SCORES[1:2], MEAN, VAR, DSnoTSettings(cycles=2), m=0)
    assert reference[0].tolist() == [False, False, False, True, True, True, False, True] and record.swaps == 2
    decrease, record = refine(W[1:2], mask[1:2], SCORES[1:2], MEAN, VAR, DSnoTSettings(accept="decrease"), m=0)
    assert decrease[0].tolist() == [False, False, True, True, True, False, False, True] and record.swaps == 1


@pytest.mark.parametrize("accept", ["threshold", "decrease"])
@pytest.mark.parametrize("pattern", ["2:4", "4:8", "0.5", "0.7"])
def test_dsnot_keeps_the_sparsity_and_groups_and_the_decrease_variant_never_raises_its_error(pattern, accept):
    for seed in range(3):
        W, mean, var, scores, mask, m = _layer(pattern, seed, ties=False)
        refined, record = refine(W, mask, scores, mean, var, DSnoTSettings(threshold=0.0, accept=accept), m=m)
        assert torch.equal(refined.sum(dim=1), mask.sum(dim=1))  # every row keeps its count
        if m:
            assert torch.equal(refined.reshape(24, -1, m).sum(-1), mask.reshape(24, -1, m).sum(-1))
        assert record.swaps == (refined & ~mask).sum().item() > 0
        if accept == "decrease":
            effect = W.double() * mean.double()
            before, after = (effect * mask).sum(dim=1).abs(), (effect * refined).sum(dim=1).abs()
            assert (after <= before).all() and record.error_after <= record.error_before


def test_no_cycles_or_a_high_threshold_changes_nothing():
    mask = nm_mask(SCORES, 2, 4)[0]
    for settings in (DSnoTSettings(cycles=0), DSnoTSettings(threshold=100.0)):
        refined, record = refine(W, mask, SCORES, MEAN, VAR, settings, m=4)
        assert torch.equal(refined, mask) and record.swaps == 0


@pytest.mark.parametrize(
    ("sparsity", "prune_score", "ranked_by"),
    [("0.5", "wanda", "wanda"), ("0.5", "metric", "metric"), ("2:4", "wanda", "metric")],
)
def test_the_kept_weights_are_ranked_as_the_reference_ranks_them(sparsity, prune_score, ranked_by, monkeypatch):
    # The reference prunes an unstructured mask's kept weights in Wanda's order whatever metric chose the
    # mask, an N:M mask's in the mask's own metric's order; --dsnot-prune-score metric changes the first.
    torch.manual_seed(0)
    Wl, x = torch.randn(6, 16), torch.randn(40, 16) * torch.linspace(0.1, 3, 16)
    stats = ColumnStats(16, torch.device("cpu"))
    stats.add(x)
    magnitude = Wl.abs()
    seen = []

    def capture(W, pruned, ranks, *args, **kw):
        seen.append(ranks)
        return pruned, Refinement(swaps=0, error_before=0.0, error_after=0.0)

    monkeypatch.setattr(layerloop, "refine", capture)
    config = RunConfig(model="m", method="magnitude", sparsity=sparsity, refine="dsnot", dsnot_prune_score=prune_score)
    layerloop._choose_mask(Wl, magnitude, stats, config, config.sparsity_spec, "attention")
    wanda = Wl.abs() * stats.norm
    assert torch.equal(seen[0], wanda if ranked_by == "wanda" else magnitude)
    assert not torch.equal(wanda.argsort(dim=1), magnitude.argsort(dim=1))  # the two orders differ here


def test_a_run_recorded_before_the_reference_default_reads_back_as_the_variant_it_ran():
    stored = {"model": "m", "method": "wanda", "sparsity": "0.5", "refine": "dsnot", "dsnot_cycles": 50}
    old = RunConfig.from_dict(stored)
    assert (old.dsnot_skip, old.dsnot_accept, old.dsnot_prune_score) == ("none", "decrease", "metric")
    old_nm = RunConfig.from_dict({**stored, "sparsity": "2:4"})
    assert (old_nm.dsnot_skip, old_nm.dsnot_accept, old_nm.dsnot_prune_score) == ("none", "decrease", "wanda")
    new = RunConfig.from_dict(RunConfig(model="m", refine="dsnot").to_dict())
    assert (new.dsnot_skip, new.dsnot_accept, new.dsnot_prune_score) == ("mlp", "threshold", "wanda")


@pytest.fixture(scope="module")
def tiny(make_tiny_model):
    model = load_model(str(make_tiny_model("llama")), device="cpu")
    model.snapshot()
    return model


def _config(tiny, calib, **kw):
    return RunConfig(model=str(tiny.source), calib=calib, nsamples=8, seqlen=16, evals=[], **{"refine": "dsnot", **kw})


def _run(tiny, config):
    """The run's per-linear records and its pruned weights, the tiny model put back after."""
    tiny.reset()
    events = []
    pipeline.run(config, events.append, loaded=tiny)
    linears = {
        (e.layer.index, linear.name): linear for e in events if isinstance(e, LayerPruned) for linear in e.layer.linears
    }
    weights = {
        (index, name): weight_matrix(module).clone()
        for index, layer in enumerate(decoder_layers(tiny.model))
        for name, module in prunable_linears(layer).items()
    }
    tiny.reset()
    return linears, weights


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
    linears, weights = _run(tiny, _config(tiny, calib_file, **settings))
    refinements = [linear.choice.refinement for linear in linears.values() if linear.choice.refinement]
    assert sum(r.swaps for r in refinements) > 0
    if settings["sparsity"] == "2:4":
        for (index, name), weight in weights.items():
            choice = linears[(index, name)].choice
            order = torch.tensor(choice.permutation) if choice.permutation else slice(None)
            kept = (weight[:, order] != 0).reshape(weight.shape[0], -1, 4).sum(-1)
            assert (kept == 2).all(), (index, name)
    unrefined, _ = _run(tiny, _config(tiny, calib_file, **settings, refine="none"))
    assert [linear.sparsity for linear in linears.values()] == [linear.sparsity for linear in unrefined.values()]


def test_by_default_dsnot_refines_the_attention_linears_only_and_skip_changes_only_which(tiny, calib_file):
    # The reference's --skip_layer defaults to mlp: every linear outside attention keeps the metric's mask.
    runs = {
        skip: _run(
            tiny, _config(tiny, calib_file, method="wanda", sparsity="2:4", **({"dsnot_skip": skip} if skip else {}))
        )
        for skip in (None, "none", "attention")
    }
    _, plain = _run(tiny, _config(tiny, calib_file, method="wanda", sparsity="2:4", refine="none"))

    def refined(linears):
        return {key[1] for key, linear in linears.items() if linear.choice.refinement is not None}

    attention = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"}
    assert refined(runs[None][0]) == attention
    assert refined(runs["none"][0]) == attention | {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}
    assert refined(runs["attention"][0]) == {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}
    default, every = runs[None][1], runs["none"][1]

    def same_mask(a, b, name):
        return torch.equal(a[(0, name)] == 0, b[(0, name)] == 0)

    # Layer 0 sees the same inputs in every run: the same swaps where both refine, the metric's mask where
    # the default skips, and swaps made on both sides (or the comparison would prove little).
    assert all(same_mask(default, every, name) for name in attention)
    assert not all(same_mask(default, plain, name) for name in attention)
    mlp = ("mlp.gate_proj", "mlp.up_proj")
    assert all(same_mask(default, plain, name) for name in mlp)
    assert not all(same_mask(every, plain, name) for name in mlp)


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
    config = _config(tiny, calib_file, method="wanda", sparsity="0.5", update="obs", dsnot_skip="none")
    pipeline.run(config, loaded=tiny)
    assert len(refined) == len(updated) == 2 * 7
    assert all(torch.equal(a, b) for a, b in zip(refined, updated, strict=True))
