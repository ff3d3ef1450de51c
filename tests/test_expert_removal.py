"""Whole routed experts removed (--expert-sparsity, --expert-score): the saved checkpoint really has fewer
experts and loads with the logits of the model in memory, REAP and frequency remove the experts their
definitions pick, the method's mask prunes the rest, and streaming saves the same. Tiny random models of
every family (tests/moe_models.py)."""

from __future__ import annotations

import json

import pytest
import torch
from moe_models import FAMILIES, split_experts
from runhelpers import saved_tensors
from test_moe import QUICK, _layer0_inputs

from acetui_core.basics.errors import UserError
from acetui_core.modeling.layouts import decoder_layers
from acetui_core.modeling.models import load_model
from acetui_core.pruning import pipeline
from acetui_core.pruning.expertremoval import COUNT_FIELDS
from acetui_core.run.config import RunConfig

COUNTS = {"mixtral": 4, "qwen2_moe": 8, "qwen3_moe": 8, "deepseek_v3": 8, "gpt_oss": 4, "ernie4_5_moe": 8}
BUILT_THE_SAME_WAY = {"olmoe": 8, "glm4_moe": 8, "phimoe": 4, "granitemoe": 4}  # no entry in the table of layouts
COUNTS |= BUILT_THE_SAME_WAY
GRANITE_EXPERTS = ("input_linear.weight", "output_linear.weight")  # Granite-MoE's saved experts
DENSE_FIRST = ("deepseek_v3", "glm4_moe")  # first_k_dense_replace=1: layer 0 is a dense MLP


def _run(source, calib_file, save=None, **settings):
    fields = dict(method="wanda", sparsity="0.5", expert_sparsity=0.5, calib=calib_file, nsamples=8, seqlen=16)
    config = RunConfig(model=str(source), evals=[], device="cpu", save=save and str(save), **{**fields, **settings})
    loaded = load_model(str(source), device="cpu")
    return pipeline.run(config, loaded=loaded), loaded


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def _expert_tensors(saved: dict[str, torch.Tensor], layer: int) -> dict[str, int]:
    """Per saved expert weight name of ``layer`` (index stripped), how many experts the checkpoint holds."""
    counts: dict[str, int] = {}
    for name, tensor in saved.items():
        if f"layers.{layer}." in name and name.endswith(GRANITE_EXPERTS):  # fused, under Granite's own names
            counts[name.rsplit(".", 2)[-2]] = tensor.shape[0]
        if f"layers.{layer}." not in name or ".experts." not in name or "shared" in name:
            continue
        parts = name.split(".")
        at = parts.index("experts")
        if parts[at + 1].isdigit():  # saved per expert: count the indices
            key = ".".join(parts[at + 2 :])
            counts[key] = max(counts.get(key, 0), int(parts[at + 1]) + 1)
        else:  # saved fused: the first dimension
            counts[".".join(parts[at + 1 :])] = tensor.shape[0]
    return counts


@pytest.mark.parametrize("family", [*FAMILIES, "ernie4_5_moe", *BUILT_THE_SAME_WAY])
def test_the_saved_checkpoint_has_fewer_experts_and_loads_with_the_same_logits(make_moe, calib_file, tmp_path, family):
    from transformers import AutoConfig, AutoModelForCausalLM

    source, dense = make_moe(family), COUNTS[family]
    result, loaded = _run(source, calib_file, tmp_path / "out")
    config = AutoConfig.from_pretrained(tmp_path / "out")
    fields = [f for f in COUNT_FIELDS if hasattr(AutoConfig.from_pretrained(source), f)]
    assert fields and all(getattr(config, f) == dense // 2 for f in fields)
    assert config.num_experts_per_tok <= dense // 2
    saved, moe_layers = saved_tensors(tmp_path / "out"), [r.layer for r in result.experts.removal]
    assert moe_layers == ([1] if family in DENSE_FIRST else [0, 1])
    for layer in moe_layers:
        assert set(_expert_tensors(saved, layer).values()) == {dense // 2}
        routers = [t for n, t in saved.items() if f"layers.{layer}." in n and (".gate." in n or ".router." in n)]
        assert routers and all(dense // 2 in t.shape and dense not in t.shape for t in routers)  # rows, biases
    removed = result.experts_removed
    assert removed.kept == [dense // 2] * len(moe_layers) and removed.counted_from == "saved checkpoint"
    assert removed.parameters_before - removed.parameters_after == removed.parameters_removed > 0
    assert sum(t.numel() for t in saved.values()) == removed.parameters_after
    assert removed.bytes_after < removed.bytes_before
    back = AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    ids = torch.randint(0, 1000, (2, 12))
    torch.testing.assert_close(_logits(back, ids), _logits(loaded.model, ids), rtol=0, atol=1e-5)


def _block_inputs(loaded, calib_file) -> tuple[torch.nn.Module, torch.Tensor]:
    """Layer 0 of the dense model and what its MoE block receives from the 8 calibration windows a run takes."""
    from acetui_core.modeling.placement import layer_forward

    layer = decoder_layers(loaded.model)[0]
    seen = []
    hook = layer.mlp.register_forward_pre_hook(lambda module, args: seen.append(args[0].reshape(-1, 64)))
    with torch.no_grad():
        for hidden, kwargs in _layer0_inputs(loaded, calib_file, windows=8):
            layer_forward(layer, hidden, kwargs, "cpu")
    hook.remove()
    return layer, torch.cat(seen)


def _silence_expert_two(model):
    """Expert 2's down projection is zero in every layer: its output, and so its REAP score, is 0."""
    for layer in decoder_layers(model):
        with torch.no_grad():
            layer.mlp.experts.down_proj[2] = 0


def test_reap_removes_the_expert_whose_output_is_zero_and_scores_by_its_definition(make_moe, calib_file):
    source = make_moe("mixtral", edit=_silence_expert_two)
    result, _ = _run(source, calib_file, expert_sparsity=0.25, sparsity="0")
    assert [r.removed for r in result.experts.removal] == [[2], [2]]
    layer, x = _block_inputs(load_model(str(source), device="cpu"), calib_file)
    with torch.no_grad():
        logits, _, chosen = layer.mlp.gate(x)
    gates = torch.softmax(logits.float(), dim=-1)  # Mixtral's config has no norm_topk_prob: not renormalised
    expected = []
    for e in range(4):
        rows = (chosen == e).any(dim=-1)
        alone = torch.full((int(rows.sum()), 1), e)
        with torch.no_grad():
            outputs = layer.mlp.experts(x[rows], alone, torch.ones(alone.shape))  # f_e(x) by transformers itself
        expected.append(float((gates[rows, e] * outputs.norm(dim=-1)).mean()))
    assert result.experts.removal[0].scores == pytest.approx(expected, rel=1e-4)


def test_frequency_removes_the_experts_with_fewest_routed_tokens_as_counted(make_moe, calib_file):
    source = make_moe("qwen3_moe")
    result, _ = _run(source, calib_file, expert_score="frequency", expert_sparsity=0.25)
    layer, x = _block_inputs(load_model(str(source), device="cpu"), calib_file)
    with torch.no_grad():
        _, _, chosen = layer.mlp.gate(x)
    counted = [int((chosen == e).any(dim=-1).sum()) for e in range(8)]
    record = result.experts.removal[0]
    assert record.score == "frequency" and record.scores == counted
    assert sorted(record.removed) == sorted(sorted(range(8), key=lambda e: (counted[e], e))[:2])
    assert result.experts.load[0].tokens == counted  # the routed statistics came from the same pass


@pytest.mark.parametrize("sparsity", ["0.5", "2:4"])
def test_removal_combines_with_the_methods_mask_on_the_kept_experts(make_moe, calib_file, tmp_path, sparsity):
    result, _ = _run(make_moe("qwen2_moe"), calib_file, tmp_path / "out", sparsity=sparsity)
    saved = saved_tensors(tmp_path / "out")
    experts = [t for n, t in saved.items() if ".experts." in n and "shared" not in n and n.endswith("weight")]
    assert len(experts) == 2 * 4 * 3  # 2 layers, 4 kept experts, gate, up and down saved apart
    for tensor in experts:
        if sparsity == "2:4":
            assert ((tensor != 0).reshape(tensor.shape[0], -1, 4).sum(-1) <= 2).all()
        assert (tensor == 0).float().mean() == pytest.approx(0.5, abs=0.02)
    assert result.overall_sparsity == pytest.approx(0.5, abs=0.01)
    pruned = {s.name for s in result.layers if s.kind == "experts" and s.layer == 0}
    gone = {f"{r.experts}.{e}" for r in result.experts.removal if r.layer == 0 for e in r.removed}
    assert len(pruned) == 4 * 2 and not any(name.rsplit(".", 1)[0] in gone for name in pruned)


def test_sparsity_zero_removes_experts_and_leaves_the_kept_ones_as_they_were(make_moe, calib_file):
    source = make_moe("gpt_oss")
    result, loaded = _run(source, calib_file, sparsity="0", method="magnitude")
    dense = load_model(str(source), device="cpu")
    for index, r in enumerate(result.experts.removal):
        kept = [e for e in range(4) if e not in r.removed]
        mine, theirs = decoder_layers(loaded.model)[index].mlp, decoder_layers(dense.model)[index].mlp
        assert torch.equal(mine.experts.gate_up_proj, theirs.experts.gate_up_proj[kept])
        assert torch.equal(mine.router.bias, theirs.router.bias[kept])
    assert result.overall_sparsity == 0


def _correction_bias(model):
    """DeepSeek's ``e_score_correction_bias`` (a persistent buffer, zero in a new model) made non-zero, so
    the choice of experts depends on it and a run that never read it routes otherwise."""
    for layer in decoder_layers(model)[1:]:
        layer.mlp.gate.e_score_correction_bias.copy_(torch.linspace(-0.5, 0.5, 8))


@pytest.mark.parametrize("family", ["mixtral", "deepseek_v3"])
def test_streamed_and_in_memory_removal_save_the_same_checkpoint(make_moe, calib_file, tmp_path, family):
    source = make_moe(family, edit=_correction_bias if family == "deepseek_v3" else None)
    results = {}
    for offload in ("none", "disk"):
        config = RunConfig(model=str(source), method="wanda", sparsity="0.5", expert_sparsity=0.5, calib=calib_file,
                           nsamples=8, seqlen=16, evals=[], device="cpu", offload=offload, save=str(tmp_path / offload))  # fmt: skip
        results[offload] = pipeline.run(config)
    whole, streamed = saved_tensors(tmp_path / "none"), saved_tensors(tmp_path / "disk")
    assert whole.keys() == streamed.keys()
    for name in whole:
        torch.testing.assert_close(whole[name], streamed[name]), name
    assert results["disk"].experts.removal == results["none"].experts.removal
    if family == "mixtral":
        assert "model.layers.0.block_sparse_moe.experts.1.w1.weight" in whole
        assert "model.layers.0.block_sparse_moe.experts.2.w1.weight" not in whole
        assert results["disk"].experts_removed.kept == [2, 2]
    else:  # the bias was read, cut with the router and written: the kept experts' entries
        kept = [e for e in range(8) if e not in results["none"].experts.removal[0].removed]
        assert torch.equal(whole["model.layers.1.mlp.gate.e_score_correction_bias"], torch.linspace(-0.5, 0.5, 8)[kept])


def test_a_layout_that_cannot_lose_experts_is_refused_before_any_work(make_moe, calib_file, cli):
    loaded = load_model(str(make_moe("mixtral")), device="cpu")
    split_experts(loaded.model)
    config = RunConfig(model="split", method="wanda", expert_sparsity=0.5, calib=calib_file, evals=[], device="cpu")
    with pytest.raises(UserError, match="keeps each expert as modules of its own"):
        pipeline.prune(loaded, config)
    code, _, err = cli("prune", make_moe("gpt_neox"), "--expert-sparsity", "0.5", "--calib", calib_file, *QUICK)
    assert code == 2 and "removes routed experts, and the 'gpt_neox' model has none." in err
    code, _, err = cli("prune", make_moe("mixtral"), "--expert-sparsity", "0.1", "--calib", calib_file, *QUICK)
    assert code == 2 and "--expert-sparsity 0.1 removes no expert" in err and "Traceback" not in err
    code, _, err = cli("prune", make_moe("mixtral"), "--sparsity", "0", *QUICK)
    assert code == 2 and "0 only with --expert-sparsity" in err


def test_the_cli_reports_the_removal(make_moe, calib_file, cli, tmp_path):
    code, out, err = cli("prune", make_moe("qwen3_moe"), "-m", "wanda", "--expert-sparsity", "0.25",
                         "--expert-score", "frequency", "--calib", calib_file, *QUICK, "--json")  # fmt: skip
    assert code == 0, err
    removed = json.loads(out)["experts_removed"]
    assert removed["kept"] == [6, 6] and removed["score"] == "frequency" and removed["counted_from"] == "memory"
    # The summary says so too: its title and a row of its own (it named "Wanda-16 at 0.5" alone).
    code, out, err = cli("prune", make_moe("qwen3_moe"), "-m", "wanda", "--expert-sparsity", "0.25",
                         "--expert-score", "frequency", "--calib", calib_file, *QUICK)  # fmt: skip
    assert code == 0, err
    assert out.split("\n")[0].strip() == "Wanda-16 at 0.5 + 25% of experts"
    assert "experts removed │ 25% of the routed experts (frequency)" in out
    # the parameters the removal took, not the mask's zeros beside them (results.parameters_removed holds both)
    text = " ".join(out.replace("│", " ").split())
    assert f"{removed['parameters_before'] - removed['parameters_after']:,} parameters removed with them" in text


def test_runs_show_prints_each_experts_score_with_the_removed_marked(make_moe, calib_file, cli, tmp_path):
    store = tmp_path / "runs.db"
    code, out, err = cli("prune", make_moe("mixtral", edit=_silence_expert_two), "-s", "0", "--expert-sparsity",
                         "0.25", "--calib", calib_file, *QUICK, "--store", store, "--json")  # fmt: skip
    assert code == 0, err
    run = out
    code, out, err = cli("runs", "show", json.loads(run)["run_id"], "--store", store)
    assert code == 0, err
    line = next(line for line in out.splitlines() if "layer 0 mlp.experts reap scores:" in line)
    assert line.split()[-2] == "0x"  # expert 2: output zero, score 0, removed; marked without colour
    assert "x: removed by --expert-sparsity" in out
    # it gathered no mask statistics (it said "statistics from routed tokens")
    assert "; no mask: the tokens scored the experts for REAP expert removal" in out
    assert "statistics from" not in out
    assert out.startswith(f"run {json.loads(run)['run_id']}  finished  REAP expert removal at 25% of experts  ")
    code, out, err = cli("runs", "--store", store)  # listed as "Wanda-16  0": nothing said experts went
    assert code == 0 and "  REAP expert removal  25% of experts  " in out.splitlines()[1], out


@pytest.mark.parametrize("family", ["mixtral", "gpt_oss"])
def test_the_plan_counts_the_checkpoint_the_run_saves(make_moe, calib_file, cli, tmp_path, family):
    source = make_moe(family)
    result, _ = _run(source, calib_file, tmp_path / "out")
    code, out, err = cli("plan", source, "--method", "wanda", "--expert-sparsity", "0.5", "--device", "cpu",
                         "--offload", "none", "--json")  # fmt: skip
    assert code == 0, err
    plan = json.loads(out)
    removed = result.experts_removed
    assert plan["saved_parameters"] == removed.parameters_after < plan["parameters"] == removed.parameters_before
    assert plan["saved_bytes"] == pytest.approx(removed.bytes_after, rel=0.01)  # float32, less the files' headers
    code, out, err = cli("plan", source, "--method", "wanda", "--expert-sparsity", "0.5", "--device", "cpu")
    assert code == 0 and "saved checkpoint" in out, err


@pytest.mark.asyncio
async def test_the_experts_tab_marks_the_removed_experts_without_colour_at_80x24(
    make_moe, calib_file, cli, tmp_path, monkeypatch
):
    """Issue 34: the Run screen's Experts tab of an --expert-sparsity run on a tiny Mixtral (expert 2
    silenced, so REAP removes it), under NO_COLOR at 80x24."""
    from runhelpers import pilot_wait_until
    from textual.geometry import Region

    from acetui.app import make_app
    from acetui_core.storage.store import Store

    store = tmp_path / "runs.db"
    code, out, err = cli("prune", make_moe("mixtral", edit=_silence_expert_two), "-s", "0", "--expert-sparsity",
                         "0.25", "--calib", calib_file, *QUICK, "--store", store, "--json")  # fmt: skip
    assert code == 0, err
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app(Store(store), attach=json.loads(out)["run_id"])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_wait_until(pilot, lambda: app.screen._run is not None, "the run")
        await pilot.press("x")
        await pilot.pause()
        drawn = app.screen.query_one("#experts-text")
        lines = [strip.text for strip in drawn.render_lines(Region(0, 0, *drawn.outer_size))]
    shown = " ".join(" ".join(lines).split())
    assert "(--expert-sparsity); x removed" in shown  # the mark, named
    assert "no mask: the tokens scored the experts for REAP expert removal" in shown
    assert "statistics from" not in shown
    # At 39 columns the grid of scores wraps, its columns out of line: the removed experts are named too.
    assert [line.strip() for line in lines if ": removed" in line] == [
        "layer 0 mlp.experts: removed 2",
        "layer 1 mlp.experts: removed 2",
    ]
