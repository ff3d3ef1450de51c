"""From scores to pruning masks (True = pruned): per row, per layer, or N:M.

Ties are broken deterministically: among equal scores the lower index is pruned first.
Each function also returns the cut-off score it used (for the histograms).
"""

from __future__ import annotations

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


def _lowest_k(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` lowest scores of each row, ties at the cut-off going to the lowest indices, and each
    row's cut-off. A selection (``kthvalue``) instead of a full sort: the same mask, about 3x faster."""
    cutoff = torch.kthvalue(scores, k, dim=1, keepdim=True).values
    below = scores < cutoff
    tied = scores == cutoff
    tied &= tied.cumsum(dim=1) <= k - below.sum(dim=1, keepdim=True)
    return below | tied, cutoff


def row_slices(scores: torch.Tensor) -> list[slice]:
    """The rows of ``scores`` in slices of about ``SCORES_PER_SLICE`` scores."""
    rows = max(1, SCORES_PER_SLICE // scores.shape[1])
    return [slice(start, start + rows) for start in range(0, scores.shape[0], rows)]


def row_mask(scores: torch.Tensor, ratio: float) -> tuple[torch.Tensor, float | None]:
    """Each row loses exactly ``floor(d_in * ratio)`` of its lowest scores; the cut-off reported is the
    median of the rows' cut-offs."""
    k = int(scores.shape[1] * ratio)
    if k == 0:
        return torch.zeros_like(scores, dtype=torch.bool), None
    mask = torch.empty_like(scores, dtype=torch.bool)
    cutoffs = []
    for rows in row_slices(scores):
        mask[rows], cutoff = _lowest_k(scores[rows], k)
        cutoffs.append(cutoff)
    return mask, torch.cat(cutoffs).median().item()


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
