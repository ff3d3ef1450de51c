"""DSnoT refinement of a chosen mask (Zhang et al., ICLR 2024, "Dynamic Sparse No Training"), with the
reference code's protocol (zyxxmu/DSnoT, ``lib/prune.py: prune_DSnoT``) by default.

Per output row ``r``, pruning changes the layer's expected output by ``e_r = sum_{j pruned} W_rj mu_j``
(``mu_j`` the mean of input ``j``, scaled as the reference code scales it: the sum over the calibration
tokens over the number of windows). DSnoT swaps weights to bring ``e_r`` towards zero without training and
at fixed sparsity. Each cycle, in every row still refining:

- grow: among the weights pruned by the mask, the one whose return lowers ``e_r`` the most relative to
  its input's variance: the largest ``W_rj mu_j / Var(x_j)^p`` when ``e_r > 0``, the smallest otherwise;
- prune: for N:M, the kept weight of the grown weight's group ranked lowest (so every group keeps N);
  otherwise the kept weight ranked lowest among those whose ``W_rj mu_j`` has the sign opposite to
  ``e_r``'s (removing it moves ``e_r`` towards zero). The ranking is the caller's ``ranks`` (the reference:
  the mask's own metric for N:M, Wanda's score for unstructured masks);
- accept (``DSnoTAccept``): the reference's rule makes the swap while ``|e_r|`` exceeds the update
  threshold and, for N:M, while ``e_r`` keeps its initial sign (so a swap may raise ``|e_r|``); the
  ``decrease`` variant also requires ``|e_r|`` to fall;
- stop: a row whose swap is refused stops for good, as does a row whose ``|e_r|`` is at most the
  threshold, and every row after the given number of cycles.

A weight is grown or pruned at most once: only weights pruned by the original mask grow, only weights it
kept are pruned. Where the reference's pointers would run past a candidate list (a group with no kept
weight left to prune, no kept weight of the opposite sign left) its bookkeeping breaks the N:M group or
the row's count; here the swap is refused and the row stops.

As in the reference code, each row's candidates are sorted once (the pruned weights by growth key, from
either end; for unstructured masks the kept weights by rank, one list per sign of their effect) and each
cycle takes the next candidate still unused, so a cycle costs a few operations per refining row rather
than a scan of the whole matrix (bench/dsnot_speed.py measures it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from acetui_core.basics.choices import DSnoTAccept, DSnoTSkip
from acetui_core.run.records import Refinement

_TINY_VARIANCE = 1e-12  # a constant input (zero variance) would divide by zero


@dataclass(frozen=True)
class DSnoTSettings:
    """The reference code's defaults: 50 cycles, update threshold 0.1, variance power 1, its acceptance rule."""

    cycles: int = 50
    threshold: float = 0.1
    var_power: float = 1.0
    accept: str = DSnoTAccept.THRESHOLD


def refine(
    W: torch.Tensor,
    pruned: torch.Tensor,
    ranks: torch.Tensor,
    mean: torch.Tensor,
    var: torch.Tensor,
    settings: DSnoTSettings,
    m: int = 0,
) -> tuple[torch.Tensor, Refinement]:
    """The refined mask (True = pruned) and what the refinement did. ``W``, ``pruned`` and ``ranks`` (the
    order in which kept weights are pruned, lowest first) are ``(d_out, d_in)``; ``mean`` and ``var`` per input. ``m``: the group size of an N:M mask whose
    groups are runs of ``m`` consecutive columns (0 for unstructured). Rows keep their count of pruned
    weights, and N:M groups theirs."""
    effect = W.double() * mean.double()  # what each weight adds to its row's expected output
    grow_key = effect / var.double().clamp_min(_TINY_VARIANCE) ** settings.var_power
    pruned = pruned.clone()
    growable, prunable = pruned.clone(), ~pruned
    # Sorted once: a row grows from one end of its pruned weights' keys or the other, by the sign of e_r
    # (the reference sorts ascending and reads from both ends: among equal keys, the last column first
    # from the top).
    grow_lowest, grow_highest = _Queue(grow_key, pruned), _Queue(grow_key, pruned, from_top=True)
    if not m:  # the lowest-ranked kept weight whose effect has the sign opposite to e_r's
        drop_if_positive = _Queue(ranks, prunable & (effect < 0))
        drop_if_negative = _Queue(ranks, prunable & (effect > 0))
    error = (effect * pruned).sum(dim=1)
    initial_sign = error.sign()
    before = _relative(error, effect)
    active = torch.arange(W.shape[0], device=W.device)  # the rows still refining
    swaps = 0
    for _ in range(settings.cycles):
        active = active[error[active].abs() > settings.threshold]
        if not len(active):
            break
        positive = error[active] > 0
        grown = torch.where(positive, grow_highest.first(active, growable), grow_lowest.first(active, growable))
        if m:
            dropped = _lowest_in_group(ranks, prunable, active, grown.clamp_min(0), m)
        else:
            dropped = torch.where(
                positive, drop_if_positive.first(active, prunable), drop_if_negative.first(active, prunable)
            )
        after = error[active] - effect[active, grown] + effect[active, dropped]
        accept = (grown >= 0) & (dropped >= 0) & prunable[active, dropped]
        if settings.accept == DSnoTAccept.DECREASE:
            accept &= after.abs() < error[active].abs()
        elif m:
            accept &= after.sign() == initial_sign[active]
        active, grown, dropped = active[accept], grown[accept], dropped[accept]
        pruned[active, grown], pruned[active, dropped] = False, True
        growable[active, grown], prunable[active, dropped] = False, False
        error[active] = after[accept]
        swaps += len(active)
    return pruned, Refinement(swaps=swaps, error_before=before, error_after=_relative(error, effect))


class _Queue:
    """Per row, the entries a mask allows, sorted once by a key (ties by column): ``first`` is each row's
    lowest-keyed entry still available (``from_top``: highest-keyed, ties by column from the last), found by
    moving a head past the entries used since."""

    def __init__(self, key: torch.Tensor, allowed: torch.Tensor, from_top: bool = False):
        if from_top:
            ascending = torch.sort(torch.where(allowed, key, -torch.inf), dim=1, stable=True).indices
            self.order = ascending.flip(1)
        else:
            self.order = torch.sort(torch.where(allowed, key, torch.inf), dim=1, stable=True).indices
        self.length = allowed.sum(dim=1)
        self.head = torch.zeros_like(self.length)

    def first(self, rows: torch.Tensor, available: torch.Tensor) -> torch.Tensor:
        """Each of ``rows``' first entry still ``available`` (-1 where none is left)."""
        while True:
            head = self.head[rows]
            left = head < self.length[rows]
            entry = self.order[rows, head.clamp_max(self.order.shape[1] - 1)]
            used = left & ~available[rows, entry]
            if not used.any():
                return torch.where(left, entry, -1)
            self.head[rows[used]] += 1


def _lowest_in_group(ranks, prunable, rows, grown, m: int) -> torch.Tensor:
    """For N:M, each row's kept weight ranked lowest in its grown weight's group (so every group keeps N);
    a group with none left yields a weight that is not prunable, and the swap is refused."""
    group = (grown // m * m)[:, None] + torch.arange(m, device=grown.device)
    in_rows = rows[:, None]
    candidates = torch.where(prunable[in_rows, group], ranks[in_rows, group], torch.inf)
    return group.gather(1, candidates.argmin(dim=1, keepdim=True)).squeeze(1)


def _relative(error: torch.Tensor, effect: torch.Tensor) -> float:
    """``||e|| / ||W mu||``: the error of the expected output relative to the dense expected output."""
    dense = effect.sum(dim=1).norm().item()
    return error.norm().item() / dense if dense else 0.0


def dsnot_refines(kind: str, skip: str) -> bool:
    """Whether ``--dsnot-skip`` lets DSnoT refine a linear of this kind (``layouts.KINDS``): the reference
    skips the MLP by default, meaning every linear outside attention (experts and shared experts too)."""
    if skip == DSnoTSkip.MLP:
        return kind == "attention"
    return skip == DSnoTSkip.NONE or kind != "attention"
