"""SparseGPT (Frantar & Alistarh, 2023): prune by OBS with the Hessian of the layer's inputs,
updating the remaining weights to compensate, in blocks of 128 columns. ``mask_and_update`` is SparseGPT's
hook as a method (``Method.mask_and_update``), and the same reconstruction with a mask chosen beforehand by
any score (``--update obs``, as in Wanda's ablation)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from acetui_core.basics.errors import UserError
from acetui_core.scores.sparsity import Sparsity

if TYPE_CHECKING:
    import torch

NO_SPARSITY = Sparsity()  # with a fixed mask the loop chooses nothing


def mask_and_update(
    W: torch.Tensor,
    H: torch.Tensor,
    name: str,
    *,
    sparsity: Sparsity = NO_SPARSITY,
    mask: torch.Tensor | None = None,
    blocksize: int = 128,
    percdamp: float = 0.01,
) -> torch.Tensor:
    """Return ``W`` (float32) pruned and its remaining weights updated, column by column, by SparseGPT's
    OBS reconstruction to compensate. The mask (True = pruned) is ``mask`` when given (``--update obs``
    after a score's mask); else SparseGPT chooses it for ``sparsity`` by OBS saliency: unstructured masks
    per block of ``blocksize`` columns (its adaptive mask selection, so rows differ slightly in sparsity),
    N:M masks exact."""
    import torch  # here, not at the top: the method registry imports this hook and loads without torch

    W = W.clone().float()
    H = H.clone()
    d_in = W.shape[1]
    dead = torch.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    H += percdamp * torch.mean(torch.diag(H)) * torch.eye(d_in, device=H.device)
    try:
        Hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    except torch.linalg.LinAlgError:
        raise UserError(f"SparseGPT could not invert the Hessian of {name}; try more calibration samples.") from None

    choose_nm = mask is None and sparsity.is_nm
    for i1 in range(0, d_in, blocksize):
        i2 = min(i1 + blocksize, d_in)
        W1 = W[:, i1:i2].clone()
        Q1 = torch.zeros_like(W1)
        Err1 = torch.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2]
        diag = torch.diag(Hinv1)
        if mask is not None:
            mask1 = mask[:, i1:i2]
        elif sparsity.is_nm:
            mask1 = torch.zeros_like(W1, dtype=torch.bool)
        else:
            saliency = W1**2 / diag.reshape(1, -1) ** 2
            k = int(saliency.numel() * sparsity.ratio)
            order = torch.sort(saliency.flatten(), stable=True).indices[:k]
            mask1 = torch.zeros(saliency.numel(), dtype=torch.bool, device=W.device)
            mask1[order] = True
            mask1 = mask1.view_as(W1)
        for i in range(i2 - i1):
            if choose_nm and i % sparsity.m == 0:
                saliency = W1[:, i : i + sparsity.m] ** 2 / diag[i : i + sparsity.m].reshape(1, -1) ** 2
                order = torch.sort(saliency, dim=1, stable=True).indices[:, : sparsity.m - sparsity.n]
                mask1.scatter_(1, i + order, True)
            w = W1[:, i]
            q = w.masked_fill(mask1[:, i], 0)
            Q1[:, i] = q
            err = (w - q) / Hinv1[i, i]
            W1[:, i:] -= err.unsqueeze(1) @ Hinv1[i, i:].unsqueeze(0)
            Err1[:, i] = err
        W[:, i1:i2] = Q1
        W[:, i2:] -= Err1 @ Hinv[i1:i2, i2:]
    return W
