"""Pruning scores, one pure function each (higher score = keep), and the registry of methods.

Formulas are those fixed in ACE.md. ``W`` is float32 ``(d_out, d_in)``; ``stats`` holds the
per-input-column accumulators of the calibration activations (``acetui_core.stats.ColumnStats``).
Scaling: ``||X_j||_2`` is the plain L2 norm over all T calibration tokens (no 1/N); VarP's
``E[x^2]``, ``E[x^4]`` are per-token means. Multiplicative per-layer constants never change a
ranking, so only VarP's additive ``1 +`` depends on that choice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from acetui_core.errors import UserError


def magnitude(W, stats, opts):
    return W.abs()


def wanda(W, stats, opts):
    return W.abs() * stats.norm[None, :]


def ria(W, stats, opts):
    A = W.abs()
    relative = A / A.sum(dim=0, keepdim=True) + A / A.sum(dim=1, keepdim=True)
    return relative * stats.norm[None, :] ** opts.ria_alpha


def cosine_factors(W):
    """``C_ij = |W_ij| / sqrt(mean_i W_ij^2) * sqrt(sum_j W_ij^2)`` (relative cosine-similarity loss) as
    ``|W_ij| * row_norm_i / column_rms_j``. Returns ``W^2``, ``row_norm`` (d_out, 1) and ``column_rms``
    (1, d_in), so the scores below multiply one matrix by a row and a column vector instead of building C."""
    W2 = W * W
    return W2, W2.sum(dim=1, keepdim=True).sqrt(), W2.mean(dim=0, keepdim=True).sqrt()


def variance_term(stats):
    """``V_j = 1 + E[x^2] + E[x^4]``: the truncated series of the paper's ``E[1/(1-x^2)]``."""
    return 1 + stats.e2 + stats.e4


def _per_column(numerator, column_rms):
    """``numerator_j / column_rms_j``, with 0 for an all-zero column (whose weights cost nothing to prune)."""
    return (numerator / column_rms).nan_to_num(0.0, posinf=0.0)


def cosp(W, stats, opts):
    """``|W_ij| * ||X_j|| * C_ij = W_ij^2 * row_norm_i * ||X_j|| / column_rms_j``."""
    W2, row_norm, column_rms = cosine_factors(W)
    return W2.mul_(row_norm).mul_(_per_column(stats.norm, column_rms))


def varp(W, stats, opts):
    """``|W_ij| * V_j`` (``|W_ij|^2 * V_j`` with ``--squared-weight``)."""
    lead = W * W if opts.squared_weight else W.abs()
    return lead.mul_(variance_term(stats))


def ace(W, stats, opts):
    """CosP+VarP: ``|W_ij| * V_j * C_ij = W_ij^2 * row_norm_i * V_j / column_rms_j`` (``|W_ij|^3 ...``
    with ``--squared-weight``)."""
    W2, row_norm, column_rms = cosine_factors(W)
    lead = W2.mul_(W.abs()) if opts.squared_weight else W2
    return lead.mul_(row_norm).mul_(_per_column(variance_term(stats), column_rms))


@dataclass(frozen=True)
class Method:
    name: str
    paper_name: str
    description: str
    score: Callable | None  # None: not a score-then-mask method (SparseGPT solves its own update)
    needs_activations: bool = True


METHODS: dict[str, Method] = {
    m.name: m
    for m in [
        Method(
            "magnitude", "Magnitude", "|W|: weight magnitude, no calibration data", magnitude, needs_activations=False
        ),
        Method("wanda", "Wanda", "|W| * ||X_j||: weight times input-activation norm (Sun et al.)", wanda),
        Method(
            "ria",
            "RIA",
            "relative importance times ||X_j||^0.5 (Zhang et al.; its code competes per layer: --group layer)",
            ria,
        ),
        Method("sparsegpt", "SparseGPT", "OBS weight reconstruction with the Hessian X^T X (Frantar & Alistarh)", None),
        Method("cosp", "CosP", "|W| * ||X_j|| * C: activation cosine-similarity loss (ACE)", cosp),
        Method("varp", "VarP", "|W| * (1 + E[x^2] + E[x^4]): activation variance (ACE)", varp),
        Method("ace", "CosP+VarP", "|W| * V_j * C: CosP+VarP, the paper's combination (ACE)", ace),
    ]
}


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise UserError(f"Unknown method '{name}'; choose one of: {', '.join(METHODS)}.") from None
