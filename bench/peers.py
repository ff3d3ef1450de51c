"""acetui's Wanda against the tools a user would pick instead, on the same calibration windows: prune
seconds and peak RSS of each, every run in its own subprocess, runs interleaved.

    ACETUI_DATA_DIR=../shared/data .venv/bin/python bench/peers.py [--rounds 2] [--peer-python /path/to/python]

Tools: ``acetui`` (Wanda 50%, this checkout, the whole model in memory: ``--offload none``, what ``auto`` does
for a run that evaluates), ``acetui-streamed`` (the same with ``--offload disk``: each decoder layer read from
the checkpoint only while it is pruned; what ``auto`` does for a run that evaluates nothing, as these),
``wanda-ref`` (the algorithm of Wanda's reference code,
locuslab/wanda lib/prune.py ``prune_wanda``, re-expressed here for today's transformers: one window per
forward pass, running-mean ``scaler_row`` hooks, a full stable sort per row, a second pass for the next
layer's inputs) and ``llm-compressor`` (``oneshot`` with ``WandaPruningModifier``, run by
``--peer-python``, an interpreter where ``llmcompressor`` is installed; skipped with a note when none is).
All load the same dense float32 checkpoint (written once from the GGUF into ``--checkpoint``) on the CPU
with one torch thread; loading is not timed. Peak RSS is the child's own high-water mark (``VmHWM``), so it
includes loading: the column "RSS loaded" says how much of it that is. Each tool's masks are hashed (every
decoder linear's zeros, by layer and name; acetui's as each layer leaves, inside its timed run) and
compared with acetui's default path.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

NSAMPLES, SEQLEN, SPARSITY, SEED = 128, 128, 0.5, 0
TOOLS = ("acetui", "acetui-streamed", "wanda-ref", "llm-compressor")


def rss_now_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def load_dense(checkpoint: str):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32, low_cpu_mem_usage=True)
    model.config.use_cache = False
    return model.eval()


def linear_digests(index: int, layer) -> dict[str, str]:
    """The SHA-256 of each linear's zeros in decoder layer ``index``, by ``index.name``."""
    from torch import nn

    return {
        f"{index:04d}.{name}": hashlib.sha256((module.weight.data == 0).numpy().tobytes()).hexdigest()
        for name, module in layer.named_modules()
        if isinstance(module, nn.Linear)
    }


def masks_digest(digests: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{k}:{v}" for k, v in sorted(digests.items())).encode()).hexdigest()[:16]


def prune_acetui(checkpoint: str, windows, offload: str = "none") -> float:
    from acetui_core.modeling.data import calibration_windows, tokenized_calibration
    from acetui_core.modeling.streaming import load_for_run
    from acetui_core.pruning import layerloop
    from acetui_core.run.config import RunConfig

    loaded = load_for_run(checkpoint, device="cpu", dtype="float32", offload=offload)
    config = RunConfig(
        model=checkpoint, method="wanda", sparsity=str(SPARSITY), nsamples=NSAMPLES, seqlen=SEQLEN, offload=offload
    )
    ids, _ = tokenized_calibration(loaded.tokenizer, config.calib)
    if not (calibration_windows(ids, NSAMPLES, SEQLEN, SEED) == windows).all():
        raise SystemExit("acetui would draw other windows than the peers get")
    report("loaded", rss_now_mb())
    digests: dict[str, str] = {}
    seconds = layerloop.prune(loaded, config, release=lambda i, layer: digests.update(linear_digests(i, layer)))
    report("masks", masks_digest(digests))
    return seconds.prune_seconds


def running_norm(scaler: dict, seen: dict, name: str):
    """Wanda's ``WrappedGPT.add_batch``: a running mean over windows of ``||x_j||^2`` per input column."""
    import torch

    def hook(module, args, output):
        x = args[0].reshape(-1, args[0].shape[-1]).t().float()
        scaler[name] *= seen[name] / (seen[name] + 1)
        seen[name] += 1
        scaler[name] += torch.norm(x, p=2, dim=1) ** 2 / seen[name]

    return hook


def prune_wanda_reference(checkpoint: str, windows) -> float:
    """Wanda's ``prune_wanda`` (unstructured, no variant), step for step, after loading the model and its
    tokenizer as Wanda's ``main.py`` does (the windows are handed over, not drawn again)."""
    import torch
    from torch import nn
    from transformers import AutoTokenizer

    model = load_dense(checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)  # noqa: F841 (held, as in Wanda's run)
    report("loaded", rss_now_mb())
    start = time.perf_counter()
    layers = model.model.layers
    inps = torch.zeros((NSAMPLES, SEQLEN, model.config.hidden_size))
    cache: dict = {"i": 0}

    class Caught(Exception):
        pass

    def catch(module, args, kwargs):
        inps[cache["i"]] = args[0] if args else kwargs["hidden_states"]
        cache["i"] += 1
        cache["kwargs"] = {k: v for k, v in kwargs.items() if k not in ("hidden_states", "past_key_values")}
        raise Caught

    hook = layers[0].register_forward_pre_hook(catch, with_kwargs=True)
    with torch.no_grad():
        for window in windows:
            try:
                model(window[None])
            except Caught:
                pass
    hook.remove()
    outs, kwargs = torch.zeros_like(inps), cache["kwargs"]
    for layer in layers:
        linears = {n: m for n, m in layer.named_modules() if isinstance(m, nn.Linear)}
        scaler = {n: torch.zeros(m.weight.shape[1]) for n, m in linears.items()}
        seen = dict.fromkeys(linears, 0)

        handles = [m.register_forward_hook(running_norm(scaler, seen, n)) for n, m in linears.items()]
        with torch.no_grad():
            for j in range(NSAMPLES):
                outs[j] = layer(inps[j].unsqueeze(0), **kwargs)[0]
        for h in handles:
            h.remove()
        for name, module in linears.items():
            metric = module.weight.data.abs() * torch.sqrt(scaler[name].reshape(1, -1))
            mask = torch.zeros_like(metric, dtype=torch.bool)
            order = torch.sort(metric, dim=-1, stable=True)[1]
            mask.scatter_(1, order[:, : int(metric.shape[1] * SPARSITY)], True)
            module.weight.data[mask] = 0
        with torch.no_grad():
            for j in range(NSAMPLES):
                outs[j] = layer(inps[j].unsqueeze(0), **kwargs)[0]
        inps, outs = outs, inps
    seconds = time.perf_counter() - start
    digests: dict[str, str] = {}
    for index, layer in enumerate(layers):
        digests.update(linear_digests(index, layer))
    report("masks", masks_digest(digests))
    return seconds


def prune_llm_compressor(checkpoint: str, windows) -> float:
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.pruning import WandaPruningModifier

    model = load_dense(checkpoint)
    dataset = Dataset.from_dict({"input_ids": windows.tolist(), "attention_mask": [[1] * SEQLEN] * NSAMPLES})
    recipe = WandaPruningModifier(sparsity=SPARSITY, mask_structure="0:0", targets=["Linear"], ignore=["lm_head"])
    report("loaded", rss_now_mb())
    start = time.perf_counter()
    oneshot(
        model=model,
        dataset=dataset,
        recipe=recipe,
        num_calibration_samples=NSAMPLES,
        max_seq_length=SEQLEN,
        shuffle_calibration_samples=False,
    )
    return time.perf_counter() - start


def report(key: str, value) -> None:
    print(f"@@ {json.dumps({key: value})}", flush=True)


def child(tool: str, checkpoint: str, windows_file: str) -> None:
    import torch

    torch.set_num_threads(1)
    windows = torch.load(windows_file)
    prune = {
        "acetui": prune_acetui,
        "acetui-streamed": lambda checkpoint, windows: prune_acetui(checkpoint, windows, offload="disk"),
        "wanda-ref": prune_wanda_reference,
        "llm-compressor": prune_llm_compressor,
    }
    report("seconds", prune[tool](checkpoint, windows))
    # VmHWM, not ru_maxrss: the latter keeps the forking parent's high-water mark across exec. Read here
    # rather than through acetui_core, which the peer's interpreter may not have.
    with open("/proc/self/status") as status:
        report("peak_mb", next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024)


def run_child(python: str, tool: str, checkpoint: str, windows_file: str) -> dict:
    """One pruning run in a fresh process, with one torch thread."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    args = [python, __file__, "--child", tool, "--checkpoint", checkpoint, "--windows", windows_file]
    done = subprocess.run(args, capture_output=True, text=True, env=env)
    result = {}
    for line in done.stdout.splitlines():
        if line.startswith("@@ "):
            result.update(json.loads(line[3:]))
    if done.returncode != 0 or "seconds" not in result:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return {"error": tail[0][:200]}
    return result


def prepare(checkpoint: Path) -> Path:
    """The dense float32 checkpoint (from the bundled GGUF, once) and the calibration windows every tool gets."""
    import torch

    from acetui_core.basics.paths import default_model
    from acetui_core.modeling.checkpoint import folder_identity, save_checkpoint
    from acetui_core.modeling.data import calibration_windows, tokenized_calibration
    from acetui_core.modeling.models import load_model

    if not (checkpoint / "config.json").is_file():
        loaded = load_model(default_model(), device="cpu", dtype="float32")
        save_checkpoint(loaded.model, loaded.tokenizer, str(checkpoint), True, folder_identity(str(checkpoint)))
        del loaded
    from transformers import AutoTokenizer

    ids, _ = tokenized_calibration(AutoTokenizer.from_pretrained(checkpoint), "c4")
    windows_file = checkpoint.parent / f"c4-windows-{NSAMPLES}x{SEQLEN}-seed{SEED}.pt"
    torch.save(calibration_windows(ids, NSAMPLES, SEQLEN, SEED), windows_file)
    return windows_file


def table(results: dict[str, list[dict]], notes: list[str]) -> str:
    rows = {tool: runs for tool, runs in results.items() if runs and all("seconds" in r for r in runs)}
    median = {
        tool: {k: statistics.median(r[k] for r in runs) for k in ("seconds", "peak_mb", "loaded")}
        for tool, runs in rows.items()
    }
    reference = median.get("wanda-ref")
    ours = {r.get("masks") for r in rows.get("acetui", [])}
    lines = [
        "| tool | prune s | peak RSS MB | RSS loaded MB | time / wanda-ref | peak RSS / wanda-ref | masks as acetui's |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for tool, m in median.items():
        time_ratio = f"{m['seconds'] / reference['seconds']:.2f}" if reference else "-"
        rss_ratio = f"{m['peak_mb'] / reference['peak_mb']:.2f}" if reference else "-"
        masks = {r.get("masks") for r in rows[tool]}
        same = "-" if tool == "acetui" or not ours else ("same" if masks == ours and len(ours) == 1 else "differ")
        lines.append(
            f"| {tool} | {m['seconds']:.1f} | {m['peak_mb']:.0f} | {m['loaded']:.0f} | {time_ratio} | {rss_ratio} "
            f"| {same} |"
        )
    for tool in ("acetui", "acetui-streamed"):
        if tool in median and reference:
            m = median[tool]
            time_met = "met" if m["seconds"] <= 0.7 * reference["seconds"] else "not met"
            rss_met = "met" if m["peak_mb"] <= 0.8 * reference["peak_mb"] else "not met"
            notes.append(
                f"{tool}: goal, prune time at most 0.7x wanda-ref's: {time_met} ({m['seconds'] / reference['seconds']:.2f}x); "
                f"peak RSS at most 0.8x: {rss_met} ({m['peak_mb'] / reference['peak_mb']:.2f}x)."
            )
    for tool, runs in results.items():
        failed = [r["error"] for r in runs if "error" in r]
        if failed:
            notes.append(f"{tool} failed: {failed[0]}")
    return "\n".join(lines + [f"\n{note}" for note in notes])


def has_module(python: str, module: str) -> bool:
    return subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", default="/tmp/acetui-bench/smollm2-135m-f32")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds; the table shows medians")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--peer-python", default=sys.executable, help="the interpreter that runs llm-compressor")
    parser.add_argument("--child", choices=TOOLS, help=argparse.SUPPRESS)
    parser.add_argument("--windows", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.checkpoint, args.windows)
    checkpoint = Path(args.checkpoint)
    windows_file = prepare(checkpoint)
    tools, notes = [t for t in args.tools.split(",") if t], []
    python = {tool: sys.executable for tool in tools} | {"llm-compressor": args.peer_python}
    if "llm-compressor" in tools and not has_module(args.peer_python, "llmcompressor"):
        tools.remove("llm-compressor")
        notes.append(f"llm-compressor skipped: {args.peer_python} cannot import llmcompressor (pass --peer-python).")
    results: dict[str, list[dict]] = {tool: [] for tool in tools}
    for round_ in range(args.rounds):  # interleaved, each round starting one tool later, so load drifts evenly
        order = tools[round_ % len(tools) :] + tools[: round_ % len(tools)]
        for tool in order:
            result = run_child(python[tool], tool, str(checkpoint), str(windows_file))
            results[tool].append(result)
            print(f"round {round_ + 1} {tool}: {result}", file=sys.stderr, flush=True)
    print(
        f"Wanda {SPARSITY:.0%} on {checkpoint.name} (dense float32), {NSAMPLES} C4 windows x {SEQLEN} tokens, "
        f"seed {SEED}, CPU, 1 torch thread, median of {args.rounds} interleaved round(s).\n"
    )
    print(table(results, notes))


if __name__ == "__main__":
    main()
