"""Reproduce the layout of the paper's Tables 2-3 (WikiText-2 perplexity | pruning seconds) for one model
on this machine, plus the speed floor: two plain forward passes of the same calibration tokens through
the decoder stack.

    ACETUI_DATA_DIR=../shared/data .venv/bin/python bench/tables.py [MODEL] [--full-length 128] [--eval-limit 8]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from acetui_core.basics.paths import default_model
from acetui_core.basics.resources import peak_rss_mb
from acetui_core.modeling import placement
from acetui_core.modeling.data import calibration_windows, tokenized_calibration
from acetui_core.modeling.layouts import decoder_layers
from acetui_core.modeling.models import load_model
from acetui_core.pruning import evaluate, layerloop, pipeline
from acetui_core.run.config import RunConfig

# (row label, method, calibration length: "16" or "FL")
ROWS = [
    ("magnitude", "magnitude", "16"),
    ("wanda-FL", "wanda", "FL"),
    ("wanda-16", "wanda", "16"),
    ("ria-16", "ria", "16"),
    ("sparsegpt-FL", "sparsegpt", "FL"),
    ("cosp-FL", "cosp", "FL"),
    ("varp-16", "varp", "16"),
    ("ace-16", "ace", "16"),
]
COLUMNS = ["0.5", "4:8", "2:4"]


def forward_floor(loaded, seqlen: int, nsamples: int) -> float:
    """Seconds for two plain passes of the calibration windows through every decoder layer (no hooks,
    no scoring): the least any sequential layer-wise method must spend."""
    windows = calibration_windows(tokenized_calibration(loaded.tokenizer, "c4")[0], nsamples, seqlen, 0)
    batch = max(1, layerloop.CALIB_TOKENS_PER_BATCH // seqlen)
    start = time.perf_counter()
    inputs = placement.capture_layer0_inputs(loaded, windows, batch, loaded.device)
    with torch.no_grad():
        for layer in decoder_layers(loaded.model):
            for _ in range(2):
                outputs = [placement.layer_forward(layer, h, kw, loaded.device) for h, kw in inputs]
            inputs = [(o, kw) for o, (_, kw) in zip(outputs, inputs, strict=False)]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", default=default_model())
    parser.add_argument("--full-length", type=int, default=128, help="the 'FL' calibration length used here")
    parser.add_argument("--nsamples", type=int, default=128)
    parser.add_argument("--eval-seqlen", type=int, default=512)
    parser.add_argument("--eval-limit", type=int, default=8)
    parser.add_argument("--rows", default=",".join(r[0] for r in ROWS))
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    loaded = load_model(args.model, device="auto")
    loaded.snapshot()
    print(
        f"model {args.model}\ncalibration: {args.nsamples} C4 windows of 16 or FL={args.full_length} tokens, seed 0; "
        f"WikiText-2: first {args.eval_limit} windows of {args.eval_seqlen} tokens; device {loaded.device}, "
        f"{torch.get_num_threads()} threads\n",
        flush=True,
    )
    evaluation = dict(eval_seqlen=args.eval_seqlen, eval_limit=args.eval_limit)
    dense = evaluate.evaluate(loaded, RunConfig(model=args.model, method="magnitude", sparsity="0.5", **evaluation))
    print(f"| method | {' | '.join(c if ':' in c else f'{float(c):.0%}' for c in COLUMNS)} |")
    print(f"|---|{'---|' * len(COLUMNS)}")
    dense_cell = f"{dense.ppl_wikitext2:.2f}"
    print(f"| dense | {' | '.join(dense_cell for _ in COLUMNS)} |", flush=True)
    seconds = {}
    for label, method, length in ROWS:
        if label not in args.rows.split(","):
            continue
        cells = []
        for sparsity in COLUMNS:
            loaded.reset()
            config = RunConfig(
                model=args.model,
                method=method,
                sparsity=sparsity,
                nsamples=args.nsamples,
                seqlen=args.full_length if length == "FL" else 16,
                **evaluation,
            )
            result = pipeline.run(config, loaded=loaded)
            seconds[(label, sparsity)] = result.prune_seconds
            cells.append(f"{result.ppl_wikitext2:.2f} \\| {result.prune_seconds:.1f}")
        print(f"| {label} | {' | '.join(cells)} |", flush=True)

    floor = forward_floor(loaded, 16, args.nsamples)
    print(
        f"\nfloor: two plain forward passes of {args.nsamples}x16 calibration tokens through the decoder stack: {floor:.1f} s"
    )
    for sparsity in COLUMNS:
        if ("ace-16", sparsity) in seconds:
            print(
                f"ace-16 {sparsity}: {seconds[('ace-16', sparsity)]:.1f} s = {seconds[('ace-16', sparsity)] / floor:.2f} x floor (target <= 1.3)"
            )
    print(f"peak RSS {peak_rss_mb():.0f} MiB", file=sys.stdout)


if __name__ == "__main__":
    main()
