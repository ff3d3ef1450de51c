"""Compact score histograms, stored per linear so plots can be drawn later without the model."""

from __future__ import annotations

import math

import torch

from acetui_core.run.records import Histogram

BINS = 32
LOG_SPAN = 1e3  # scores spanning more than three decades get log-spaced bins
SAMPLE = 1 << 16  # scores binned per linear: an evenly strided sample, so histograms stay off the critical path


def histogram(
    scores: torch.Tensor, threshold: float | None, pruned: torch.Tensor | None = None, bins: int = BINS
) -> Histogram:
    """Counts of an evenly strided sample of the scores (every ``stride``-th one) in ``bins`` bins;
    in log mode zeros fall into the first bin. With the mask (``pruned``, True = pruned) each bin also
    counts its pruned scores: under N:M, and per-row groups, a bin holds both, as no single threshold cuts."""
    stride = sample_stride(scores.numel())
    sampled = None if pruned is None else pruned.flatten()[::stride]
    return sample_histogram(scores.detach().flatten()[::stride], sampled, stride, threshold, bins)


def sample_stride(numel: int) -> int:
    """Every how many scores ``histogram`` samples one."""
    return max(1, numel // SAMPLE)


def sample_rows(scores: torch.Tensor, pruned: torch.Tensor, first_row: int, stride: int) -> tuple:
    """The part of a matrix's histogram sample (every ``stride``-th score of the whole flattened matrix)
    that falls in a slice of its rows starting at ``first_row``, with the slice's mask at those places.
    Copies: a strided view would keep the whole slice's scores alive while the next slices are scored."""
    start = -first_row * scores.shape[1] % stride
    return scores.flatten()[start::stride].clone(), pruned.flatten()[start::stride].clone()


def sample_histogram(
    values: torch.Tensor, pruned: torch.Tensor | None, stride: int, threshold: float | None, bins: int = BINS
) -> Histogram:
    """``histogram`` of an already drawn sample of the scores (and of the mask at the same places)."""
    values = values.float()
    top = values.max().item()
    low = values.masked_fill(values <= 0, float("inf")).min().item() if top > 0 else 0.0
    log = 0 < low < math.inf and top / low > LOG_SPAN
    if log:
        data, lo, hi = values.clamp_min(low).log10(), math.log10(low), math.log10(top)
    else:
        data, lo, hi = values, values.min().item(), top
        hi = hi if hi > lo else lo + 1
    counts = torch.histc(data, bins, lo, hi).long()
    pruned_counts = None
    if pruned is not None:
        pruned_counts = torch.histc(data[pruned], bins, lo, hi).long().tolist()
    edges = torch.linspace(lo, hi, bins + 1, dtype=torch.float64)
    edges = 10**edges if log else edges
    return Histogram(
        edges=edges.tolist(), counts=counts.tolist(), threshold=threshold, log=log, stride=stride, pruned=pruned_counts
    )
