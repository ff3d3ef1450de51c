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
    flat = scores.detach().flatten()
    stride = max(1, flat.numel() // SAMPLE)
    values = flat[::stride].float()
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
        pruned_counts = torch.histc(data[pruned.flatten()[::stride]], bins, lo, hi).long().tolist()
    edges = torch.linspace(lo, hi, bins + 1, dtype=torch.float64)
    edges = 10**edges if log else edges
    return Histogram(
        edges=edges.tolist(), counts=counts.tolist(), threshold=threshold, log=log, stride=stride, pruned=pruned_counts
    )
