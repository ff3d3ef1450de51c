"""Mixture-of-experts models (and GPT-NeoX): every expert is pruned with its own routed statistics, the
reported sparsity is the one the saved weights have, routers stay dense, and a layout the table does not
know is refused. Tiny random models from transformers' own configs (tests/moe_models.py)."""

from __future__ import annotations

import logging

import pytest
import torch
from moe_models import FAMILIES, split_experts
from runhelpers import saved_tensors

from acetui_core.basics.errors import UserError
from acetui_core.modeling import placement
from acetui_core.modeling.layouts import decoder_layers, prunable_linears, weight_matrix
from acetui_core.modeling.models import load_model
from acetui_core.modeling.routing import MIN_EXPERT_TOKENS
from acetui_core.pruning import layerstats, pipeline
from acetui_core.run.config import RunConfig

QUICK = ["--nsamples", "8", "--seqlen", "16", "--eval", "none"]
ROUTING = (".gate.weight", ".router.", ".shared_expert_gate.")


def _pruned_zeros(tensors: dict[str, torch.Tensor], only: str = "") -> tuple[int, int]:
    """Zeros and weights of the saved decoder projections (matrices and expert stacks, not routers or biases)."""
    zeros = weights = 0
    for name, tensor in tensors.items():
        if ".layers." not in name or tensor.dim() < 2 or name.endswith("bias") or any(r in name for r in ROUTING):
            continue
        if only in name:
            zeros += int((tensor == 0).sum())
            weights += tensor.numel()
    return zeros, weights


@pytest.mark.parametrize("family", [*FAMILIES, "gpt_neox"])
@pytest.mark.parametrize(
    ("sparsity", "offload"), [("0.5", "auto"), ("2:4", "auto"), ("0.5", "none")], ids=["0.5", "2:4", "0.5-in-memory"]
)
def test_saved_weights_have_the_reported_sparsity(cli, make_moe, calib_file, tmp_path, family, sparsity, offload):
    """``--eval none`` streams the layers from disk (``auto``); ``none`` holds the model in memory. A streamed
    GPT-NeoX could not be read (transformers renames its ``embed_out`` to ``lm_head`` while loading)."""
    source = make_moe(family)
    code, out, err = cli("prune", source, "-m", "wanda", "-s", sparsity, "--calib", calib_file, *QUICK,
                         "--save", tmp_path / "out", "--offload", offload, "--json")  # fmt: skip
    assert code == 0, err
    import json

    result = json.loads(out)
    dense, pruned = saved_tensors(source), saved_tensors(tmp_path / "out")
    assert pruned.keys() == dense.keys()  # named as save_pretrained names them
    zeros, weights = _pruned_zeros(pruned)
    assert zeros / weights == pytest.approx(0.5, abs=1e-9)
    assert result["overall_sparsity"] == pytest.approx(zeros / weights, abs=1e-9)
    if family != "gpt_neox":
        experts = _pruned_zeros(pruned, ".experts.")
        assert experts[0] / experts[1] == pytest.approx(0.5, abs=1e-9) and experts[1] > 0
        assert result["kinds"]["experts"] == pytest.approx(0.5, abs=1e-9)
    routers = [name for name in dense if any(r in name for r in ROUTING)]
    assert routers or family == "gpt_neox"
    for name in routers:  # routers and gates: bit-identical to the dense model
        assert torch.equal(dense[name], pruned[name]), name
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(tmp_path / "out")  # loads back in the layout transformers expects


@pytest.fixture(scope="module")
def qwen2_moe(make_moe):
    """Qwen2-MoE: routed experts, a shared expert and its one-row gate."""
    loaded = load_model(str(make_moe("qwen2_moe")), device="cpu")
    loaded.snapshot()
    return loaded


@pytest.mark.parametrize(
    "settings",
    [
        {"method": "magnitude"},
        {"method": "ria", "group": "layer"},
        {"method": "cosp"},
        {"method": "varp", "varp_form": "inverse", "varp_scale": "max"},
        {"method": "ace"},
        {"method": "wanda+varp"},
        {"method": "ria+varp"},
        {"method": "sparsegpt"},
        {"method": "wanda", "update": "obs"},
        {"method": "wanda", "allocation": "owl", "sparsity": "0.6"},
        {"method": "ace", "fidelity": True, "sparsity": "4:8"},
        {"method": "wanda", "moe_calibration": "all"},
    ],
    ids=lambda settings: "-".join(str(v) for v in settings.values()),
)
def test_every_metric_prunes_every_expert(qwen2_moe, calib_file, settings):
    fields = {"sparsity": "0.5", "calib": calib_file, "nsamples": 8, "seqlen": 16, "evals": [], **settings}
    config = RunConfig(model=qwen2_moe.source, device="cpu", **fields)
    qwen2_moe.reset()
    pruned = pipeline.prune(qwen2_moe, config)
    zeros = weights = 0
    for index, layer in enumerate(decoder_layers(qwen2_moe.model)):
        for name, matrix in prunable_linears(layer).items():
            W = weight_matrix(matrix)
            zeros, weights = zeros + int((W == 0).sum()), weights + W.numel()
            reported = next(s for s in pruned.layers if s.layer == index and s.name == name)
            assert reported.sparsity == (W == 0).sum().item() / W.numel()
            if config.allocation == "uniform":
                assert reported.sparsity == pytest.approx(config.sparsity_spec.fraction, abs=0.02), name
        assert "mlp.shared_expert_gate" not in prunable_linears(layer)
        assert torch.count_nonzero(layer.mlp.shared_expert_gate.weight) == layer.mlp.shared_expert_gate.weight.numel()
    assert pruned.overall_sparsity == pytest.approx(zeros / weights, abs=1e-12)
    assert set(pruned.kinds) == {"attention", "experts", "shared_experts"}
    if config.method != "magnitude":  # a method without calibration data has no token load to record
        assert pruned.experts is not None and pruned.experts.calibration == config.moe_calibration
        assert [len(load.tokens) for load in pruned.experts.load] == [8, 8]


def test_a_plugin_metric_receives_each_expert_as_a_matrix(qwen2_moe, calib_file, tmp_path):
    plugin = tmp_path / "shapes.py"
    plugin.write_text("SEEN = []\n\ndef score(W, stats, opts):\n    SEEN.append(tuple(W.shape))\n    return W.abs()\n")
    config = RunConfig(model=qwen2_moe.source, method=f"{plugin}:score", sparsity="0.5", calib=calib_file,
                       nsamples=4, seqlen=16, evals=[], device="cpu")  # fmt: skip
    qwen2_moe.reset()
    pruned = pipeline.prune(qwen2_moe, config)
    assert pruned.kinds["experts"] == pytest.approx(0.5)
    experts = [s for s in pruned.layers if s.kind == "experts"]
    assert len(experts) == 2 * 8 * 2  # 2 layers, 8 experts, gate_up and down


def _layer_with(family, make_moe, edit):
    loaded = load_model(str(make_moe(family)), device="cpu")
    edit(decoder_layers(loaded.model)[0])
    return loaded


def test_a_weight_the_table_does_not_know_is_refused_with_its_name(cli, make_moe, calib_file, monkeypatch):
    """A future layout (here: transformers' experts as if their down_proj were unknown) stops the run."""
    import acetui_core.modeling.layouts

    monkeypatch.setattr(acetui_core.modeling.layouts, "FUSED_EXPERTS", ("gate_up_proj",))
    code, _, err = cli("prune", make_moe("qwen3_moe"), "-m", "wanda", "--calib", calib_file, *QUICK)
    assert code == 2
    assert "mlp.experts.down_proj" in err and "qwen3_moe" in err and "Traceback" not in err


def test_an_unknown_matrix_in_a_layer_is_refused(make_moe, calib_file):
    def add(layer):
        layer.mlp.mystery = torch.nn.Parameter(torch.zeros(4, 8, 8))

    loaded = _layer_with("mixtral", make_moe, add)
    config = RunConfig(model=loaded.source, method="magnitude", sparsity="0.5", evals=[], device="cpu")
    with pytest.raises(UserError, match=r"Layer 0's weight mlp\.mystery .* 'mixtral' architecture"):
        pipeline.prune(loaded, config)


def test_a_matrix_the_pruning_silently_skips_stops_the_run_before_evaluation(cli, make_moe, calib_file, monkeypatch):
    """A layout whose down_proj slices are copies, not views: pruning writes to the copies and the fused
    parameter stays dense. The guard after pruning counts the parameter's own zeros and stops the run."""
    from acetui_core.modeling.layouts import Matrix

    as_stored = Matrix.weight.fget
    copies = property(lambda m: as_stored(m).clone() if m.param == "down_proj" else as_stored(m))
    monkeypatch.setattr(Matrix, "weight", copies)
    code, out, err = cli("prune", make_moe("qwen3_moe"), "-m", "wanda", "--calib", calib_file, *QUICK[:-2],
                         "--eval", "wikitext2", "--eval-limit", "1", "--json")  # fmt: skip
    assert code == 2 and out == ""
    assert "Layer 0's weight mlp.experts.down_proj" in err and "'qwen3_moe' architecture" in err
    assert "0.0% zeros after pruning to 50.0%" in err and "Traceback" not in err


def _starve_expert_zero(model):
    """With one expert per token, a zero router row for expert 0 and rows 1 and 2 opposite, one of experts 1
    and 2 always scores at least 0 = expert 0's score: expert 0 receives no token in layer 0."""
    router = decoder_layers(model)[0].mlp.gate.weight
    with torch.no_grad():
        router[0] = 0
        router[2] = -router[1]


def test_an_expert_without_tokens_falls_back_to_all_tokens(make_moe, calib_file, caplog):
    source = make_moe("mixtral", edit=_starve_expert_zero, num_experts_per_tok=1)
    loaded = load_model(str(source), device="cpu")
    config = RunConfig(model=str(source), method="wanda", sparsity="0.5", calib=calib_file, nsamples=8, seqlen=16,
                       evals=[], device="cpu")  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="acetui"):
        pruned = pipeline.prune(loaded, config)
    assert pruned.experts is not None
    load = pruned.experts.load[0]
    assert load.layer == 0 and load.tokens[0] == 0 and sum(load.tokens) == 8 * 16
    fallback = next(f for f in pruned.experts.fallbacks if f.layer == 0 and f.expert == "mlp.experts.0")
    assert fallback.tokens == 0 and fallback.min_tokens == MIN_EXPERT_TOKENS
    assert "Layer 0 mlp.experts.0 received 0 calibration token(s)" in caplog.text
    expert = [s for s in pruned.layers if s.layer == 0 and s.name.startswith("mlp.experts.0.")]
    assert len(expert) == 2 and all(s.sparsity == 0.5 for s in expert)  # pruned with all tokens' statistics


def test_routed_statistics_are_those_of_the_tokens_the_router_sent(make_moe, calib_file):
    from acetui_core.modeling.data import calibration_windows, tokenized_calibration

    loaded = load_model(str(make_moe("mixtral")), device="cpu")
    ids, _ = tokenized_calibration(loaded.tokenizer, calib_file)
    inputs = placement.capture_layer0_inputs(loaded, calibration_windows(ids, 4, 16, 0), 4, torch.device("cpu"))
    layer = decoder_layers(loaded.model)[0]
    block_inputs = []
    hook = layer.mlp.register_forward_pre_hook(lambda module, args: block_inputs.append(args[0].reshape(-1, 64)))
    try:
        stats = layerstats.gather_stats(layer, prunable_linears(layer), inputs, "cpu", hessian=True)
    finally:
        hook.remove()
    x = torch.cat(block_inputs)
    _, _, chosen = layer.mlp.gate(x)
    experts = layer.mlp.experts
    for e in range(4):
        mine = x[(chosen == e).any(dim=-1)]
        gate, up = (mine @ experts.gate_up_proj[e].t()).chunk(2, dim=-1)
        inner = torch.nn.functional.silu(gate) * up
        first, second = stats[f"mlp.experts.{e}.gate_up_proj"], stats[f"mlp.experts.{e}.down_proj"]
        assert first.tokens == second.tokens == mine.shape[0] > 0
        mine, inner = mine.double(), inner.double()  # the accumulators' own precision
        torch.testing.assert_close(first.sq.double(), (mine**2).sum(0))
        torch.testing.assert_close(first.xtx.double(), mine.t() @ mine)
        torch.testing.assert_close(second.sq.double(), (inner**2).sum(0))
        torch.testing.assert_close(second.q.double(), (inner**4).sum(0))


def _layer0_inputs(loaded, calib_file, windows=4):
    from acetui_core.modeling.data import calibration_windows, tokenized_calibration

    ids, _ = tokenized_calibration(loaded.tokenizer, calib_file)
    return placement.capture_layer0_inputs(loaded, calibration_windows(ids, windows, 16, 0), 4, torch.device("cpu"))


@pytest.mark.parametrize("calibration", ["routed", "all"])
def test_one_linear_per_expert_gets_the_same_statistics_as_the_fused_slices(make_moe, calib_file, calibration):
    """The layout of remote-code MoE models (experts.<e>.w1/w3/w2): each expert's linears see its routed
    tokens, or with --moe-calibration all every token, as the fused slices of the same weights do."""
    loaded = load_model(str(make_moe("mixtral")), device="cpu")
    inputs = _layer0_inputs(loaded, calib_file)
    layer = decoder_layers(loaded.model)[0]
    hidden, kwargs = inputs[0]
    dense = placement.layer_forward(layer, hidden.clone(), kwargs, "cpu")
    fused = layerstats.gather_stats(layer, prunable_linears(layer), inputs, "cpu", moe_calibration=calibration)
    split_experts(loaded.model)
    torch.testing.assert_close(placement.layer_forward(layer, hidden.clone(), kwargs, "cpu"), dense)
    linears = prunable_linears(layer)
    assert {m.expert for name, m in linears.items() if name.endswith(".w1")} == {0, 1, 2, 3}
    split = layerstats.gather_stats(layer, linears, inputs, "cpu", moe_calibration=calibration)
    tokens = sum(h.shape[0] * h.shape[1] for h, _ in inputs)
    for e in range(4):
        gate_up, down = fused[f"mlp.experts.{e}.gate_up_proj"], fused[f"mlp.experts.{e}.down_proj"]
        for name in ("w1", "w3"):
            assert split[f"mlp.experts.{e}.{name}"].tokens == gate_up.tokens
            torch.testing.assert_close(split[f"mlp.experts.{e}.{name}"].sq, gate_up.sq)
        assert split[f"mlp.experts.{e}.w2"].tokens == down.tokens
        torch.testing.assert_close(split[f"mlp.experts.{e}.w2"].sq, down.sq)
        assert (gate_up.tokens == tokens) == (calibration == "all")


def test_a_starved_expert_with_its_own_linears_falls_back_to_all_tokens(make_moe, calib_file, caplog):
    loaded = load_model(str(make_moe("mixtral", edit=_starve_expert_zero, num_experts_per_tok=1)), device="cpu")
    split_experts(loaded.model)
    config = RunConfig(model="split", method="wanda", sparsity="0.5", calib=calib_file, nsamples=8, seqlen=16,
                       evals=[], device="cpu")  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="acetui"):
        pruned = pipeline.prune(loaded, config)
    assert pruned.experts is not None and pruned.experts.layout == "one linear per expert"
    load = pruned.experts.load[0]
    assert load.tokens[0] == 0 and sum(load.tokens) == 8 * 16
    fallback = next(f for f in pruned.experts.fallbacks if f.layer == 0 and f.expert == "mlp.experts.0")
    assert fallback.tokens == 0
    assert "Layer 0 mlp.experts.0 received 0 calibration token(s)" in caplog.text
    expert = [s for s in pruned.layers if s.layer == 0 and s.name.startswith("mlp.experts.0.")]
    assert len(expert) == 3 and all(s.sparsity == 0.5 for s in expert)  # pruned with all tokens' statistics


@pytest.mark.parametrize("family", ["gpt_oss", "mixtral"])
def test_streamed_and_in_memory_runs_give_the_same_masks(make_moe, calib_file, tmp_path, family):
    """gpt-oss stores its experts fused on disk; Mixtral per expert (block_sparse_moe.experts.<e>.w1/w2/w3),
    which transformers fuses while loading: streaming converts each layer the same way, and writes it back
    in the checkpoint's layout."""
    source = make_moe(family)
    results = {}
    for offload in ("none", "disk"):
        config = RunConfig(model=str(source), method="sparsegpt", sparsity="0.5", calib=calib_file, nsamples=8,
                           seqlen=16, evals=[], device="cpu", offload=offload, save=str(tmp_path / offload))  # fmt: skip
        results[offload] = pipeline.run(config)
    whole, streamed = saved_tensors(tmp_path / "none"), saved_tensors(tmp_path / "disk")
    assert whole.keys() == streamed.keys() == saved_tensors(source).keys()  # the source checkpoint's own layout
    for name in whole:
        assert torch.equal(whole[name] == 0, streamed[name] == 0), name
    assert results["disk"].overall_sparsity == results["none"].overall_sparsity
    assert results["disk"].experts.load == results["none"].experts.load


def test_moe_calibration_is_checked_before_any_work(cli, make_moe):
    code, _, err = cli("prune", make_moe("mixtral"), "--moe-calibration", "some", *QUICK)
    assert code == 2 and "Unknown --moe-calibration 'some'; choose one of: routed, all." in err


def test_each_moe_layer_records_its_token_load_as_it_is_pruned(make_moe, calib_file):
    """The Run screen and runs show read a running run's token load from its pruned layers: each layer's
    record carries its own share, and together they are the finished result's."""
    from acetui_core.run.events import LayerPruned
    from acetui_core.run.experts import Experts

    loaded = load_model(str(make_moe("mixtral", edit=_starve_expert_zero, num_experts_per_tok=1)), device="cpu")
    config = RunConfig(model="mixtral", method="wanda", sparsity="0.5", calib=calib_file, nsamples=8, seqlen=16,
                       evals=[], device="cpu")  # fmt: skip
    layers = []
    pruned = pipeline.prune(loaded, config, lambda e: layers.append(e.layer) if isinstance(e, LayerPruned) else None)
    assert [layer.experts.load[0].layer for layer in layers if layer.experts] == [0, 1]
    assert [f.expert for f in layers[0].experts.fallbacks] == ["mlp.experts.0"]
    assert Experts.joined([layer.experts for layer in layers if layer.experts]) == pruned.experts


STARVED = {"layer": 1, "expert": "mlp.experts.2", "tokens": 3, "min_tokens": MIN_EXPERT_TOKENS}
TOKEN_LOAD = {
    "layout": "fused 3-D [experts, d_out, d_in]: gate_up_proj, down_proj",
    "calibration": "routed",
    "load": [
        {"layer": 0, "experts": "mlp.experts", "tokens": [40, 25, 31, 32]},
        {"layer": 1, "experts": "mlp.experts", "tokens": [60, 32, 3, 33]},
    ],
    "fallbacks": [STARVED],
}


def _moe_run(store, state: str) -> str:
    """A finished run with its token load in the result, or a running one whose two pruned layers (of 4)
    carry theirs, recorded through the store as the runner records them."""
    from runhelpers import insert_run, layer_event

    from acetui_core.run.events import RunStarted
    from acetui_core.run.experts import Experts
    from acetui_core.run.records import from_dict

    config = RunConfig(model="tiny-mixtral", method="wanda", sparsity="0.5")
    if state == "finished":
        return insert_run(
            store, store.clock, "moe00001", config, created=1.7e9, ppl=20.0, result={"experts": TOKEN_LOAD}
        )
    run_id = store.create_run(config)
    store.claim(run_id)
    store.record_event(run_id, RunStarted(config.model, config.method, config.sparsity, 4, "cpu"))
    experts = from_dict(Experts, TOKEN_LOAD)
    for index in range(2):
        event = layer_event(index, 4)
        event.layer.experts = experts.of_layer(index)
        store.record_event(run_id, event)
    return run_id


@pytest.mark.asyncio
@pytest.mark.parametrize("state", ["finished", "running"])
async def test_the_run_screen_shows_each_experts_token_load_with_the_starved_marked(tmp_path, state):
    from runhelpers import Clock, pilot_wait_until
    from textual.widgets import Static

    from acetui.app import make_app
    from acetui_core.storage.store import Store

    store = Store(tmp_path / "runs.db", clock=Clock())
    run_id = _moe_run(store, state)
    app = make_app(store, attach=run_id)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot_wait_until(pilot, lambda: app.screen._run is not None, "the run")
        await pilot.press("x")
        await pilot.pause()
        grid = str(app.screen.query_one("#experts-text", Static).render()).splitlines()
    assert grid[2].split() == ["0", "1", "2", "3"]  # one column per expert
    assert grid[3].split() == ["layer", "0", "mlp.experts", "40", "25", "31", "32"]
    assert grid[4].split() == ["layer", "1", "mlp.experts", "60", "32", "3*", "33"]  # marked without colour too
    assert "Layer 1 mlp.experts.2 received 3 calibration token(s), fewer than 16" in " ".join(grid)


def test_runs_show_prints_a_running_runs_token_load(tmp_path, cli):
    from runhelpers import Clock

    from acetui_core.storage.store import Store

    store = Store(tmp_path / "runs.db", clock=Clock())
    run_id = _moe_run(store, "running")
    code, out, err = cli("runs", "show", run_id, "--store", tmp_path / "runs.db")
    assert code == 0, err
    assert "layer 1 mlp.experts tokens: 60 32 3* 33" in out


@pytest.mark.parametrize("family", ["mixtral", "gpt_oss"])
def test_permutations_are_keyed_by_the_names_in_the_saved_checkpoint(make_moe, calib_file, tmp_path, family):
    """Mixtral is saved per expert (w1, w3 share the gate_up slice's order; w2 has down's); gpt-oss fused,
    its expert e keyed ``name[e]`` and stored (d_in, d_out). Every key's matrix is 2:4 in its order."""
    import json
    import re

    from acetui_core.scores.permute import PERMUTATIONS_FILE

    save = tmp_path / "out"
    config = RunConfig(model=str(make_moe(family)), method="wanda", sparsity="2:4", permute="lsa", calib=calib_file,
                       nsamples=8, seqlen=16, evals=[], device="cpu", save=str(save))  # fmt: skip
    pipeline.run(config)
    order = json.loads((save / PERMUTATIONS_FILE).read_text())["order"]
    saved = saved_tensors(save)
    experts = [key for key in order if ".experts." in key]
    assert len(experts) == 2 * 4 * (3 if family == "mixtral" else 2)  # 2 layers, 4 experts, each saved matrix
    assert len(order) == len(experts) + 2 * 4  # and q, k, v, o
    for key, columns in order.items():
        name, expert = re.fullmatch(r"(.+?)(?:\[(\d+)\])?", key).groups()
        W = saved[name] if expert is None else saved[name][int(expert)].t()  # gpt-oss: (d_in, d_out) on disk
        kept = (W[:, columns] != 0).reshape(W.shape[0], -1, 4).sum(-1)
        assert (kept <= 2).all(), key
    if family == "mixtral":
        assert "model.layers.1.block_sparse_moe.experts.3.w3.weight" in order


@pytest.mark.parametrize("sparsity, recorded", [("0", "routed"), ("0.5", "all")])
def test_expert_removal_alone_records_the_calibration_it_never_read(make_moe, calib_file, sparsity, recorded):
    """--sparsity 0 --expert-sparsity gathers no expert statistics (REAP scores on routed tokens): its
    --moe-calibration all was recorded, and verdict split identical runs into a false 'experts calibrated on
    all tokens' row; it records routed and shares the cell, as magnitude does."""
    from acetui_core.pruning.validate import check_config

    config = RunConfig(model=str(make_moe("qwen2_moe")), method="wanda", sparsity=sparsity, expert_sparsity=0.5,
                       moe_calibration="all", calib=calib_file, evals=[])  # fmt: skip
    assert check_config(config).moe_calibration == recorded
