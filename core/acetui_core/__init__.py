"""The acetui pruning engine: scores, masks, the layer-by-layer pipeline, evaluation and the run store.

Nothing here imports the user interface (textual, typer, acetui); the faces import this.
"""

import os

__version__ = "0.1.0"

# Intel's MKL, which torch's CPU matrix products call, picks its code path by the CPU (AVX-512 on an Intel
# Xeon, AVX2 on an AMD EPYC) and the paths sum in another order: the README's 2:4 prune of SmolLM2 printed
# 448.59 on one machine and 445.96 on the other, with the same packages. One path, which every x86 CPU of
# the last decade has, so a run prints the same figure wherever it runs; STRICT, so its bits do not move with
# the data's memory alignment either (without it SparseGPT's reconstruction moved with the calibration batch
# size). Set before torch's first product; a user's own MKL_CBWR is kept, and each run records it.
os.environ.setdefault("MKL_CBWR", "AVX2,STRICT")
