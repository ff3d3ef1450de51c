"""A row-local score (its rows read only their row of the weight) made a slice of rows at a time
(``row_slices``), so that no whole float32 copy of a large linear's weight, and where each row is chosen
alone no whole matrix of its scores, is held: on the GPU each is 0.9 GiB for a 28672 x 8192 linear."""

from __future__ import annotations

from enum import Enum

import torch

from acetui_core.basics.choices import Permute, Refine, SparsityGroup
from acetui_core.modeling.layouts import weight_matrix
from acetui_core.pruning import histograms
from acetui_core.pruning.layerstats import LayerWork, check_finite, method_scores
from acetui_core.run.records import MaskChoice
from acetui_core.scores.masks import nm_mask, row_cutoff_mask, row_slices
from acetui_core.scores.method import Method
from acetui_core.scores.permute import kept_and_total
from acetui_core.scores.sparsity import Sparsity


class Scoring(Enum):
    """How a linear is scored and masked (``layerloop._prune_linear``), which sets its scratch (``plan``)."""

    MASK_IN_SLICES = "mask in slices"  # each row chosen alone: scores, selection and sample a slice at a time
    SCORES_IN_SLICES = "scores in slices"  # the whole scores compete (per layer, permuted): no float32 W copy
    WHOLE_WEIGHT = "whole weight"  # a float32 copy of W (a score reading all of W, an update, fidelity, DSnoT)


def scoring_path(method: Method, config, sparsity: Sparsity) -> Scoring:
    """Which way ``method`` scores and masks each linear of a run with ``config`` at ``sparsity``."""
    if not method.row_local or method.update(config) is not None or config.fidelity or config.refine != Refine.NONE:
        return Scoring.WHOLE_WEIGHT
    return Scoring.MASK_IN_SLICES if each_row_alone(config, sparsity) else Scoring.SCORES_IN_SLICES


def each_row_alone(config, sparsity: Sparsity) -> bool:
    """Whether each row's mask is chosen apart from the others' (per row, or N:M in the original order)."""
    return config.permute == Permute.NONE and (sparsity.is_nm or config.group == SparsityGroup.ROW)


def mask_in_slices(work: LayerWork, name, matrix, stats, sparsity) -> tuple:
    """A row-local score's mask where each row is chosen alone (per row, or N:M), with its cut-off, kept
    score and histogram, a slice of rows at a time (``row_slices``): the slices are scored, masked, summed
    and sampled in turn, so neither a whole float32 copy of the weight nor its whole scores are ever held
    (on the GPU, 0.9 GiB each for a 28672 x 8192 linear). The same mask and figures as from whole scores."""
    assert work.method.score is not None, "a row-local method scores"
    stored = weight_matrix(matrix)
    mask = torch.empty(stored.shape, dtype=torch.bool, device=stored.device)
    stride = histograms.sample_stride(stored.numel())
    cutoffs, values, pruned, kept, total = [], [], [], 0.0, 0.0
    for rows in row_slices(stored):
        W = check_finite(work.index, name, stored[rows].float())
        scores = method_scores(work.method, W, stats, work.config, f"layer {work.index} {name}")
        if sparsity.is_nm:
            mask[rows] = nm_mask(scores, sparsity.n, sparsity.m)[0]
        else:
            mask[rows], cutoff = row_cutoff_mask(scores, sparsity.ratio)
            cutoffs += [] if cutoff is None else [cutoff]
        part_kept, part_total = kept_and_total(scores, mask[rows])
        kept, total = kept + part_kept, total + part_total
        sample, sampled = histograms.sample_rows(scores, mask[rows], rows.start, stride)
        values.append(sample)
        pruned.append(sampled)
    threshold = torch.cat(cutoffs).median().item() if cutoffs else None
    choice = MaskChoice(retained=kept / total if total else 1.0)
    return mask, threshold, choice, histograms.sample_histogram(torch.cat(values), torch.cat(pruned), stride, threshold)


def scores_in_slices(index, name, matrix, stats, config, method) -> torch.Tensor:
    """A row-local method's scores, a slice of rows of the stored weight at a time (``row_slices``): only a
    slice is ever copied to float32."""
    stored = weight_matrix(matrix)
    scores = torch.empty(stored.shape, dtype=torch.float32, device=stored.device)
    for rows in row_slices(scores):
        W = check_finite(index, name, stored[rows].float())
        scores[rows] = method_scores(method, W, stats, config, f"layer {index} {name}")
    return scores
