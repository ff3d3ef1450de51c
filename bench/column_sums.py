"""What the fused statistics kernel (acetui_core.pruning.fusedsums) buys on a CUDA device: the milliseconds and
the extra GPU memory of one batch's column sums (sum x, x^2, x^4, max x^2 in float64) by PyTorch's own
operations and by the kernel, for the inputs of LLaMA-7B's and LLaMA-2-70B's linears, and the largest
relative difference between the two (float64 additions in another order).

    python bench/column_sums.py [--tokens 4096] [--repeats 20]

bf16 activations, as a CUDA run computes; the median of the repeats after two warm-ups.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "core")]  # run from a checkout

from acetui_core.pruning import stats  # noqa: E402
from acetui_core.pruning.stats import ColumnStats  # noqa: E402

WIDTHS = {"7B q/k/v, o, gate/up": 4096, "7B down": 11008, "70B q/k/v, o, gate/up": 8192, "70B down": 28672}


def timed(work, x, repeats: int) -> tuple[float, float, tuple]:
    """Median milliseconds and peak extra MiB of ``work(x)``, and its last result."""
    for _ in range(2):
        result = work(x)
    times = []
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        result = work(x)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), (torch.cuda.max_memory_allocated() - base) / 2**20, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/column_sums.py measures the CUDA path; no CUDA device is visible.")
    fused = stats._fused_moments()
    if fused is None:
        sys.exit("The fused kernel cannot run here (see the warning above); nothing to compare.")
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, {args.tokens} tokens a batch, bf16")
    print("| input | width | eager ms | fused ms | speed-up | eager extra MiB | fused extra MiB | max rel. diff |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, width in WIDTHS.items():
        torch.manual_seed(0)
        x = (torch.randn(args.tokens, width, device="cuda") * 2).to(torch.bfloat16)
        eager_ms, eager_mib, eager = timed(ColumnStats.eager_sums, x, args.repeats)
        fused_ms, fused_mib, fast = timed(fused, x, args.repeats)
        diff = max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(fast, eager[:4], strict=True))
        print(
            f"| {name} | {width} | {eager_ms:.2f} | {fused_ms:.2f} | {eager_ms / fused_ms:.1f}x "
            f"| {eager_mib:.0f} | {fused_mib:.0f} | {diff:.1e} |"
        )
        del x


if __name__ == "__main__":
    main()
