"""RIA's channel permutation for N:M sparsity (Zhang et al., ICLR 2024, "Plug-and-Play", section 3.3).

An N:M mask keeps the N highest scores of each run of M consecutive inputs, so which inputs share a run
decides how much score survives. Reordering the input channels (the columns of ``W``, one order for all
rows) before choosing the mask can keep more: ``greedy`` deals the channels, sorted by their total
score, into the groups so that every group gets one channel of each score quantile (RIA's heuristic
reallocation); ``lsa`` then improves that order one slot at a time, as RIA's code does (one sweep over
the M slots): for slot ``s``, the channels sitting in slot ``s`` of the groups are reassigned to groups
by a linear sum assignment (``scipy.optimize.linear_sum_assignment``) that maximizes the retained score.
As in RIA's code (``prune_ria`` with ``--reallocation``), every step is applied, even a reallocation
that keeps less score than the original order; ``guard`` (``--permute-guard``, a variant) keeps a step
only where it keeps more.
More sweeps gain little (on a random 576 x 1536 matrix at 2:4: 0.8740 of the score kept after one,
0.8753 after two) for as much time again.

A permutation ``perm`` means: column ``k`` of the reordered matrix is input ``perm[k]`` of the original,
and the N:M groups are runs of ``M`` consecutive columns of ``W[:, perm]``. Every function here is pure
and works on scores of shape ``(d_out, d_in)``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from acetui_core.basics.choices import Permute
from acetui_core.basics.errors import UserError
from acetui_core.scores.masks import row_slices
from acetui_core.scores.sparsity import Sparsity

PERMUTATIONS_FILE = "permutations.json"  # beside a --save checkpoint (docs/methods.md)


def retained_fraction(scores: torch.Tensor, pruned: torch.Tensor) -> float:
    """Kept score over total score (the quantity the permutation maximizes); 1 when every score is 0."""
    kept, total = kept_and_total(scores, pruned)
    return kept / total if total else 1.0


def kept_and_total(scores: torch.Tensor, pruned: torch.Tensor) -> tuple[float, float]:
    """The score a mask keeps and the whole score, summed in float64."""
    total = kept = 0.0
    for rows in row_slices(scores):  # float64 copies of a slice, not of the whole matrix
        part = scores[rows].double()
        total += part.sum().item()
        kept += part.masked_fill_(pruned[rows], 0).sum().item()
    return kept, total


def _kept_score(scores: torch.Tensor, n: int, m: int) -> float:
    """The total score an N:M mask keeps with the columns in their given order."""
    groups = scores.reshape(scores.shape[0], -1, m).double()
    return groups.topk(n, dim=-1).values.sum().item()


def channel_permutation(scores: torch.Tensor, n: int, m: int, how: str, guard: bool = False) -> torch.Tensor:
    """The input order (a permutation of ``range(d_in)``) in which the N:M groups are taken: ``greedy``
    (RIA's reallocation) or ``lsa`` (which starts from greedy's order), as RIA's code applies them; with
    ``guard``, a step that would not keep more score than the order before it is skipped, so neither
    keeps less than the original order."""
    order = _reallocate(scores, m)
    if guard and _kept_score(scores[:, order], n, m) < _kept_score(scores, n, m):
        order = torch.arange(scores.shape[1], device=scores.device)  # the original order keeps more
    if how == Permute.LSA:
        order = _assign(scores, n, m, order, guard)
    return order


def _reallocate(scores: torch.Tensor, m: int) -> torch.Tensor:
    """RIA's heuristic channel reallocation: sort the channels by their summed score and fill slot ``s``
    of every group with the ``s``-th quantile of them, in alternating directions, so that a group with
    a strong channel in one slot gets a weaker one in the next."""
    ranked = torch.sort(scores.double().sum(dim=0), stable=True).indices
    groups = scores.shape[1] // m
    order = torch.empty_like(ranked)
    for slot in range(m):
        quantile = ranked[slot * groups : (slot + 1) * groups]
        order[slot::m] = quantile.flip(0) if slot % 2 else quantile
    return order


def _assign(scores: torch.Tensor, n: int, m: int, order: torch.Tensor, guard: bool) -> torch.Tensor:
    """One linear sum assignment per slot, each applied as RIA's code applies it; with ``guard``, only
    when it keeps more score, checked exactly (the assignment is optimal for its slot, so unguarded it
    keeps less only through rounding in the gains, and it may move channels where it merely ties)."""
    from scipy.optimize import linear_sum_assignment  # imported on use: most runs never permute

    groups = scores.shape[1] // m
    starts = torch.arange(groups, device=scores.device) * m
    kept = _kept_score(scores[:, order], n, m) if guard else None
    for slot in range(m):
        gain = _slot_gain(scores[:, order].reshape(scores.shape[0], groups, m), n, slot)
        _, target = linear_sum_assignment(gain.cpu().numpy(), maximize=True)
        moved = order.clone()
        moved[torch.as_tensor(target, device=scores.device) * m + slot] = order[starts + slot]
        if kept is not None:  # the guard: a step that keeps no more score is skipped
            score = _kept_score(scores[:, moved], n, m)
            if score <= kept:
                continue
            kept = score
        order = moved  # slot s of group i went to group target[i]
    return order


def _slot_gain(grouped: torch.Tensor, n: int, slot: int) -> torch.Tensor:
    """``gain[i, j]``: the score group ``j`` keeps beyond the top ``n`` of its other ``m - 1`` channels
    when slot ``slot`` holds the channel now in slot ``slot`` of group ``i``. With ``t`` the ``n``-th
    highest of the others, a newcomer ``x`` adds ``max(0, x - t)`` per row: it displaces ``t`` when
    larger. The others' own top ``n`` is the same for every newcomer, so it is left out. Summed over the
    rows, ``max(0, x - t) = (x - t + |x - t|) / 2`` is a difference of sums plus an L1 distance between
    columns (``torch.cdist``, 8x faster than forming every difference)."""
    grouped = grouped.double()
    others = torch.cat([grouped[..., :slot], grouped[..., slot + 1 :]], dim=-1)
    cutoff = others.topk(n, dim=-1).values[..., -1].T.contiguous()  # (groups, d_out)
    newcomer = grouped[..., slot].T.contiguous()  # (groups, d_out)
    distance = torch.cdist(newcomer[None], cutoff[None], p=1)[0]
    return (newcomer.sum(dim=1)[:, None] - cutoff.sum(dim=1)[None, :] + distance) / 2


def write_permutations(folder: str, sparsity: Sparsity, permutations: dict[str, list[int]]) -> None:
    """The sidecar of a ``--save`` checkpoint pruned with ``--permute``. The weights are saved in their
    original input order (they compute what was evaluated, and load with ``from_pretrained``); an engine
    that runs the N:M pattern on its own kernels needs, per linear, the order in which the inputs form
    groups: ``W[:, order]`` is N:M, and ``y = W[:, order] @ x[order]``."""
    content = {
        "format": "acetui channel permutations 1",
        "pattern": str(sparsity),
        "meaning": "W[:, order] is N:M in runs of M consecutive columns; y = W[:, order] @ x[order]",
        "order": permutations,
    }
    path = Path(folder) / PERMUTATIONS_FILE
    try:
        path.write_text(json.dumps(content))
    except OSError as error:
        raise UserError(
            f"The pruned model is saved in {folder}, but its channel permutations could not be written to "
            f"{path} ({error.strerror or error})."
        ) from None
