"""From scores to pruning masks (True = pruned): per row, per layer, or N:M.

Ties are broken deterministically by a stable sort: among equal scores the lower index is pruned first.
"""

from __future__ import annotations

import torch

from core.errors import UserError
from core.sparsity import Sparsity


def check_nm_fits(sparsity: Sparsity, d_in: int, name: str) -> None:
    if sparsity.is_nm and d_in % sparsity.m:
        raise UserError(
            f"Sparsity {sparsity} needs every layer's input width to be a multiple of {sparsity.m}, "
            f"but {name} has {d_in} inputs."
        )


def row_mask(scores: torch.Tensor, ratio: float) -> torch.Tensor:
    """Each row loses exactly ``floor(d_in * ratio)`` of its lowest scores."""
    k = int(scores.shape[1] * ratio)
    order = torch.sort(scores, dim=1, stable=True).indices[:, :k]
    return torch.zeros_like(scores, dtype=torch.bool).scatter_(1, order, True)


def layer_mask(scores: torch.Tensor, ratio: float) -> torch.Tensor:
    """One threshold for the whole matrix: exactly ``floor(numel * ratio)`` lowest scores pruned."""
    k = int(scores.numel() * ratio)
    order = torch.sort(scores.flatten(), stable=True).indices[:k]
    mask = torch.zeros(scores.numel(), dtype=torch.bool, device=scores.device)
    mask[order] = True
    return mask.view_as(scores)


def nm_mask(scores: torch.Tensor, n: int, m: int) -> torch.Tensor:
    """In each row, each run of ``m`` consecutive inputs keeps its ``n`` highest scores."""
    d_out, d_in = scores.shape
    groups = scores.reshape(d_out, d_in // m, m)
    order = torch.sort(groups, dim=-1, stable=True).indices[..., : m - n]
    return torch.zeros_like(groups, dtype=torch.bool).scatter_(-1, order, True).reshape(d_out, d_in)


def prune_mask(scores: torch.Tensor, sparsity: Sparsity, group: str) -> torch.Tensor:
    if sparsity.is_nm:
        return nm_mask(scores, sparsity.n, sparsity.m)
    if group == "layer":
        return layer_mask(scores, sparsity.ratio)
    return row_mask(scores, sparsity.ratio)


def threshold_of(scores: torch.Tensor, mask: torch.Tensor, sparsity: Sparsity, group: str) -> float | None:
    """The score at which weights were cut: the highest pruned score (per layer), or the median of
    the rows' cut-offs (per row); None for N:M, which has no single threshold."""
    if sparsity.is_nm or not mask.any():
        return None
    pruned = scores.masked_fill(~mask, float("-inf"))
    if group == "layer":
        return pruned.max().item()
    return pruned.max(dim=1).values.median().item()
