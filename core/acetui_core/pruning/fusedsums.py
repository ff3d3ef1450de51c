"""The calibration statistics' column sums on a CUDA device in one Triton kernel.

The eager sums (``ColumnStats.column_sums``) convert each batch of activations to float64 and square it
twice: some 74 bytes of memory traffic per activation, which on an H100 was about a quarter of a whole
LLaMA-7B wanda-FL calibration (262,144 tokens through 32 layers). This kernel reads each activation once in
its own dtype and does the same float64 arithmetic in registers: every ``x``, ``x^2`` and ``x^4`` it adds is
the float64 value the eager path adds; only the order of the additions differs (float64 rounding, far below
the float32 the scores read). Partial sums per block of tokens are added afterwards by ``torch.sum``, never
by atomics, so a batch gives the same bits every time.

Importing this module needs Triton (which CUDA builds of PyTorch bring); ``acetui_core.pruning.stats``
imports it only for CUDA tensors and keeps the eager sums where it cannot.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# A program sums BLOCK_D columns over CHUNK tokens, BLOCK_T rows at a time: 4096 tokens of a 4096-wide input
# make 16 x 64 programs, several per multiprocessor.
BLOCK_D = 64
BLOCK_T = 32
CHUNK = 256


@triton.jit
def _moments(
    x_ptr,
    s_ptr,
    sq_ptr,
    q_ptr,
    max_ptr,
    tokens,
    width,
    CHUNK: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    chunk, block = tl.program_id(0), tl.program_id(1)
    cols = block * BLOCK_D + tl.arange(0, BLOCK_D)
    s = tl.zeros((BLOCK_D,), dtype=tl.float64)
    sq = tl.zeros((BLOCK_D,), dtype=tl.float64)
    q = tl.zeros((BLOCK_D,), dtype=tl.float64)
    peak = tl.zeros((BLOCK_D,), dtype=tl.float64)
    for offset in range(0, CHUNK, BLOCK_T):
        rows = chunk * CHUNK + offset + tl.arange(0, BLOCK_T)
        inside = (rows[:, None] < tokens) & (cols[None, :] < width)
        x = tl.load(x_ptr + rows[:, None].to(tl.int64) * width + cols[None, :], mask=inside, other=0.0)
        x = x.to(tl.float64)
        x2 = x * x
        s += tl.sum(x, axis=0)
        sq += tl.sum(x2, axis=0)
        q += tl.sum(x2 * x2, axis=0)
        peak = tl.maximum(peak, tl.max(x2, axis=0))
    out = chunk * width + cols
    keep = cols < width
    tl.store(s_ptr + out, s, mask=keep)
    tl.store(sq_ptr + out, sq, mask=keep)
    tl.store(q_ptr + out, q, mask=keep)
    tl.store(max_ptr + out, peak, mask=keep)


def column_moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(sum_t x, sum_t x^2, sum_t x^4, max x^2)`` of a 2-D ``(tokens, width)`` tensor, in float64."""
    x = x.contiguous()
    tokens, width = x.shape
    chunks = triton.cdiv(tokens, CHUNK)
    partial = torch.empty(4, chunks, width, dtype=torch.float64, device=x.device)
    grid = (chunks, triton.cdiv(width, BLOCK_D))
    _moments[grid](x, *partial, tokens, width, CHUNK=CHUNK, BLOCK_T=BLOCK_T, BLOCK_D=BLOCK_D)
    s, sq, q = partial[:3].sum(dim=1)
    return s, sq, q, partial[3].amax()
