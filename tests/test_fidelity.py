"""Output fidelity (--fidelity): the pipeline's running sums equal a direct computation on kept outputs."""

import copy
import csv
import io
import json
import math

import pytest
import torch
from runhelpers import Clock, cli, insert_run, layer_event

from acetui_core.modeling.data import calibration_windows, tokenized_calibration
from acetui_core.modeling.layouts import decoder_layers, prunable_linears, weight_matrix
from acetui_core.modeling.models import load_model
from acetui_core.pruning import pipeline
from acetui_core.pruning.fidelity import linear_fidelity
from acetui_core.run.config import RunConfig
from acetui_core.run.events import LayerPruned
from acetui_core.run.records import Fidelity
from acetui_core.storage.store import Store


def direct(dense: torch.Tensor, pruned: torch.Tensor) -> tuple[float, float]:
    """Cosine and relative L2 error of two output matrices, from the outputs themselves."""
    dense, pruned = dense.double().flatten(), pruned.double().flatten()
    cosine = torch.dot(dense, pruned) / (dense.norm() * pruned.norm())
    return cosine.item(), ((dense - pruned).norm() / dense.norm()).item()


def test_linear_fidelity_equals_the_outputs_on_a_hand_made_matrix():
    torch.manual_seed(0)
    W, X = torch.randn(6, 5), torch.randn(40, 5)
    pruned = W.masked_fill(W.abs() < 0.7, 0)
    fidelity = linear_fidelity(W, pruned, X.t() @ X)
    cosine, error = direct(X @ W.t(), X @ pruned.t())
    assert fidelity.cosine == pytest.approx(cosine, rel=1e-5)
    assert fidelity.rel_error == pytest.approx(error, rel=1e-5)
    assert linear_fidelity(W, W, X.t() @ X).rel_error == 0  # nothing pruned, nothing lost


@pytest.mark.parametrize("method", ["wanda", "sparsegpt"])
def test_recorded_fidelity_equals_a_direct_computation_on_a_tiny_model(make_tiny_model, calib_file, method):
    loaded = load_model(str(make_tiny_model("llama")), device="cpu")
    dense_model = copy.deepcopy(loaded.model)
    config = RunConfig(
        model=loaded.source,
        method=method,
        sparsity="0.5",
        calib=calib_file,
        nsamples=8,
        seqlen=16,
        evals=[],
        fidelity=True,
    )
    events = []
    pipeline.prune(loaded, config, events.append)
    layers = [event.layer for event in events if isinstance(event, LayerPruned)]

    # The inputs each pruned layer saw in the pipeline: the pruned model's own hidden states.
    ids, _ = tokenized_calibration(loaded.tokenizer, config.calib)
    windows = calibration_windows(ids, config.nsamples, config.seqlen, config.seed)
    seen = []
    hooks = [
        layer.register_forward_pre_hook(lambda m, args, kwargs: seen.append((args[0], kwargs)), with_kwargs=True)
        for layer in decoder_layers(loaded.model)
    ]
    with torch.no_grad():
        loaded.model(input_ids=windows, use_cache=False)
    for hook in hooks:
        hook.remove()

    for record, dense_layer, pruned_layer, (hidden, kwargs) in zip(
        layers, decoder_layers(dense_model), decoder_layers(loaded.model), seen, strict=True
    ):
        linear_inputs = {}
        hooks = [
            module.owner.register_forward_pre_hook(
                lambda m, args, n=name, seen=linear_inputs: seen.setdefault(n, args[0])
            )
            for name, module in prunable_linears(dense_layer).items()
        ]
        with torch.no_grad():
            dense_out, pruned_out = dense_layer(hidden, **kwargs), pruned_layer(hidden, **kwargs)
        for hook in hooks:
            hook.remove()
        first = lambda out: out[0] if isinstance(out, tuple) else out  # noqa: E731
        cosine, error = direct(first(dense_out), first(pruned_out))
        assert record.fidelity.cosine == pytest.approx(cosine, rel=1e-5)
        assert record.fidelity.rel_error == pytest.approx(error, rel=1e-4)
        assert 0 < record.fidelity.rel_error < 1

        pruned_linears = prunable_linears(pruned_layer)
        for linear in record.linears:
            x = linear_inputs[linear.name].reshape(-1, linear.d_in)
            W = weight_matrix(prunable_linears(dense_layer)[linear.name])
            cosine, error = direct(x @ W.t(), x @ weight_matrix(pruned_linears[linear.name]).t())
            assert linear.fidelity.cosine == pytest.approx(cosine, rel=1e-5), linear.name
            assert linear.fidelity.rel_error == pytest.approx(error, rel=1e-4), linear.name
            assert not math.isnan(linear.fidelity.cosine)


def test_no_fidelity_unless_asked(make_tiny_model, calib_file):
    loaded = load_model(str(make_tiny_model("llama")), device="cpu")
    events = []
    config = RunConfig(
        model=loaded.source, method="wanda", sparsity="0.5", calib=calib_file, nsamples=4, seqlen=16, evals=[]
    )
    pipeline.prune(loaded, config, events.append)
    layers = [event.layer for event in events if isinstance(event, LayerPruned)]
    assert layers and all(layer.fidelity is None for layer in layers)
    assert all(linear.fidelity is None for layer in layers for linear in layer.linears)


def test_fidelity_of_a_run_without_calibration_is_put_back_to_off(make_tiny_model, calib_file):
    """A magnitude run asked for --fidelity recorded it in its settings, measured nothing (it reads no
    calibration tokens) and the app then told the user to run it with --fidelity."""
    from acetui_core.pruning.validate import check_config

    model = str(make_tiny_model("llama"))
    assert check_config(RunConfig(model=model, method="magnitude", fidelity=True, calib=calib_file)).fidelity is False
    with_obs = RunConfig(model=model, method="magnitude", fidelity=True, update="obs", calib=calib_file)
    assert check_config(with_obs).fidelity is True  # the OBS update reads the calibration tokens: measured


def test_fidelity_of_magnitude_removing_experts_stays_on(make_moe, calib_file):
    """--expert-sparsity reads calibration tokens (REAP's scores) whatever the method: a magnitude run of it
    measures fidelity, and the first fix put --fidelity back to off there too."""
    from acetui_core.pruning.validate import check_config

    config = RunConfig(model=str(make_moe("mixtral")), method="magnitude", fidelity=True, expert_sparsity=0.25,
                       calib=calib_file)  # fmt: skip
    assert check_config(config).fidelity is True


def test_fidelity_is_stored_shown_as_json_and_exported_per_layer(monkeypatch, capsys, tmp_path):
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    config = RunConfig(model="/models/llama-7b", method="ace", sparsity="0.5", fidelity=True)
    insert_run(store, clock, "f0000001", config, created=1e9, ppl=7.0, layers=0)
    for index, error in enumerate([0.125, 0.25]):
        event = layer_event(index, 2)
        event.layer.fidelity = Fidelity(cosine=1 - error / 10, rel_error=error)
        event.layer.linears[0].fidelity = Fidelity(cosine=0.99, rel_error=error / 2)
        store.record_event("f0000001", event)

    run = store.get_run("f0000001")
    assert [layer.fidelity.rel_error for layer in run.layers] == [0.125, 0.25]
    assert run.layers[1].linears[0].fidelity == Fidelity(cosine=0.99, rel_error=0.125)
    assert run.layers[1].linears[1].fidelity is None

    code, out, _ = cli(monkeypatch, capsys, "runs", "show", "f0000001", "--store", store.path, "--json")
    assert code == 0 and json.loads(out)["layers"][1]["fidelity"] == {"cosine": 0.975, "rel_error": 0.25}

    code, out, _ = cli(monkeypatch, capsys, "export", "--store", store.path)
    [row] = csv.DictReader(io.StringIO(out))
    assert float(row["fidelity.layer1.rel_error"]) == 0.25 and float(row["fidelity.layer0.cosine"]) == 0.9875
