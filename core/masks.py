"""From scores to pruning masks (True = pruned): per row, per layer, or N:M.

Ties are broken deterministically by a stable sort: among equal scores the lower index is pruned first.
Each function also returns the cut-off score it used (for the histograms), read from the same sort.
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


def row_mask(scores: torch.Tensor, ratio: float) -> tuple[torch.Tensor, float | None]:
    """Each row loses exactly ``floor(d_in * ratio)`` of its lowest scores; the cut-off is the median
    over rows of the highest pruned score."""
    k = int(scores.shape[1] * ratio)
    values, order = torch.sort(scores, dim=1, stable=True)
    mask = torch.zeros_like(scores, dtype=torch.bool).scatter_(1, order[:, :k], True)
    return mask, (values[:, k - 1].median().item() if k else None)


def layer_mask(scores: torch.Tensor, ratio: float) -> tuple[torch.Tensor, float | None]:
    """One threshold for the whole matrix: exactly ``floor(numel * ratio)`` lowest scores pruned."""
    k = int(scores.numel() * ratio)
    values, order = torch.sort(scores.flatten(), stable=True)
    mask = torch.zeros(scores.numel(), dtype=torch.bool, device=scores.device)
    mask[order[:k]] = True
    return mask.view_as(scores), (values[k - 1].item() if k else None)


def nm_mask(scores: torch.Tensor, n: int, m: int) -> tuple[torch.Tensor, None]:
    """In each row, each run of ``m`` consecutive inputs keeps its ``n`` highest scores (no single cut-off)."""
    d_out, d_in = scores.shape
    groups = scores.reshape(d_out, d_in // m, m)
    order = torch.sort(groups, dim=-1, stable=True).indices[..., : m - n]
    return torch.zeros_like(groups, dtype=torch.bool).scatter_(-1, order, True).reshape(d_out, d_in), None


def prune_mask(scores: torch.Tensor, sparsity: Sparsity, group: str) -> tuple[torch.Tensor, float | None]:
    """The mask and its cut-off score for ``sparsity`` with ``group`` ("row" or "layer") competition."""
    if sparsity.is_nm:
        return nm_mask(scores, sparsity.n, sparsity.m)
    if group == "layer":
        return layer_mask(scores, sparsity.ratio)
    return row_mask(scores, sparsity.ratio)
