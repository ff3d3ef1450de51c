"""What sorting once buys DSnoT (acetui_core.pruning.dsnot): the seconds of one refinement of a linear of each of
SmolLM2-135M's shapes, by the implementation that scans every row at every cycle (kept as the reference
in tests/test_dsnot.py) and by the sorted-once one, which makes the same swaps (checked here too).

    .venv/bin/python bench/dsnot_speed.py [--repeats 3] [--threads 1]

Random weights and input statistics of the real shapes (seeded), DSnoT's defaults; the best of the
repeats, the two implementations alternating, so a slow spell of a shared machine falls on both.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # run from a checkout; the reference lives in the tests

from test_dsnot import dense_scan  # noqa: E402

from acetui_core.pruning.dsnot import DSnoTSettings, refine  # noqa: E402
from acetui_core.scores.masks import nm_mask, row_mask  # noqa: E402

SHAPES = {"q/o_proj": (576, 576), "k/v_proj": (192, 576), "gate/up_proj": (1536, 576), "down_proj": (576, 1536)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    settings = DSnoTSettings()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, DSnoT defaults {settings}")
    print("| linear | shape | pattern | swaps | scan every cycle (s) | sorted once (s) | speed-up |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for name, shape in SHAPES.items():
        torch.manual_seed(0)
        W = torch.randn(shape)
        mean, var = torch.randn(shape[1]) * 0.1, torch.rand(shape[1]) + 0.1
        scores = W.abs() * var.sqrt()
        for pattern, m, mask in (("2:4", 4, nm_mask(scores, 2, 4)[0]), ("50%", 0, row_mask(scores, 0.5)[0])):
            scan, sorted_once = [], []
            for _ in range(args.repeats):
                start = time.perf_counter()
                expected, swaps = dense_scan(W, mask, scores, mean, var, settings, m)
                scan.append(time.perf_counter() - start)
                start = time.perf_counter()
                refined, record = refine(W, mask, scores, mean, var, settings, m=m)
                sorted_once.append(time.perf_counter() - start)
                assert torch.equal(refined, expected) and record.swaps == swaps, (name, pattern)
            best_scan, best_sorted = min(scan), min(sorted_once)
            print(
                f"| {name} | {shape[0]}x{shape[1]} | {pattern} | {swaps} | {best_scan:.3f} | {best_sorted:.3f} "
                f"| {best_scan / best_sorted:.1f}x |"
            )


if __name__ == "__main__":
    main()
