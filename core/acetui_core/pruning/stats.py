"""Streaming per-input-column statistics of a linear layer's calibration inputs, filled by a hook."""

from __future__ import annotations

import functools
import logging

import torch

from acetui_core.basics.choices import VarpScale
from acetui_core.run.records import ActStats, Spread

# --varp-form inverse: (x/s)^2 is clamped to at most this before 1/(1 - (x/s)^2), so one activation
# adds at most 1/(1 - 0.99) = 100 to a column's sum (the series diverges at |x/s| = 1, which max scaling
# reaches at the largest activation and no scaling exceeds everywhere).
INVERSE_CLAMP = 0.99

log = logging.getLogger(__name__)


@functools.cache
def _fused_moments():
    """``acetui_core.pruning.fusedsums.column_moments`` once it has given the eager sums' values on a small
    CUDA tensor, else None (no Triton, as in CPU builds of PyTorch, or a Triton that cannot build its kernel
    on this machine): the eager sums then do the work, a little slower, with the same results."""
    try:
        from acetui_core.pruning.fusedsums import column_moments

        x = torch.linspace(-3, 3, 40 * 70, device="cuda").reshape(40, 70).to(torch.bfloat16)
        fused, eager = column_moments(x), ColumnStats.eager_sums(x)[:4]
        if all(torch.allclose(a, b, rtol=1e-12, atol=0) for a, b in zip(fused, eager, strict=True)):
            return column_moments
        log.warning("The fused statistics kernel disagrees with the eager sums; using the eager sums.")
    except Exception as error:  # ImportError, or Triton's compiler failing: either way the eager sums serve
        log.warning("The fused statistics kernel cannot run here (%s); using the eager sums.", error)
    return None


class ColumnStats:
    """Accumulates ``s_j = sum_t x_tj`` (for DSnoT), ``sq_j = sum_t x_tj^2``, ``q_j = sum_t x_tj^4``, the
    token count ``T`` and the largest ``x^2`` of the whole input.

    Accumulators are float64 whatever the model's dtype (``x^4`` overflows half precision), and so is each
    batch's sum: float32 sums round differently when the same tokens come in other batches, which moved a
    perplexity from 445.96 to 448.59 when only the batch size changed. The properties a score reads are
    float32, rounded once from the float64 totals, so the same tokens give the same statistics, and the
    same mask, whatever the batch size, streaming mode or device. With ``hessian=True`` it also accumulates ``X^T X``, for SparseGPT, ``--update obs`` and output
    fidelity. With an ``inverse_scale`` ``s`` it also accumulates ``sum_t 1/(1 - min((x_tj/s)^2,
    INVERSE_CLAMP))`` for ``--varp-form inverse``.
    """

    def __init__(self, d_in: int, device: torch.device, hessian: bool = False, inverse_scale: float | None = None):
        self.s = torch.zeros(d_in, dtype=torch.float64, device=device)
        self.sq = torch.zeros(d_in, dtype=torch.float64, device=device)
        self.q = torch.zeros(d_in, dtype=torch.float64, device=device)
        self.x2_max = torch.zeros((), dtype=torch.float64, device=device)
        self.tokens = 0
        self.xtx = torch.zeros(d_in, d_in, dtype=torch.float64, device=device) if hessian else None
        self.inverse_scale = inverse_scale
        self.inverse = torch.zeros(d_in, dtype=torch.float64, device=device) if inverse_scale is not None else None

    @staticmethod
    def column_sums(x: torch.Tensor, gram: bool = False) -> tuple:
        """``(sum_t x, sum_t x^2, sum_t x^4, max x^2, T, X^T X or None)`` of one batch of inputs, any
        leading shape: on a CUDA device in one fused kernel where Triton can build it, else eagerly."""
        x = x.detach().reshape(-1, x.shape[-1])
        fused = _fused_moments() if x.is_cuda and not gram and x.shape[0] > 0 else None
        if fused is not None:  # one read of x instead of a float64 copy and five passes over it
            return (*fused(x), x.shape[0], None)
        return ColumnStats.eager_sums(x, gram)

    @staticmethod
    def eager_sums(x: torch.Tensor, gram: bool = False) -> tuple:
        """``column_sums`` of a 2-D batch with PyTorch's own operations."""
        # One float64 copy, squared in place twice: the same values as x * x and x2 * x2 (the sums equal
        # to the bit) without two more batch-sized float64 tensors, which took 40% of the time.
        x = x.to(torch.float64, copy=True)  # never square the model's tensor
        s, xtx = x.sum(dim=0), x.t() @ x if gram else None
        x.mul_(x)
        sq, x2_max = x.sum(dim=0), x.amax()
        x.mul_(x)
        return s, sq, x.sum(dim=0), x2_max, x.shape[0], xtx

    def add(self, x: torch.Tensor, sums: tuple | None = None) -> None:
        """Accumulate one batch; ``sums`` are its ``column_sums`` when already computed for a linear
        that shares this input (q/k/v, gate/up): they then share one ``X^T X`` product too."""
        s, sq, q, x2_max, tokens, gram = sums if sums is not None else self.column_sums(x, gram=self.xtx is not None)
        self.s += s
        self.sq += sq
        self.q += q
        torch.maximum(self.x2_max, x2_max, out=self.x2_max)
        self.tokens += tokens
        if self.xtx is not None:
            self.xtx += gram
        if self.inverse is not None:
            x = x.detach().reshape(-1, x.shape[-1]).double()
            scaled = (x / float(self.inverse_scale or 1.0)).square_().clamp_(max=INVERSE_CLAMP)
            self.inverse += (1 / (1 - scaled)).sum(dim=0)

    def is_finite(self) -> bool:
        return bool(torch.isfinite(self.sq).all() and torch.isfinite(self.q).all())

    @property
    def norm(self) -> torch.Tensor:
        """``||X_j||_2`` over all calibration tokens."""
        return self.sq.sqrt().float()

    @property
    def e2(self) -> torch.Tensor:
        return (self.sq / self.tokens).float()

    @property
    def e4(self) -> torch.Tensor:
        return (self.q / self.tokens).float()

    @property
    def variance(self) -> torch.Tensor:
        """``Var[x_j] = E[x^2] - E[x]^2`` per column, in float64 (the difference of two close numbers)."""
        mean = self.s / self.tokens
        return (self.sq / self.tokens - mean * mean).clamp_min(0)

    def scale(self, kind: str) -> float:
        """VarP's activation scale ``s`` of this input (``--varp-scale``): 1, the RMS over every entry of
        ``X``, or the largest ``|x|``."""
        if kind == VarpScale.RMS:
            value = (self.sq.sum() / (self.tokens * self.sq.numel())).sqrt().item()
        elif kind == VarpScale.MAX:
            value = self.x2_max.sqrt().item()
        else:
            return 1.0
        return value if value > 0 else 1.0  # an all-zero input: nothing to scale

    @property
    def inverse_mean(self) -> torch.Tensor:
        """``E[1/(1 - (x/s)^2)]`` per column (``--varp-form inverse``)."""
        assert self.inverse is not None, "ColumnStats(inverse_scale=s) sums the inverse series"
        return (self.inverse / self.tokens).float()

    @property
    def hessian(self) -> torch.Tensor:
        """SparseGPT's ``H = 2/T X^T X`` (its scale cancels in OBS; the 1% damping is relative)."""
        assert self.xtx is not None, "ColumnStats(hessian=True) keeps X^T X"
        return self.xtx.float().mul_(2 / self.tokens)  # one float32 copy, not a float64 one first

    def summary(self) -> ActStats:
        """min/median/max over columns of ``E[x^2]`` and ``Var[x^2] = E[x^4] - E[x^2]^2``."""

        def spread(values: torch.Tensor) -> Spread:
            values = values.double().cpu()
            return Spread(min=values.min().item(), median=values.median().item(), max=values.max().item())

        e2, e4 = self.sq / self.tokens, self.q / self.tokens
        return ActStats(x2_mean=spread(e2), x2_var=spread((e4 - e2**2).clamp_min(0)))
