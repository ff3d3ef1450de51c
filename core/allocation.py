"""Per-layer sparsity allocation: uniform (the target in every decoder layer) or OWL's (Yin et al.,
2024, "Outlier Weighed Layerwise sparsity"): layers with more outlier scores keep more weights.

OWL's definitions, computed with the chosen metric's scores:

- a decoder layer's outlier ratio ``r_l`` is the share of its scores (every linear of the layer
  together) above ``M`` times the layer's mean score;
- ``x_l = 2 lambda (r_l - min r) / (max r - min r)`` spreads the ratios over ``[0, 2 lambda]``;
- the layer's sparsity is ``s_l = s - (x_l - mean_w x)``, where ``mean_w`` weighs each layer by its
  number of prunable parameters, so the parameter-weighted mean of ``s_l`` is the target ``s`` exactly
  (OWL's code takes the plain mean, the same thing when all layers are equal in size).
"""

from __future__ import annotations

import torch

from acetui_core.errors import UserError

ALLOCATIONS = ("uniform", "owl")


def outlier_ratio(scores: list[torch.Tensor], m: float) -> float:
    """The share of the scores (all tensors together) above ``m`` times their mean."""
    count = sum(s.numel() for s in scores)
    mean = sum(s.double().sum().item() for s in scores) / count
    return sum((s > m * mean).sum().item() for s in scores) / count


def owl_sparsities(ratios: list[float], sizes: list[int], target: float, lam: float) -> list[float]:
    """Each layer's sparsity from its outlier ratio (module docstring); equal ratios give ``target``
    everywhere. A spread that leaves (0, 1) is refused."""
    r = torch.tensor(ratios, dtype=torch.float64)
    w = torch.tensor(sizes, dtype=torch.float64)
    if r.max() == r.min():
        return [target] * len(ratios)
    x = 2 * lam * (r - r.min()) / (r.max() - r.min())
    s = target - (x - (x * w).sum() / w.sum())
    if s.min() <= 0 or s.max() >= 1:
        raise UserError(
            f"OWL with --owl-lambda {lam:g} at sparsity {target:g} would give a layer sparsity of "
            f"{s.min().item():.3f} to {s.max().item():.3f}; choose a smaller lambda."
        )
    return s.tolist()
