"""Models bigger than memory (``--offload disk``): the streamed run equals the in-memory one, its saved
checkpoint loads back, and every way it can go wrong is one sentence and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from runhelpers import cli, saved_tensors

from acetui_core.modeling.layouts import decoder_layers, prunable_linears
from acetui_core.pruning import pipeline
from acetui_core.run.config import RunConfig

TESTS = Path(__file__).resolve().parent


def _checkpoint(
    out: Path, tokenizer_dir: Path, *, layers=3, hidden=64, intermediate=128, tied=False, dtype=None, shard="150KB"
):
    """A random LLaMA checkpoint, sharded into several safetensors files with an index."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=tied,
    )
    model = AutoModelForCausalLM.from_config(config)
    if dtype is not None:
        model = model.to(dtype)
    model.save_pretrained(out, max_shard_size=shard)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def sharded(tmp_path_factory, tokenizer_dir) -> Path:
    return _checkpoint(tmp_path_factory.mktemp("sharded"), tokenizer_dir)


def _config(model, offload, save=None, **fields) -> RunConfig:
    settings = dict(method="ace", sparsity="0.5", nsamples=8, seqlen=32, evals=["wikitext2"], eval_seqlen=64)
    settings.update(fields)
    return RunConfig(model=str(model), offload=offload, save=save, eval_limit=6, device="cpu", **settings)


def _weights(folder) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).state_dict()


@pytest.mark.parametrize(("method", "sparsity"), [("ace", "0.5"), ("sparsegpt", "2:4")])
def test_streamed_run_equals_in_memory_run(sharded, tmp_path, method, sparsity):
    results = {}
    for offload in ("none", "disk"):
        config = _config(sharded, offload, save=str(tmp_path / offload), method=method, sparsity=sparsity)
        results[offload] = pipeline.run(config)
    whole, streamed = _weights(tmp_path / "none"), _weights(tmp_path / "disk")
    assert whole.keys() == streamed.keys()
    for name in whole:
        assert torch.equal(whole[name] == 0, streamed[name] == 0), name  # identical masks
        assert torch.equal(whole[name], streamed[name]), name
    assert results["disk"].ppl_wikitext2 == pytest.approx(results["none"].ppl_wikitext2, rel=1e-5)
    assert results["disk"].overall_sparsity == results["none"].overall_sparsity
    assert [r.sparsity for r in results["disk"].layers] == [r.sparsity for r in results["none"].layers]


def test_streamed_perplexity_equals_a_full_forward_pass(sharded):
    from acetui_core.modeling.data import wikitext2_test_ids
    from acetui_core.modeling.models import load_model
    from acetui_core.modeling.streaming import load_for_run
    from acetui_core.pruning.evaluate import perplexity, streamed_perplexity

    whole = load_model(str(sharded), device="cpu")
    streamed = load_for_run(str(sharded), device="cpu", dtype="auto", offload="disk")
    ids = wikitext2_test_ids(whole.tokenizer)
    expected = perplexity(whole.model, ids, 64, limit=40)
    got = streamed_perplexity(streamed, streamed.streamed, ids, 64, limit=40)
    assert got[1] == expected[1] and len(got[0].nll) == len(expected[0].nll) == 40
    assert got[0].nll == pytest.approx(expected[0].nll, rel=1e-5)
    # the layers went back to the meta device: nothing but embeddings, norm and head stayed in memory
    assert all(p.device.type == "meta" for layer in decoder_layers(streamed.model) for p in layer.parameters())


def test_a_head_stored_beside_tied_embeddings_is_kept_as_from_pretrained_keeps_it(tmp_path, tokenizer_dir):
    """A checkpoint of a tied model that stores its head anyway: the streamed model uses the stored head,
    as from_pretrained (``--offload none``) does, so both give the same numbers."""
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    from acetui_core.modeling.streaming import load_streamed

    folder = _checkpoint(tmp_path / "tied", tokenizer_dir, tied=True, shard="100GB")
    shard = folder / "model.safetensors"
    tensors = load_file(shard)
    tensors["lm_head.weight"] = torch.randn_like(tensors["model.embed_tokens.weight"])
    save_file(tensors, shard, metadata={"format": "pt"})

    streamed, _, _ = load_streamed(folder, torch.float32)
    whole = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    assert torch.equal(streamed.lm_head.weight, whole.lm_head.weight)
    assert torch.equal(streamed.model.embed_tokens.weight, whole.model.embed_tokens.weight)


def test_streamed_bf16_tied_checkpoint_saves_in_its_own_dtype(tmp_path, tokenizer_dir):
    """A bf16 checkpoint with tied embeddings (SmolLM's layout), pruned in float32 and written back in bf16:
    masking is exact in any dtype, so every row keeps exactly half its weights."""
    from transformers import AutoModelForCausalLM

    source = _checkpoint(tmp_path / "bf16", tokenizer_dir, tied=True, dtype=torch.bfloat16)
    result = pipeline.run(_config(source, "disk", save=str(tmp_path / "out"), evals=[]))
    assert result.saved_to == str((tmp_path / "out").resolve())
    # every tensor as the source keeps it: the layers were written in float32 (1.7x the size) under a config
    # saying bfloat16, which from_pretrained's cast hid
    saved = saved_tensors(tmp_path / "out")
    assert {name: t.dtype for name, t in saved.items()} == {name: torch.bfloat16 for name in saved_tensors(source)}
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert model.dtype == torch.bfloat16
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    for layer in decoder_layers(model):
        for module in prunable_linears(layer).values():
            zeros = (module.weight == 0).sum(dim=1)
            assert (zeros == module.weight.shape[1] // 2).all()
    assert not any(p.name.startswith(".out.partial") for p in tmp_path.iterdir())


def test_auto_streams_only_a_model_that_would_not_fit(sharded, monkeypatch):
    import psutil

    from acetui_core.modeling.shards import model_bytes
    from acetui_core.modeling.streaming import streaming_folder

    need = model_bytes(sharded, torch.float32)
    fake = type("Memory", (), {"available": need})
    monkeypatch.setattr(psutil, "virtual_memory", lambda: fake)
    assert streaming_folder(str(sharded), "auto", torch.float32) == sharded  # needs 100% > 70% of available
    fake.available = 2 * need
    assert streaming_folder(str(sharded), "auto", torch.float32) is None
    assert streaming_folder(str(sharded), "none", torch.float32) is None


def test_auto_streams_a_run_that_evaluates_nothing(sharded, smollm_gguf, monkeypatch, capsys, calib_file):
    """Streamed, a prune without evaluation writes nothing it would not and takes no more time (benchmarks.md:
    0.80x the reference's time at 0.62x its peak, against 0.82x and 0.99x in memory), so ``auto`` streams it
    however small the model; a run that evaluates, or a queue with one such run of the model, loads it whole."""
    from acetui_core.execution.modelcache import ModelCache
    from acetui_core.modeling import streaming
    from acetui_core.modeling.streaming import streaming_folder

    assert streaming_folder(str(sharded), "auto", torch.float32, evaluates=False) == sharded
    assert streaming_folder(str(sharded), "auto", torch.float32, evaluates=True) is None  # it fits
    assert streaming_folder(str(sharded), "none", torch.float32, evaluates=False) is None
    assert streaming_folder(str(smollm_gguf), "auto", torch.float32, evaluates=False) is None  # cannot stream

    streamed = []
    load_streamed = streaming.load_streamed
    monkeypatch.setattr(streaming, "load_streamed", lambda *a: streamed.append(a[0]) or load_streamed(*a))
    code, _, err = _prune(monkeypatch, capsys, sharded, "--calib", calib_file)
    assert code == 0, err
    assert streamed == [sharded]
    quiet, evaluating = _config(sharded, "auto", evals=[]), _config(sharded, "auto")
    assert ModelCache([quiet, evaluating]).get(quiet).streamed is None  # the next run evaluates: whole
    assert ModelCache([quiet, quiet]).get(quiet).streamed is not None


def _copy(source: Path, target: Path) -> Path:
    import shutil

    shutil.copytree(source, target)
    return target


def _prune(monkeypatch, capsys, model, *extra):
    return cli(monkeypatch, capsys, "prune", model, "--nsamples", "4", "--seqlen", "16", "--eval", "none", *extra)


def test_missing_shard_is_one_sentence(sharded, tmp_path, monkeypatch, capsys):
    broken = _copy(sharded, tmp_path / "broken")
    index = json.loads((broken / "model.safetensors.index.json").read_text())
    gone = sorted(set(index["weight_map"].values()))[1]
    (broken / gone).unlink()
    code, out, err = _prune(monkeypatch, capsys, broken, "--offload", "disk")
    assert code == 2 and out == ""
    assert (
        err
        == f"acetui: The checkpoint folder {broken} is incomplete: {gone}, named in model.safetensors.index.json, is missing.\n"
    )


def test_truncated_shard_is_one_sentence(sharded, tmp_path, monkeypatch, capsys):
    broken = _copy(sharded, tmp_path / "broken")
    shard = sorted(broken.glob("*.safetensors"))[0]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    code, _, err = _prune(monkeypatch, capsys, broken, "--offload", "disk")
    assert code == 2
    assert err.startswith(
        f"acetui: The checkpoint folder {broken} could not be loaded as a model: {shard.name} is damaged"
    )
    assert err.count("\n") == 1


def test_gguf_cannot_stream(smollm_gguf, monkeypatch, capsys):
    code, _, err = _prune(monkeypatch, capsys, smollm_gguf, "--offload", "disk")
    assert code == 2
    assert err.startswith(f"acetui: --offload disk cannot stream {smollm_gguf}: a GGUF file's weights are quantized")
    assert "--offload none" in err and err.count("\n") == 1


def test_unknown_offload_mode(sharded, monkeypatch, capsys):
    code, _, err = _prune(monkeypatch, capsys, sharded, "--offload", "ram")
    assert (code, err) == (2, "acetui: Unknown --offload 'ram'; choose one of: auto, none, disk.\n")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu(sharded, monkeypatch, capsys):
    code, _, err = _prune(monkeypatch, capsys, sharded, "--offload", "disk", "--device", "cuda")
    assert code == 2
    assert err == "acetui: --device cuda was asked for, but torch sees no CUDA GPU on this machine; use --device cpu.\n"


def test_disk_full_mid_write_leaves_no_checkpoint(sharded, tmp_path, monkeypatch, capsys):
    """The second shard hits a full disk: the run fails with one sentence, and nothing under --save (or
    beside it) looks like a checkpoint."""
    import errno

    import safetensors.torch

    real, calls = safetensors.torch.save_file, []

    def fill_up(tensors, filename, metadata=None):
        calls.append(filename)
        if len(calls) == 2:
            Path(filename).write_bytes(b"\0" * 100)  # what a write cut short leaves
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(tensors, filename, metadata)

    monkeypatch.setattr(safetensors.torch, "save_file", fill_up)
    save = tmp_path / "disk" / "pruned"
    code, out, err = _prune(monkeypatch, capsys, sharded, "--offload", "disk", "--save", save)
    assert code == 2 and out == ""
    assert err.splitlines()[-1] == (
        f"acetui: Saving the pruned model to {save} failed (No space left on device); no partial checkpoint was left."
    )
    assert list(save.parent.iterdir()) == []


@pytest.mark.parametrize("tied", [False, True], ids=["own-head", "tied-head"])
def test_plan_prints_the_figures(tied, tmp_path, tokenizer_dir, monkeypatch, capsys):
    sharded = _checkpoint(tmp_path / "sharded", tokenizer_dir, tied=tied)
    code, out, _ = cli(monkeypatch, capsys, "plan", sharded, "--seqlen", "16", "--offload", "disk", "--json")
    assert code == 0
    plan = json.loads(out)
    assert plan["streaming"] is True and plan["layers"] == 3 and plan["device"] == "cpu"
    assert plan["calibration_bytes"] == 128 * 16 * 64 * 4
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(sharded)
    assert plan["parameters"] == sum(p.numel() for p in model.parameters())
    assert plan["checkpoint_bytes"] == sum(f.stat().st_size for f in sharded.glob("*.safetensors"))


def test_plan_names_the_calibration_windows_length_in_tokens(sharded, monkeypatch, capsys):
    """--seqlen full is the model's context (256 here), said as a number; a method without calibration
    says it reads none."""
    code, out, _ = cli(monkeypatch, capsys, "plan", sharded, "--seqlen", "full", "--nsamples", "4", "--eval", "none")
    assert code == 0 and "(4 x 256 tokens)" in out
    code, out, _ = cli(monkeypatch, capsys, "plan", sharded, "--method", "magnitude", "--eval", "none")
    assert code == 0 and "none: the method reads no calibration data" in out


def test_a_plan_with_zero_shot_says_its_peak_is_a_lower_bound(sharded, monkeypatch, capsys):
    """``plan --eval zeroshot`` planned the peak of a run without evaluation (1.20 GiB for a run that peaked
    at 1.73 GiB on the bundled model): lm-eval's batches are not counted, and the plan now says so."""
    code, out, _ = cli(monkeypatch, capsys, "plan", sharded, "--eval", "zeroshot")
    text = " ".join(out.replace("│", " ").split())
    assert code == 0 and "zero-shot not counted" in text and "peak CPU memory at least " in text
    code, out, _ = cli(monkeypatch, capsys, "plan", sharded, "--eval", "wikitext2")
    assert "not counted" not in out and "at least" not in out


def test_plan_counts_a_streamed_evaluations_hidden_states(sharded, monkeypatch, capsys):
    """A streamed evaluation holds every evaluated window's hidden states (64 wide here): the WikiText-2
    test split's typical token count, or what --eval-limit leaves of it; a model in memory holds none."""
    from acetui_core.pruning.plan import WIKITEXT2_TEST_TOKENS

    def planned(*args):
        code, out, _ = cli(monkeypatch, capsys, "plan", sharded, "--eval-seqlen", "64", *args, "--json")
        assert code == 0
        return json.loads(out)["evaluation_hidden_bytes"]

    assert planned("--offload", "disk") == WIKITEXT2_TEST_TOKENS * 64 * 4
    assert planned("--offload", "disk", "--eval-limit", "10") == 10 * 64 * 64 * 4
    assert planned("--offload", "none") == 0


def test_a_gpu_plan_without_evaluation_never_places_the_whole_model(tmp_path, tokenizer_dir, monkeypatch, capsys):
    """On a GPU an in-memory model goes to the card whole only to be evaluated: with --eval none the peak is
    the layer loop's, the same whether the layers wait in CPU memory or on disk (the LLaMA-2-70B shape was
    planned at 64 GiB in memory, the whole model capped at 80% of the card, for layers that take a few).
    Four layers as large as its tied embeddings, so that the whole model outweighs them."""
    model = _checkpoint(tmp_path, tokenizer_dir, layers=4, hidden=256, intermediate=1024, tied=True, shard="20MB")

    def planned(*args):
        code, out, err = cli(monkeypatch, capsys, "plan", model, "--device", "cuda", *args, "--json")
        assert code == 0, err
        return json.loads(out)["peak_gpu_bytes"]

    in_memory = planned("--offload", "none", "--eval", "none")
    assert in_memory == planned("--offload", "disk", "--eval", "none")
    assert in_memory < planned("--offload", "none", "--eval-seqlen", "64")


def test_a_gpu_plan_counts_a_next_layer_only_where_there_is_one(tmp_path, monkeypatch, capsys):
    """The GPU holds the layer being pruned and the next one, copied over beside it: a model of one layer
    has no next (bench/scale.py measures one layer of the LLaMA-2-70B shape against its plan). Planned
    from config.json alone, as `acetui plan` can."""
    from transformers import LlamaConfig

    def planned(layers: int) -> int:
        folder = tmp_path / f"layers{layers}"
        shape = dict(hidden_size=256, intermediate_size=65536, num_attention_heads=4, vocab_size=1024)
        LlamaConfig(num_hidden_layers=layers, tie_word_embeddings=True, **shape).save_pretrained(folder)
        args = ("plan", folder, "--device", "cuda", "--method", "magnitude", "--eval", "none", "--json")
        code, out, err = cli(monkeypatch, capsys, *args)
        assert code == 0, err
        return json.loads(out)["peak_gpu_bytes"]

    layer = (4 * 256 * 256 + 3 * 256 * 65536 + 2 * 256) * 2  # bf16, with its two norms
    assert planned(2) - planned(1) == layer
    assert planned(3) == planned(2)


def test_planning_in_threads_leaves_every_other_model_real(tmp_path, tokenizer_dir):
    """The New run form plans in threads while the app (or a test) builds models: no model built meanwhile
    or afterwards may end up on the meta device (accelerate's init_empty_weights patches nn.Module for the
    whole process, and overlapping uses can leave it patched)."""
    import threading

    from transformers import AutoModelForCausalLM, LlamaConfig

    from acetui_core.pruning.plan import plan_run

    folder = _checkpoint(tmp_path / "plan", tokenizer_dir)
    config = RunConfig(model=str(folder), method="wanda", sparsity="0.5", evals=[])
    threads = [threading.Thread(target=plan_run, args=(config,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    small = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
    built = [AutoModelForCausalLM.from_config(small) for _ in range(20)]
    for thread in threads:
        thread.join()
    built.append(AutoModelForCausalLM.from_config(small))
    assert not any(p.is_meta for model in built for p in model.parameters())


def _measured_run(model: Path, out: Path, settings: dict | None = None) -> dict:
    """Prune ``model`` in a fresh process (``stream_memory.py``) and return what it measured."""
    args = [sys.executable, str(TESTS / "stream_memory.py"), str(model), str(out)]
    done = subprocess.run(args + [json.dumps(settings or {})], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a memory measurement in a fresh process: a minute of the edit loop's time
def test_evaluation_never_holds_a_batchs_whole_logits_and_the_plan_agrees(tmp_path, tokenizer_dir):
    """A tiny model with a 49k vocabulary evaluated on 4096-token batches, whose whole logits would be
    805 MB (they set the peak until the head made them a few positions at a time): the run's peak over its
    baseline (the chunks' logits and log-probabilities, 268 MB, and what tokenizing the test split keeps,
    about 90 MB) stays under them (measured 438 and 523 MB), and the plan says the peak within 20%."""
    from transformers import AutoTokenizer

    model = _checkpoint(tmp_path / "tiny", tokenizer_dir)
    settings = {"offload": "none", "evals": ["wikitext2"], "eval_seqlen": 64, "eval_limit": 64}
    report = _measured_run(model, tmp_path / "out", settings)
    logits = 4096 * len(AutoTokenizer.from_pretrained(tokenizer_dir)) * 4
    assert report["peak_rss"] - report["baseline_rss"] < logits, report
    assert abs(report["planned_cpu"] - report["peak_rss"]) < 0.2 * report["peak_rss"], report


@pytest.fixture(scope="module")
def wide_mlp(tmp_path_factory, tokenizer_dir) -> Path:
    """One decoder layer whose MLP linears (65536 x 512, 33.5M weights each) dwarf the rest: their scoring
    scratch, not the model or the calibration, is what a plan of this model can get wrong."""
    folder = tmp_path_factory.mktemp("wide")
    return _checkpoint(folder, tokenizer_dir, layers=1, hidden=512, intermediate=65536, tied=True, shard="1GB")


@pytest.mark.slow  # a memory measurement in a fresh process: half a minute each
@pytest.mark.parametrize("method", ["wanda", "ace"])
def test_the_plan_counts_the_scoring_of_a_large_linear_as_it_is_done(wide_mlp, tmp_path, method):
    """Wanda's mask is chosen a slice of rows at a time (1 byte per weight and a slice's scratch), CosP+VarP's
    scores are made whole and each row chosen alone (their own 4 bytes per weight and 6 more): the plan of
    either run is within 15% of its measured peak. It counted 24 bytes per weight for both (0.65-0.76 of
    the plan measured)."""
    report = _measured_run(
        wide_mlp, tmp_path / "out", {"method": method, "offload": "none", "nsamples": 8, "save": None}
    )
    assert 0.85 * report["planned_cpu"] <= report["peak_rss"] <= 1.15 * report["planned_cpu"], report


@pytest.mark.slow  # a memory measurement in a fresh process: a minute of the edit loop's time
def test_the_layer_loop_holds_one_copy_of_the_calibration_activations(tmp_path, tokenizer_dir):
    """512 windows of 256 tokens through a small model: the activations (256 MiB), not the weights, are
    what the loop holds. Each layer's outputs are written over its inputs, so the peak over the loaded
    weights is one copy of them (plus a batch, the first forward pass's one-off cost and the allocator's
    slack: 140-225 MB here), not the two that keeping inputs and outputs would take."""
    model = _checkpoint(tmp_path / "narrow", tokenizer_dir, layers=2, hidden=512, tied=True, shard="50MB")
    settings = {"offload": "none", "nsamples": 512, "seqlen": 256, "save": None}
    report = _measured_run(model, tmp_path / "out", settings)
    activations = report["planned_calibration"]
    assert activations == 512 * 256 * 512 * 4
    held = report["peak_rss"] - report["baseline_rss"] - report["weights"]
    # Less than a second copy. Measured 1.52-1.84 (2026-11-26, 13 runs: the slack moves by some 50-64 MB from
    # run to run, with MALLOC_ARENA_MAX=1 too); a bound of 1.75 failed CI once. Two copies: over 2 (3.4 before).
    assert activations < held < 2 * activations, report


@pytest.mark.slow
def test_a_2gb_checkpoint_streams_in_bounded_memory(tmp_path):
    """A 2 GB bf16 checkpoint (56 layers, written one layer at a time by bench/scale.py) pruned with
    --offload disk in a fresh process: peak RSS over the process's baseline stays under 40% of the
    checkpoint; the peak lies between 0.9x and 1.35x of what ``acetui plan`` predicted; the saved checkpoint
    loads back with exactly half of every row pruned."""
    sys.path.insert(0, str(TESTS.parent / "bench"))
    from scale import write_checkpoint

    shape = dict(
        hidden_size=1024,
        intermediate_size=4096,
        num_attention_heads=8,
        num_key_value_heads=8,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    )
    size = write_checkpoint(tmp_path / "big", shape, layers=56)
    assert size > 1.9e9
    report = _measured_run(tmp_path / "big", tmp_path / "out")
    over = report["peak_rss"] - report["baseline_rss"]
    assert over < 0.4 * size, (over / 2**20, size / 2**20)
    # Since freed pages go back to the OS once per layer (malloc_trim) rather than at once (mmap), the peak
    # moves from run to run with what glibc still holds at that moment: 898 to 1130 MB in 22 runs of the
    # same process on 2026-11-27 against a plan of 856 MB (within 20% in 13 of them).
    assert 0.9 * report["planned_cpu"] <= report["peak_rss"] <= 1.35 * report["planned_cpu"]
    assert report["row_sparsities"] == [0.5]
