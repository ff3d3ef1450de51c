"""The CUDA path (``--device cuda``, bf16): one decoder layer at a time on the GPU, prefetched on a side
stream, statistics summed in float64 by a fused Triton kernel. Skipped without a GPU; run wherever one is present."""

from __future__ import annotations

import pytest
import torch

from acetui_core.modeling.layouts import decoder_layers, prunable_linears
from acetui_core.modeling.models import load_model
from acetui_core.modeling.streaming import load_for_run
from acetui_core.pruning import pipeline, stats
from acetui_core.pruning.stats import ColumnStats
from acetui_core.run.config import RunConfig
from acetui_core.run.events import LayerStarted
from acetui_core.scores.masks import layer_mask

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _masks(loaded, config) -> list[torch.Tensor]:
    pipeline.prune(loaded, config)
    return [
        m.weight.detach().cpu() == 0 for layer in decoder_layers(loaded.model) for m in prunable_linears(layer).values()
    ]


def _agreement(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    same = sum((x == y).sum().item() for x, y in zip(a, b, strict=True))
    return same / sum(x.numel() for x in a)


@pytest.mark.parametrize("method", ["wanda", "ace", "sparsegpt"])
def test_cuda_masks_equal_cpu_masks_within_bf16(make_tiny_model, method):
    model = str(make_tiny_model("llama"))
    config = RunConfig(model=model, method=method, sparsity="0.5", nsamples=16, seqlen=32, evals=[])
    cpu = _masks(load_model(model, device="cpu", dtype="float32"), config)
    gpu_loaded = load_model(model, device="cuda", dtype="bfloat16")
    gpu = _masks(gpu_loaded, config)
    # bf16 weights and activations move scores near each row's cut-off: a few weights change sides
    assert _agreement(cpu, gpu) > (0.97 if method != "sparsegpt" else 0.9)
    assert all(m.float().mean().item() == pytest.approx(0.5, abs=0.01) for m in gpu)
    # one decoder layer at a time on the GPU, and the embeddings, final norm and head only while layer 0's
    # inputs are captured: after the run the whole model is back in CPU memory
    assert all(p.device.type == "cpu" for p in gpu_loaded.model.parameters())


def test_streamed_cuda_run_equals_resident_cuda_run(make_tiny_model, tmp_path):
    model = str(make_tiny_model("llama"))
    results = {}
    for offload in ("none", "disk"):
        config = RunConfig(
            model=model,
            method="ace",
            sparsity="0.5",
            nsamples=16,
            seqlen=32,
            evals=["wikitext2"],
            eval_limit=4,
            eval_seqlen=64,
            device="cuda",
            dtype="float32",
            offload=offload,
            save=str(tmp_path / offload),
        )
        results[offload] = pipeline.run(config)
    assert results["disk"].ppl_wikitext2 == pytest.approx(results["none"].ppl_wikitext2, rel=1e-4)
    assert results["disk"].peak_gpu_mb is not None
    from transformers import AutoModelForCausalLM

    a = AutoModelForCausalLM.from_pretrained(tmp_path / "none").state_dict()
    b = AutoModelForCausalLM.from_pretrained(tmp_path / "disk").state_dict()
    assert all(torch.equal(a[name] == 0, b[name] == 0) for name in a)


def test_streamed_model_keeps_only_embeddings_and_head_resident(make_tiny_model):
    loaded = load_for_run(str(make_tiny_model("llama")), device="cuda", dtype="auto", offload="disk")
    assert loaded.dtype == torch.bfloat16
    assert all(p.device.type == "meta" for layer in decoder_layers(loaded.model) for p in layer.parameters())


def test_streamed_cuda_prune_keeps_embeddings_and_head_off_the_gpu_while_layers_are_pruned(make_tiny_model):
    # the LLaMA-2-70B shape's embeddings and head are 1.5 GiB, as much as the layer being pruned
    model = str(make_tiny_model("llama"))
    loaded = load_for_run(model, device="cuda", dtype="auto", offload="disk")
    config = RunConfig(model=model, method="wanda", sparsity="0.5", nsamples=16, seqlen=32, evals=[], device="cuda")
    places = []

    def at_each_layer(event):
        if isinstance(event, LayerStarted):  # the layers' parameters are replaced as they are read in
            inside = {id(p) for layer in decoder_layers(loaded.model) for p in layer.parameters()}
            places.append({p.device.type for p in loaded.model.parameters() if id(p) not in inside})

    pipeline.prune(loaded, config, at_each_layer)
    assert places == [{"cpu"}, {"cpu"}]  # two layers, and nothing but them on the GPU while each is pruned


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_fused_statistics_add_the_eager_float64_values(dtype):
    """A CUDA run's statistics come from the Triton kernel here, and they are the eager float64 sums up to
    the order of the additions: the float32 statistics a score reads are the same."""
    assert stats._fused_moments() is not None, "the fused statistics kernel could not run on this GPU"
    x = (torch.randn(3, 1400 + 77, 11008 + 13, device="cuda") * 4).to(dtype)  # counts off the kernel's blocks
    fused, eager = ColumnStats(x.shape[-1], x.device), ColumnStats(x.shape[-1], x.device)
    fused.add(x)
    eager.add(x, ColumnStats.eager_sums(x.reshape(-1, x.shape[-1])))
    for a, b in [(fused.s, eager.s), (fused.sq, eager.sq), (fused.q, eager.q), (fused.x2_max, eager.x2_max)]:
        assert torch.allclose(a, b, rtol=1e-12, atol=0)
    assert fused.tokens == eager.tokens == 3 * (1400 + 77)
    assert torch.equal(fused.norm, eager.norm) and torch.equal(fused.e2, eager.e2) and torch.equal(fused.e4, eager.e4)


def test_per_layer_mask_on_the_gpu_is_the_cpu_mask():
    """RIA's and magnitude's one cut-off per matrix, bisected on the GPU, prunes what kthvalue's prunes."""
    scores = torch.rand(1536, 4096, generator=torch.Generator().manual_seed(0))
    scores[::7] = scores[::7].round(decimals=2)  # ties at the cut-off
    cpu_mask, cpu_cut = layer_mask(scores, 0.5)
    gpu_mask, gpu_cut = layer_mask(scores.cuda(), 0.5)
    assert gpu_cut == cpu_cut and torch.equal(gpu_mask.cpu(), cpu_mask)
