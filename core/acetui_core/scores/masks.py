"""From scores to pruning masks (True = pruned): per row, per layer, or N:M.

Ties are broken deterministically: among equal scores the lower index is pruned first.
Each function also returns the cut-off score it used (for the histograms).
"""

from __future__ import annotations

import struct

import torch

from acetui_core.basics.choices import SparsityGroup
from acetui_core.basics.errors import UserError
from acetui_core.scores.sparsity import Sparsity

# Rows of a per-row or N:M selection are chosen this many scores at a time: the selection's scratch (the
# tie count in int64, the sort's indices: 8 bytes a score) is then that of a slice, not of the whole
# matrix (1.9 GB for a 28672 x 8192 linear, more than its bf16 weight). Each row's choice is its own,
# so the masks are the same; SmolLM2's largest linear (885k scores) is one slice.
SCORES_PER_SLICE = 1 << 23


def check_nm_fits(sparsity: Sparsity, d_in: int, name: str) -> None:
    if sparsity.is_nm and d_in % sparsity.m:
        raise UserError(
            f"Sparsity {sparsity} needs every layer's input width to be a multiple of {sparsity.m}, "
            f"but {name} has {d_in} inputs."
        )


def check_nm_groups(weight: torch.Tensor, sparsity: Sparsity, order: list[int] | None, where: str) -> None:
    """After an N:M prune, the stored weight itself: in each row, every run of ``m`` inputs (taken in the
    permuted ``order`` under ``--permute``) holds at least ``m - n`` zeros, so a table's "2:4" is what the
    weights hold, not what the run was asked for. A group short of zeros stops the run before evaluation."""
    d_out, d_in = weight.shape
    fewest = sparsity.m
    for rows in row_slices(weight):  # a slice at a time, as the masks are made: no whole-matrix temporaries
        zeros = weight[rows] == 0 if order is None else (weight[rows] == 0)[:, order]
        counts = zeros.reshape(-1, d_in // sparsity.m, sparsity.m).sum(-1, dtype=torch.int16)
        fewest = min(fewest, int(counts.min()))
    if fewest < sparsity.m - sparsity.n:
        raise UserError(
            f"{where} holds a group of {sparsity.m} inputs with {fewest} zeros after pruning to {sparsity}, "
            f"which needs {sparsity.m - sparsity.n}; acetui stops here, before evaluation."
        )


# A float's bits read as an integer of its width, by dtype: what kth_smallest bisects over.
_BITS = {torch.float32: ("<f", "<i", 32), torch.float64: ("<d", "<q", 64)}


def _ordered_key(value: float, dtype: torch.dtype) -> int:
    """An integer that orders as ``value`` does among floats of ``dtype`` (-0.0 and 0.0 share one)."""
    real, integer, width = _BITS[dtype]
    bits = struct.unpack(integer, struct.pack(real, value))[0]
    return bits if bits >= 0 else -(bits & ((1 << (width - 1)) - 1))


def _key_value(key: int, dtype: torch.dtype) -> float:
    real, integer, width = _BITS[dtype]
    bits = key if key >= 0 else -key - (1 << (width - 1))  # the sign bit set, read as a signed integer
    return struct.unpack(real, struct.pack(integer, bits))[0]


def kth_smallest(scores: torch.Tensor, k: int) -> float:
    """The ``k``-th smallest of ``scores`` (1-based), as ``torch.kthvalue`` gives it, found by bisecting
    the floats between the smallest and the largest score on the count of scores at or under each: one
    comparison pass of the scores per bit of their dtype. On a GPU ``kthvalue`` selects within one row
    on one block of threads: a 45M-score linear's per-layer cut-off took 0.2 s that way, 224 of them 49 s
    of a LLaMA-7B RIA run. Finite float32 or float64 scores."""
    low, high = _ordered_key(scores.min().item(), scores.dtype), _ordered_key(scores.max().item(), scores.dtype)
    while low < high:  # the answer is the smallest key whose value has at least k scores at or under it
        middle = (low + high) // 2
        if torch.count_nonzero(scores <= _key_value(middle, scores.dtype)).item() >= k:
            high = middle
        else:
            low = middle + 1
    return _key_value(low, scores.dtype)


def _lowest_k(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` lowest scores of each row, ties at the cut-off going to the lowest indices, and each
    row's cut-off. A selection (``kthvalue``) instead of a full sort: the same mask, about 3x faster;
    a single row on a GPU is bisected instead (``kth_smallest``)."""
    if scores.shape[0] == 1 and not scores.is_cpu and scores.dtype in _BITS:
        cutoff = scores.new_full((1, 1), kth_smallest(scores, k))
    else:
        cutoff = torch.kthvalue(scores, k, dim=1, keepdim=True).values
    below = scores < cutoff
    tied = scores == cutoff
    tied &= tied.cumsum(dim=1) <= k - below.sum(dim=1, keepdim=True)
    return below | tied, cutoff


def rows_per_slice(d_in: int) -> int:
    """How many rows of ``d_in`` scores make a slice of about ``SCORES_PER_SLICE`` scores."""
    return max(1, SCORES_PER_SLICE // d_in)


def row_slices(scores: torch.Tensor) -> list[slice]:
    """The rows of ``scores`` in slices of about ``SCORES_PER_SLICE`` scores."""
    rows = rows_per_slice(scores.shape[1])
    return [slice(start, start + rows) for start in range(0, scores.shape[0], rows)]


def row_mask(scores: torch.Tensor, ratio: float) -> tuple[torch.Tensor, float | None]:
    """Each row loses exactly ``floor(d_in * ratio)`` of its lowest scores; the cut-off reported is the
    median of the rows' cut-offs."""
    mask, cutoffs = row_cutoff_mask(scores, ratio)
    return mask, None if cutoffs is None else cutoffs.median().item()


def row_cutoff_mask(scores: torch.Tensor, ratio: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``row_mask``'s mask and each row's cut-off (None when no row loses anything)."""
    k = int(scores.shape[1] * ratio)
    if k == 0:
        return torch.zeros_like(scores, dtype=torch.bool), None
    mask = torch.empty_like(scores, dtype=torch.bool)
    cutoffs = []
    for rows in row_slices(scores):
        mask[rows], cutoff = _lowest_k(scores[rows], k)
        cutoffs.append(cutoff)
    return mask, torch.cat(cutoffs)


def layer_mask(scores: torch.Tensor, ratio: float) -> tuple[torch.Tensor, float | None]:
    """One threshold for the whole matrix: exactly ``floor(numel * ratio)`` lowest scores pruned."""
    k = int(scores.numel() * ratio)
    if k == 0:
        return torch.zeros_like(scores, dtype=torch.bool), None
    mask, cutoff = _lowest_k(scores.reshape(1, -1), k)
    return mask.view_as(scores), cutoff.item()


def nm_mask(scores: torch.Tensor, n: int, m: int) -> tuple[torch.Tensor, None]:
    """In each row, each run of ``m`` consecutive inputs keeps its ``n`` highest scores (no single cut-off)."""
    d_out, d_in = scores.shape
    mask = torch.zeros_like(scores, dtype=torch.bool)
    for rows in row_slices(scores):
        groups = scores[rows].reshape(-1, d_in // m, m)
        order = torch.sort(groups, dim=-1, stable=True).indices[..., : m - n]
        mask[rows] = torch.zeros_like(groups, dtype=torch.bool).scatter_(-1, order, True).reshape(-1, d_in)
    return mask, None


def permuted_nm_mask(scores: torch.Tensor, n: int, m: int, order: torch.Tensor) -> torch.Tensor:
    """The N:M mask of the columns taken in ``order`` (``acetui_core.scores.permute``), in the original column
    order: ``mask[:, order]`` is N:M."""
    chosen, _ = nm_mask(scores[:, order], n, m)
    mask = torch.empty_like(chosen)
    mask[:, order] = chosen
    return mask


def prune_mask(
    scores: torch.Tensor, sparsity: Sparsity, group: str, order: torch.Tensor | None = None
) -> tuple[torch.Tensor, float | None]:
    """The mask and its cut-off score for ``sparsity`` with ``group`` ("row" or "layer") competition;
    ``order``: the input order an N:M pattern's groups are taken in (None: the original order)."""
    if sparsity.is_nm:
        if order is not None:
            return permuted_nm_mask(scores, sparsity.n, sparsity.m, order), None
        return nm_mask(scores, sparsity.n, sparsity.m)
    if group == SparsityGroup.LAYER:
        return layer_mask(scores, sparsity.ratio)
    return row_mask(scores, sparsity.ratio)
