"""Output fidelity (``--fidelity``): how close the pruned outputs stay to the dense ones over the
calibration tokens, as the cosine of the two output matrices and the relative L2 error
``||Y - Y'|| / ||Y||`` (``acetui_core.run.records.Fidelity``).

Nothing keeps outputs: a linear's numbers come from the Gram matrix ``G = X^T X`` of its inputs
(``||WX||^2 = sum(W G * W)``), shared by the linears fed the same tensor; a layer's from running sums
of products, batch by batch. Sums are float64.
"""

from __future__ import annotations

import math

import torch

from acetui_core.run.records import Fidelity


def _fidelity(dense_sq: float, pruned_sq: float, dot: float, diff_sq: float) -> Fidelity:
    if dense_sq <= 0:  # no signal at all (inputs of zeros): nothing was lost
        return Fidelity(cosine=1.0, rel_error=0.0)
    cosine = dot / math.sqrt(dense_sq * pruned_sq) if pruned_sq > 0 else 0.0
    return Fidelity(cosine=cosine, rel_error=math.sqrt(max(diff_sq, 0.0) / dense_sq))


def linear_fidelity(dense: torch.Tensor, pruned: torch.Tensor, gram: torch.Tensor) -> Fidelity:
    """Fidelity of ``pruned X`` to ``dense X`` for weights ``(d_out, d_in)`` and ``gram = X^T X``.

    The error is computed from ``D = W - W'`` directly (``||DX||^2 = sum(D G * D)``), not as a
    difference of large norms, so a small error keeps its digits."""
    dense, pruned = dense.to(gram.dtype), pruned.to(gram.dtype)  # the Gram matrix's precision (float64 sums)
    removed = dense - pruned
    dense_g, removed_g = dense @ gram, removed @ gram
    dense_sq = torch.sum(dense_g.double() * dense.double()).item()
    cross = torch.sum(dense_g.double() * removed.double()).item()  # <WX, DX>
    diff_sq = torch.sum(removed_g.double() * removed.double()).item()
    return _fidelity(dense_sq, dense_sq - 2 * cross + diff_sq, dense_sq - cross, diff_sq)


class OutputAgreement:
    """Running sums over batches of dense and pruned outputs of the same inputs."""

    def __init__(self):
        self.dense_sq = self.pruned_sq = self.dot = self.diff_sq = 0.0

    def add(self, dense: torch.Tensor, pruned: torch.Tensor) -> None:
        dense, pruned = dense.double(), pruned.double()
        self.dense_sq += torch.sum(dense * dense).item()
        self.pruned_sq += torch.sum(pruned * pruned).item()
        self.dot += torch.sum(dense * pruned).item()
        self.diff_sq += torch.sum((dense - pruned) ** 2).item()

    def result(self) -> Fidelity:
        return _fidelity(self.dense_sq, self.pruned_sq, self.dot, self.diff_sq)
