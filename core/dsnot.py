"""DSnoT refinement of a chosen mask (Zhang et al., ICLR 2024, "Dynamic Sparse No Training").

Per output row ``r``, pruning changes the layer's expected output by ``e_r = sum_{j pruned} W_rj mu_j``
(``mu_j`` the mean of input ``j``, scaled as the reference code scales it: the sum over the calibration
tokens over the number of windows). DSnoT swaps weights to bring ``|e_r|`` down without training and at
fixed sparsity. Each cycle, in every row still refining:

- grow: among the weights pruned by the mask, the one whose return lowers ``e_r`` the most relative to
  its input's variance: the largest ``W_rj mu_j / Var(x_j)^p`` when ``e_r > 0``, the smallest when
  ``e_r < 0``;
- prune: for N:M, the kept weight of the grown weight's group with the lowest score (so every group keeps
  N); otherwise the kept weight with the lowest score among those whose ``W_rj mu_j`` does not have the
  sign of ``e_r`` (removing it does not push ``e_r`` further away);
- the swap is made only while ``|e_r|`` exceeds the update threshold and when it lowers ``|e_r|``;
  a row whose swap is refused stops, and every row stops after the given number of cycles.

The reference code (zyxxmu/DSnoT) accepts a swap while ``|e_r|`` exceeds the threshold (unstructured) or
while ``e_r`` keeps its sign (N:M); requiring ``|e_r|`` to fall is this implementation's choice: it makes
the refinement never worsen the error it minimizes. A weight is grown or pruned at most once: only
weights pruned by the original mask grow, only weights it kept are pruned.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from acetui_core.records import Refinement

REFINEMENTS = ("none", "dsnot")
_TINY_VARIANCE = 1e-12  # a constant input (zero variance) would divide by zero


@dataclass(frozen=True)
class DSnoTSettings:
    """The reference code's defaults: 50 cycles, update threshold 0.1, variance power 1."""

    cycles: int = 50
    threshold: float = 0.1
    var_power: float = 1.0


def refine(
    W: torch.Tensor,
    pruned: torch.Tensor,
    scores: torch.Tensor,
    mean: torch.Tensor,
    var: torch.Tensor,
    settings: DSnoTSettings,
    m: int = 0,
) -> tuple[torch.Tensor, Refinement]:
    """The refined mask (True = pruned) and what the refinement did. ``W``, ``pruned`` and ``scores``
    are ``(d_out, d_in)``; ``mean`` and ``var`` per input. ``m``: the group size of an N:M mask whose
    groups are runs of ``m`` consecutive columns (0 for unstructured). Rows keep their count of pruned
    weights, and N:M groups theirs."""
    rows = torch.arange(W.shape[0], device=W.device)
    effect = W.double() * mean.double()  # what each weight adds to its row's expected output
    grow_key = effect / var.double().clamp_min(_TINY_VARIANCE) ** settings.var_power
    pruned = pruned.clone()
    growable, prunable = pruned.clone(), ~pruned
    error = (effect * pruned).sum(dim=1)
    before = _relative(error, effect)
    active = torch.ones_like(error, dtype=torch.bool)
    swaps = 0
    for _ in range(settings.cycles):
        active &= error.abs() > settings.threshold
        if not active.any():
            break
        sign = torch.where(error > 0, 1.0, -1.0).to(effect.dtype)[:, None]
        grown = torch.where(growable, grow_key * sign, -torch.inf).argmax(dim=1)
        dropped = _to_prune(scores, effect, prunable, sign, grown, m)
        after = error - effect[rows, grown] + effect[rows, dropped]
        accept = active & growable[rows, grown] & prunable[rows, dropped] & (after.abs() < error.abs())
        where = rows[accept]
        pruned[where, grown[accept]] = False
        pruned[where, dropped[accept]] = True
        growable[where, grown[accept]] = False
        prunable[where, dropped[accept]] = False
        error = torch.where(accept, after, error)
        swaps += int(accept.sum())
        active &= accept
    return pruned, Refinement(swaps=swaps, error_before=before, error_after=_relative(error, effect))


def _to_prune(scores, effect, prunable, sign, grown, m: int) -> torch.Tensor:
    """Each row's weight to prune in exchange for its grown one (see the module's description)."""
    low = scores.double()
    if m:
        group = (grown // m * m)[:, None] + torch.arange(m, device=grown.device)
        candidates = torch.where(prunable.gather(1, group), low.gather(1, group), torch.inf)
        return group.gather(1, candidates.argmin(dim=1, keepdim=True)).squeeze(1)
    allowed = prunable & (effect * sign <= 0)
    return torch.where(allowed, low, torch.inf).argmin(dim=1)


def _relative(error: torch.Tensor, effect: torch.Tensor) -> float:
    """``||e|| / ||W mu||``: the error of the expected output relative to the dense expected output."""
    dense = effect.sum(dim=1).norm().item()
    return error.norm().item() / dense if dense else 0.0
