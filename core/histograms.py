"""Compact score histograms, stored per linear so plots can be drawn later without the model."""

from __future__ import annotations

import torch

from core.events import Histogram

BINS = 32
LOG_SPAN = 1e3  # scores spanning more than three decades get log-spaced bins


def histogram(scores: torch.Tensor, threshold: float | None, bins: int = BINS) -> Histogram:
    values = scores.detach().flatten().float().cpu()
    positive = values[values > 0]
    low = positive.min().item() if positive.numel() else 0.0
    high = values.max().item()
    log = positive.numel() > 0 and high / low > LOG_SPAN
    if log:
        edges = torch.logspace(torch.log10(torch.tensor(low)), torch.log10(torch.tensor(high)), bins + 1)
    else:
        edges = torch.linspace(values.min().item(), high if high > values.min().item() else high + 1, bins + 1)
    # bucketize puts each value in the bin whose right edge bounds it; clamp the ends into the first/last bin
    index = (torch.bucketize(values.clamp(edges[0], edges[-1]), edges, right=True) - 1).clamp(0, bins - 1)
    counts = torch.bincount(index, minlength=bins)
    return Histogram(edges=edges.tolist(), counts=counts.tolist(), threshold=threshold, log=log)
