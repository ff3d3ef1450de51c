"""What --fidelity and --keep-masks cost: ACE-16's pruning time with and without them on one model
(the README's figures), and the size of the kept masks per billion weights.

    ACETUI_DATA_DIR=../shared/data .venv/bin/python bench/fidelity.py [MODEL] [--repeats 3]

The model is loaded once and reset to its dense weights before each run; the settings alternate, so
a slow spell of a shared machine falls on both.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from acetui_core.basics.paths import default_model
from acetui_core.modeling.layouts import decoder_layers
from acetui_core.modeling.models import load_model
from acetui_core.pruning import layerloop
from acetui_core.run.config import RunConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model", nargs="?", default=None)
    parser.add_argument("--method", default="ace")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = args.model or default_model()
    loaded = load_model(model, device="auto")
    loaded.snapshot()
    base = RunConfig(model=model, method=args.method, sparsity="0.5", seqlen=16, evals=[])
    settings = {
        "plain": base,
        "--fidelity": replace(base, fidelity=True),
        "--keep-masks": replace(base, keep_masks=True),
    }
    seconds: dict[str, list[float]] = {name: [] for name in settings}
    folder = Path(tempfile.mkdtemp(prefix="acetui-bench-"))
    sizes = {}
    for repeat in range(args.repeats):
        for name, config in settings.items():
            loaded.reset()
            path = folder / f"{name.strip('-')}-{repeat}.npz"
            pruned = layerloop.prune(loaded, config, masks_path=path)
            seconds[name].append(pruned.prune_seconds)
            print(f"{name:13s} run {repeat + 1}: {pruned.prune_seconds:.2f} s", flush=True)
    weights = sum(layerloop.linear_sizes(decoder_layers(loaded.model)))
    for sparsity in ("0.5", "2:4"):
        loaded.reset()
        path = folder / f"size-{sparsity.replace(':', '-')}.npz"
        layerloop.prune(loaded, replace(base, sparsity=sparsity, keep_masks=True), masks_path=path)
        sizes[sparsity] = path.stat().st_size
    plain = statistics.median(seconds["plain"])
    print(f"\n{args.method}-16 at 0.5 on {Path(model).name} ({loaded.device}, {args.repeats} runs each, median):")
    print("| setting | prune s | vs plain |")
    print("|---|---|---|")
    for name, values in seconds.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.2f} | {100 * (median / plain - 1):+.0f}% |")
    for sparsity, size in sizes.items():
        per_billion = size / weights * 1e9 / 2**20
        print(
            f"masks at {sparsity}: {size / 2**20:.1f} MiB for {weights / 1e6:.1f} M weights = {per_billion:.0f} MiB per 1e9"
        )


if __name__ == "__main__":
    main()
