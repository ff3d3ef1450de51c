"""RIA's channel permutation for N:M (--permute): the grouping it finds on hand-made scores, the masks
it gives, and a saved checkpoint that computes what was evaluated."""

import itertools
import json

import pytest
import torch

from acetui_core.modeling.layouts import decoder_layers, prunable_linears, weight_matrix
from acetui_core.modeling.models import load_model
from acetui_core.pruning import pipeline
from acetui_core.run.config import RunConfig
from acetui_core.run.events import LayerPruned
from acetui_core.scores.masks import nm_mask, permuted_nm_mask
from acetui_core.scores.permute import PERMUTATIONS_FILE, channel_permutation, retained_fraction

# Two rows whose strong inputs sit together: in the original order each row's four 9s share one group of
# four, so 2:4 keeps two of them and two 1s (20 of 40). Any grouping with two of inputs 0-3 and two of 4-7
# in each group keeps every row's four 9s (36 of 40), the most a row can keep at 2:4.
CLUSTERED = torch.tensor(
    [
        [9.0, 9.0, 9.0, 9.0, 1.0, 1.0, 1.0, 1.0],
        [1.0, 1.0, 1.0, 1.0, 9.0, 9.0, 9.0, 9.0],
    ]
)
# Here the original order keeps 28 of 33, RIA's reallocation 31 and the assignment 32, the best of the 35
# groupings (``best_retained``).
MIXED = torch.tensor(
    [
        [1.0, 8.0, 0.0, 0.0, 9.0, 0.0, 8.0, 0.0],
        [0.0, 1.0, 1.0, 1.0, 0.0, 9.0, 0.0, 1.0],
        [0.0, 1.0, 0.0, 0.0, 9.0, 8.0, 1.0, 8.0],
    ]
)


def best_retained(scores: torch.Tensor, n: int, m: int) -> float:
    """The most score any grouping of 8 inputs into two groups of m = 4 keeps (brute force over all 35)."""
    best = 0.0
    for first in itertools.combinations(range(1, 8), 3):
        order = torch.tensor([0, *first, *(c for c in range(1, 8) if c not in first)])
        best = max(best, retained_fraction(scores, permuted_nm_mask(scores, n, m, order)))
    return best


@pytest.mark.parametrize("scores", [CLUSTERED, MIXED], ids=["clustered", "mixed"])
def test_lsa_finds_the_best_grouping_and_keeps_more_than_the_original_order(scores):
    none = retained_fraction(scores, nm_mask(scores, 2, 4)[0])
    order = channel_permutation(scores, 2, 4, "lsa")
    lsa = retained_fraction(scores, permuted_nm_mask(scores, 2, 4, order))
    assert sorted(order.tolist()) == list(range(8))
    assert lsa == pytest.approx(best_retained(scores, 2, 4), abs=1e-12)
    assert lsa > none


def test_on_the_mixed_matrix_greedy_gains_and_lsa_gains_more():
    kept = [
        retained_fraction(MIXED, permuted_nm_mask(MIXED, 2, 4, channel_permutation(MIXED, 2, 4, how)))
        for how in ("greedy", "lsa")
    ]
    assert [retained_fraction(MIXED, nm_mask(MIXED, 2, 4)[0]), *kept] == pytest.approx([28 / 33, 31 / 33, 32 / 33])


def test_lsa_finds_the_known_grouping_of_the_clustered_matrix():
    order = channel_permutation(CLUSTERED, 2, 4, "lsa").tolist()
    assert retained_fraction(CLUSTERED, nm_mask(CLUSTERED, 2, 4)[0]) == pytest.approx(20 / 40)
    assert retained_fraction(CLUSTERED, permuted_nm_mask(CLUSTERED, 2, 4, torch.tensor(order))) == pytest.approx(
        36 / 40
    )
    for group in (order[:4], order[4:]):
        assert len(set(group) & {0, 1, 2, 3}) == 2, order


@pytest.mark.parametrize(("n", "m"), [(2, 4), (4, 8), (1, 4)])
@pytest.mark.parametrize("seed", range(6))
def test_guarded_greedy_never_keeps_less_than_none_and_lsa_never_less_than_greedy(n, m, seed):
    torch.manual_seed(seed)
    scores = torch.rand(12, 8 * m) ** 4 * torch.rand(1, 8 * m) * 10  # heavy columns, as activations make them
    kept = {
        how: retained_fraction(
            scores, permuted_nm_mask(scores, n, m, channel_permutation(scores, n, m, how, guard=True))
        )
        for how in ("greedy", "lsa")
    }
    none = retained_fraction(scores, nm_mask(scores, n, m)[0])
    assert none <= kept["greedy"] <= kept["lsa"]


# RIA's reallocation keeps less here than the original order (50 of 72 against 57). Its column sums rank
# the inputs 1 0 4 5 6 7 3 2; dealt into slots 0-3 of the two groups, the even slots in order, the odd ones
# reversed (prune_ria with --reallocation): groups {1, 5, 6, 2} and {0, 4, 7, 3}.
WORSE = torch.tensor(
    [
        [0.0, 3.0, 8.0, 4.0, 1.0, 6.0, 9.0, 2.0],
        [5.0, 0.0, 7.0, 8.0, 6.0, 3.0, 1.0, 9.0],
    ]
)
# 2:4 prunes each group's two lowest: row 0 inputs 1, 5 and 0, 4; row 1 inputs 1, 6 and 0, 4.
RIA_REALLOCATED = torch.tensor([[1, 1, 0, 0, 1, 1, 0, 0], [1, 1, 0, 0, 1, 0, 1, 0]], dtype=torch.bool)


def test_rias_reallocation_is_applied_even_where_it_keeps_less_and_the_guard_keeps_the_original_order():
    order = channel_permutation(WORSE, 2, 4, "greedy")
    assert order.tolist() == [1, 5, 6, 2, 0, 4, 7, 3]
    assert torch.equal(permuted_nm_mask(WORSE, 2, 4, order), RIA_REALLOCATED)
    assert retained_fraction(WORSE, RIA_REALLOCATED) == pytest.approx(50 / 72)
    guarded = channel_permutation(WORSE, 2, 4, "greedy", guard=True)
    assert guarded.tolist() == list(range(8))
    assert torch.equal(permuted_nm_mask(WORSE, 2, 4, guarded), nm_mask(WORSE, 2, 4)[0])


def test_a_permuted_run_recorded_before_the_reference_default_reads_back_guarded():
    stored = RunConfig(model="m", sparsity="2:4", permute="lsa").to_dict()
    del stored["permute_guard"]
    assert RunConfig.from_dict(stored).permute_guard is True
    assert RunConfig.from_dict({**stored, "permute": "none"}).permute_guard is False
    assert RunConfig.from_dict(RunConfig(model="m", sparsity="2:4", permute="lsa").to_dict()).permute_guard is False


def test_the_permuted_mask_is_n_m_in_the_permuted_order():
    torch.manual_seed(0)
    scores = torch.rand(16, 32)
    order = channel_permutation(scores, 2, 4, "lsa")
    mask = permuted_nm_mask(scores, 2, 4, order)
    assert (mask[:, order].reshape(16, 8, 4).sum(dim=-1) == 2).all()
    assert not torch.equal(order, torch.arange(32))  # the test would prove nothing in the original order


def test_retained_fraction_is_kept_over_total():
    scores = torch.tensor([[1.0, 3.0], [2.0, 4.0]])
    assert retained_fraction(scores, torch.tensor([[True, False], [False, True]])) == pytest.approx(5 / 10)
    assert retained_fraction(torch.zeros(2, 2), torch.ones(2, 2, dtype=torch.bool)) == 1.0


@pytest.fixture(scope="module")
def tiny(make_tiny_model):
    model = load_model(str(make_tiny_model("llama")), device="cpu")
    model.snapshot()
    return model


def test_a_permuted_run_records_its_orders_and_saves_a_model_that_computes_what_was_evaluated(
    tiny, calib_file, tmp_path
):
    from transformers import AutoModelForCausalLM

    tiny.reset()
    save = tmp_path / "pruned"
    quick = {"calib": calib_file, "nsamples": 8, "seqlen": 16, "evals": []}
    config = RunConfig(model=str(tiny.source), method="wanda", sparsity="2:4", permute="lsa", save=str(save), **quick)
    events = []
    pipeline.run(config, events.append, loaded=tiny)
    records = {
        (event.layer.index, linear.name): linear
        for event in events
        if isinstance(event, LayerPruned)
        for linear in event.layer.linears
    }
    sidecar = json.loads((save / PERMUTATIONS_FILE).read_text())
    assert sidecar["pattern"] == "2:4"
    saved = AutoModelForCausalLM.from_pretrained(save).eval()
    saved_weights = dict(saved.named_parameters())
    for index, layer in enumerate(decoder_layers(tiny.model)):
        for name, module in prunable_linears(layer).items():
            choice = records[(index, name)].choice
            order = torch.tensor(choice.permutation)
            W = weight_matrix(module)
            assert ((W[:, order] != 0).reshape(W.shape[0], -1, 4).sum(dim=-1) <= 2).all()
            assert 0 < choice.retained <= 1 and 0 < choice.retained_unpermuted <= 1  # RIA's: either may keep more
            key = next(k for k in sidecar["order"] if k.endswith(f"layers.{index}.{name}.weight"))
            assert sidecar["order"][key] == choice.permutation
            assert torch.equal(saved_weights[key], module.weight)
    batch = torch.randint(0, tiny.model.config.vocab_size, (2, 12))
    with torch.no_grad():
        expected = tiny.model(input_ids=batch).logits
        assert torch.allclose(saved(input_ids=batch).logits, expected, atol=1e-5)


def test_the_guard_reaches_the_mask_and_is_put_back_without_a_permutation(make_tiny_model, calib_file, tiny):
    from acetui_core.pruning.validate import check_config

    model = str(make_tiny_model("llama"))
    assert (
        check_config(RunConfig(model=model, sparsity="2:4", calib=calib_file, permute_guard=True)).permute_guard
        is False
    )
    kept = {}
    for guard in (False, True):
        tiny.reset()
        config = RunConfig(
            model=str(tiny.source),
            method="wanda",
            sparsity="2:4",
            permute="greedy",
            permute_guard=guard,
            calib=calib_file,
            nsamples=8,
            seqlen=16,
            evals=[],
        )
        events = []
        pipeline.run(config, events.append, loaded=tiny)
        choices = [linear.choice for e in events if isinstance(e, LayerPruned) for linear in e.layer.linears]
        kept[guard] = [c.retained >= c.retained_unpermuted for c in choices]
    assert all(kept[True]) and not all(kept[False])  # random weights: RIA's reallocation sometimes keeps less
