"""OWL's layer allocation (--allocation owl) and the OBS update of any mask (--update obs)."""

import pytest
import torch

from acetui_core.basics.errors import UserError
from acetui_core.modeling.layouts import decoder_layers, prunable_linears, weight_matrix
from acetui_core.modeling.models import load_model
from acetui_core.pruning import pipeline
from acetui_core.pruning.allocation import outlier_ratio, owl_sparsities
from acetui_core.run.config import RunConfig
from acetui_core.scores.masks import row_mask
from acetui_core.scores.sparsegpt import mask_and_update


def test_outlier_ratio_counts_scores_above_m_times_the_mean_of_all_linears_together():
    a = torch.tensor([[1.0, 1.0], [1.0, 10.0]])  # with b: mean 18/6 = 3; above 2 x 3 = 6: 10
    b = torch.tensor([[2.0, 3.0]])
    assert outlier_ratio([a, b], m=2) == pytest.approx(1 / 6)
    assert outlier_ratio([a, b], m=0.5) == pytest.approx(3 / 6)  # above 1.5: 10, 2 and 3
    assert outlier_ratio([a], m=0.5) == pytest.approx(1 / 4)  # a alone: mean 3.25, above 1.625: 10


def test_owl_sparsities_average_to_the_target_weighted_by_parameters_and_follow_the_ratios():
    ratios = [0.010, 0.030, 0.020, 0.005]
    sizes = [100, 300, 50, 1000]
    s = owl_sparsities(ratios, sizes, target=0.7, lam=0.08, mean="weighted")
    assert sum(si * n for si, n in zip(s, sizes, strict=True)) / sum(sizes) == pytest.approx(0.7, abs=1e-12)
    assert sorted(range(4), key=lambda i: s[i]) == sorted(
        range(4), key=lambda i: -ratios[i]
    )  # more outliers, fewer pruned
    assert max(s) - min(s) == pytest.approx(2 * 0.08)
    assert owl_sparsities([0.1, 0.1], [1, 1], 0.5, 0.08) == [0.5, 0.5]


@pytest.mark.parametrize("mean", ["plain", "weighted"])
def test_owl_layer_sparsity_of_one_is_one_sentence(mean):
    with pytest.raises(UserError, match="pruning all of it; choose a smaller lambda"):
        owl_sparsities([0.0, 1.0, 1.0], [1, 1, 100], target=0.9, lam=0.09, mean=mean)


@pytest.fixture(scope="module")
def tiny(make_tiny_model):
    model = load_model(str(make_tiny_model("llama")), device="cpu")
    model.snapshot()
    return model


def _config(loaded, calib, method="wanda", sparsity="0.7", **kw):
    return RunConfig(
        model=str(loaded.source), method=method, sparsity=sparsity, calib=calib, nsamples=8, seqlen=16, evals=[], **kw
    )


def test_owl_run_prunes_each_layer_to_its_allocation(tiny, calib_file):
    tiny.reset()
    result = pipeline.run(_config(tiny, calib_file, allocation="owl", owl_lambda=0.05), loaded=tiny)
    allocation = result.allocation
    assert [a.layer for a in allocation] == [0, 1]
    sizes = [sum(m.weight.numel() for m in prunable_linears(layer).values()) for layer in decoder_layers(tiny.model)]
    weighted = sum(a.sparsity * n for a, n in zip(allocation, sizes, strict=True)) / sum(sizes)
    assert weighted == pytest.approx(0.7, abs=1e-12)
    high, low = sorted(allocation, key=lambda a: -a.outlier_ratio)
    assert high.sparsity == pytest.approx(0.65) and low.sparsity == pytest.approx(0.75)
    for index, layer in enumerate(decoder_layers(tiny.model)):
        for name, module in prunable_linears(layer).items():
            W = weight_matrix(module)
            assert ((W == 0).sum(dim=1) == int(W.shape[1] * allocation[index].sparsity)).all(), (index, name)
    assert result.overall_sparsity == pytest.approx(0.7, abs=0.01)


def test_uniform_allocation_records_none_and_keeps_every_layer_at_the_target(tiny, calib_file):
    tiny.reset()
    result = pipeline.run(_config(tiny, calib_file), loaded=tiny)
    assert result.allocation is None and result.config.owl_lambda == 0.08


def _correlated_inputs(tokens=512, d_in=64, rank=16):
    """Inputs with correlated features, as a layer's activations are: what OBS can compensate through."""
    torch.manual_seed(0)
    return torch.randn(tokens, rank) @ torch.randn(rank, d_in) + 0.1 * torch.randn(tokens, d_in)


def test_obs_update_keeps_the_mask_and_lowers_the_output_error_of_a_magnitude_mask():
    X = _correlated_inputs()
    W = torch.randn(32, 64)
    mask, _ = row_mask(W.abs(), 0.5)
    H = 2 / X.shape[0] * X.T @ X
    updated = mask_and_update(W, H, "test", mask=mask)
    assert torch.equal(updated == 0, mask)
    dense = X @ W.T
    error = lambda V: ((X @ V.T - dense).norm() / dense.norm()).item()  # noqa: E731
    assert error(updated) < 0.8 * error(W.masked_fill(mask, 0))


def _hidden_error(loaded, dense_outputs, windows):
    with torch.no_grad():
        out = loaded.model(input_ids=windows, output_hidden_states=True).hidden_states[-1]
    return ((out - dense_outputs).norm() / dense_outputs.norm()).item()


def test_obs_update_on_a_tiny_model_lowers_the_error_of_the_last_hidden_states(tiny, calib_file):
    from acetui_core.modeling.data import calibration_windows, tokenized_calibration

    tiny.reset()
    windows = calibration_windows(tokenized_calibration(tiny.tokenizer, calib_file)[0], 8, 16, 0)
    with torch.no_grad():
        dense = tiny.model(input_ids=windows, output_hidden_states=True).hidden_states[-1]
    errors, masks = {}, {}
    for update in ("none", "obs"):
        tiny.reset()
        result = pipeline.run(_config(tiny, calib_file, method="magnitude", sparsity="0.5", update=update), loaded=tiny)
        assert (result.calibration is not None) == (update == "obs")  # magnitude reads activations only to update
        errors[update] = _hidden_error(tiny, dense, windows)
        masks[update] = [
            weight_matrix(m) == 0 for layer in decoder_layers(tiny.model) for m in prunable_linears(layer).values()
        ]
    assert errors["obs"] < errors["none"]
    assert all(torch.equal(a, b) for a, b in zip(masks["none"], masks["obs"], strict=True))  # the mask is magnitude's


def test_settings_a_method_cannot_use_are_put_back_so_they_never_split_a_comparison(make_tiny_model, calib_file):
    from acetui_core.pruning.validate import check_config

    model = str(make_tiny_model("llama"))
    variant = dict(calib=calib_file, varp_scale="rms", varp_form="inverse", owl_lambda=0.2)
    wanda = check_config(RunConfig(model=model, method="wanda", sparsity="0.5", **variant))
    ace = check_config(RunConfig(model=model, method="ace", sparsity="0.5", **variant))
    assert (wanda.varp_scale, wanda.varp_form, wanda.owl_lambda) == ("none", "series", 0.08)  # uniform: lambda unused
    assert (ace.varp_scale, ace.varp_form) == ("rms", "inverse")


UNREAD = dict(squared_weight=True, ria_alpha=0.9, moe_calibration="all")


@pytest.mark.parametrize(
    "method, kept",
    [
        ("wanda", {}),
        ("sparsegpt", {}),
        ("ace", {"squared_weight": True}),
        ("varp", {"squared_weight": True}),
        ("ria", {"ria_alpha": 0.9}),
        ("ria+varp", {"ria_alpha": 0.9}),
    ],
)
def test_score_options_a_method_never_reads_are_recorded_at_their_defaults(make_tiny_model, calib_file, method, kept):
    """--squared-weight, --ria-alpha (and --moe-calibration on a dense model) given to a method that never reads
    them gave the plain method's masks, recorded as a variant of their own rows."""
    from acetui_core.pruning.validate import check_config

    config = RunConfig(model=str(make_tiny_model("llama")), method=method, sparsity="0.5", calib=calib_file, **UNREAD)
    checked = check_config(config)
    defaults = RunConfig(model="any")
    expected = {name: kept.get(name, getattr(defaults, name)) for name in UNREAD}
    assert {name: getattr(checked, name) for name in UNREAD} == expected


@pytest.mark.parametrize("method, kept", [("wanda", "all"), ("magnitude", "routed")])
def test_expert_calibration_is_kept_where_experts_activations_are_gathered(make_moe, calib_file, method, kept):
    from acetui_core.pruning.validate import check_config

    config = RunConfig(model=str(make_moe("mixtral")), method=method, sparsity="0.5", calib=calib_file, **UNREAD)
    assert check_config(config).moe_calibration == kept


def test_owl_centres_on_the_plain_mean_as_its_code_and_the_weighted_mean_is_a_variant():
    """OWL's code: keep ratio x - np.mean(x) + (1 - s), so the layer sparsities' plain mean is the target;
    on layers of different sizes the weighted variant makes the parameter-weighted mean the target."""
    plain = owl_sparsities([1.0, 2.0, 3.0], [1, 1, 10], 0.7, 0.08)
    assert plain == pytest.approx([0.78, 0.70, 0.62], abs=1e-12)
    assert owl_sparsities([1.0, 2.0, 3.0], [1, 1, 10], 0.7, 0.08, "weighted") == pytest.approx([0.84, 0.76, 0.68])
    assert owl_sparsities([1.0, 2.0, 3.0], [5, 5, 5], 0.7, 0.08, "weighted") == pytest.approx(plain, abs=1e-12)


def test_owl_prunes_a_layer_below_zero_at_one_percent_as_its_code():
    # x = [0, 0.2, 0.2], plain mean 2/15: 0.05 - x + 2/15 = 0.1833, -0.0167, -0.0167
    assert owl_sparsities([0.0, 1.0, 1.0], [1, 1, 1], 0.05, 0.1) == pytest.approx([0.05 + 0.2 * 2 / 3, 0.01, 0.01])


def test_old_owl_runs_read_back_weighted_and_share_cells_with_new_ones_where_the_means_agree():
    from acetui_core.analysis.rowlabels import _weighted_mean_mattered
    from acetui_core.run.records import LayerAllocation, RunResult

    stored = RunConfig(model="m", allocation="owl").to_dict()
    del stored["owl_mean"]
    assert RunConfig.from_dict(stored).owl_mean == "weighted"
    assert RunConfig.from_dict({**stored, "allocation": "uniform"}).owl_mean == "plain"

    def result(targets):
        return RunResult(
            "m",
            "wanda",
            "Wanda-16",
            "0.7",
            "row",
            allocation=[LayerAllocation(i, float(i), t) for i, t in enumerate(targets)],
        )

    equal = owl_sparsities([0.1, 0.3, 0.2], [4, 4, 4], 0.7, 0.08, "weighted")
    unequal = owl_sparsities([0.1, 0.3, 0.2], [4, 40, 4], 0.7, 0.08, "weighted")
    assert not _weighted_mean_mattered(result(equal), 0.7)
    assert _weighted_mean_mattered(result(unequal), 0.7)


def test_owl_mean_is_put_back_where_every_layer_is_equal_in_size(make_tiny_model, make_moe, calib_file):
    from acetui_core.pruning.validate import check_config

    weighted = dict(calib=calib_file, allocation="owl", owl_mean="weighted")
    assert check_config(RunConfig(model=str(make_tiny_model("llama")), **weighted)).owl_mean == "plain"
    dense_first = str(make_moe("deepseek_v3", first_k_dense_replace=1))  # layer 0 dense, layer 1 experts
    assert check_config(RunConfig(model=dense_first, **weighted)).owl_mean == "weighted"


def test_owl_at_a_low_sparsity_is_not_refused_and_the_highest_layer_is_bounded_by_the_layers(
    make_tiny_model, calib_file
):
    """``--sparsity 0.05 --owl-lambda 0.08`` (OWL's own lambda) was refused as taking a layer below 0, which
    OWL's code prunes at 0.01; the refusal above 1 now counts what OWL can give a layer over these layers."""
    from acetui_core.pruning.allocation import highest_owl_sparsity
    from acetui_core.pruning.validate import check_config

    model = str(make_tiny_model("llama"))  # two decoder layers of one size
    low = check_config(RunConfig(model=model, calib=calib_file, allocation="owl", sparsity="0.05", owl_lambda=0.08))
    assert low.owl_lambda == 0.08
    assert highest_owl_sparsity([10, 10], 0.9, 0.08) == pytest.approx(0.98)  # one layer at 0, the other at 2 lambda
    assert highest_owl_sparsity([10, 10, 10, 10], 0.9, 0.08) == pytest.approx(0.9 + 0.16 * 3 / 4)
    assert highest_owl_sparsity([1, 10], 0.9, 0.08, "weighted") == pytest.approx(0.9 + 0.16 * 10 / 11)
    check_config(RunConfig(model=model, calib=calib_file, allocation="owl", sparsity="0.9", owl_lambda=0.08))
    with pytest.raises(UserError, match="could give a layer a sparsity of 1.02"):
        check_config(RunConfig(model=model, calib=calib_file, allocation="owl", sparsity="0.9", owl_lambda=0.12))
