"""Pruning scores, one pure function each (higher score = keep), and the registry of methods.

Formulas are those fixed in ACE.md. ``W`` is float32 ``(d_out, d_in)``; ``stats`` holds the
per-input-column accumulators of the calibration activations (``acetui_core.pruning.stats.ColumnStats``).
Scaling: ``||X_j||_2`` is the plain L2 norm over all T calibration tokens (no 1/N); VarP's
``E[x^2]``, ``E[x^4]`` are per-token means. Multiplicative per-layer constants never change a
ranking, so only VarP's additive ``1 +`` depends on that choice.
"""

from __future__ import annotations

from acetui_core.basics.choices import SparsityGroup, VarpForm, VarpScale
from acetui_core.basics.errors import UserError
from acetui_core.scores.method import SCORE_OPTIONS, VARP_OPTIONS, Method
from acetui_core.scores.sparsegpt import mask_and_update


def magnitude(W, stats, opts):
    return W.abs()


def wanda(W, stats, opts):
    return W.abs().mul_(stats.norm[None, :])  # in place: no second matrix-sized temporary


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


def variance_term(stats, opts):
    """``V_j``. By default ``1 + E[x^2] + E[x^4]``, the truncated series of the paper's ``E[1/(1-x^2)]``.
    ``--varp-scale rms|max`` takes the moments of ``x / s``, ``s`` the RMS or max ``|x|`` of the linear's
    whole input; ``--varp-form inverse`` is the paper's ``E[1/(1-x^2)]`` on those scaled activations,
    accumulated while gathering (``ColumnStats.inverse_mean``, clamped there)."""
    if opts.varp_form == VarpForm.INVERSE:
        return stats.inverse_mean
    if opts.varp_scale == VarpScale.NONE:
        return 1 + stats.e2 + stats.e4
    s2 = stats.scale(opts.varp_scale) ** 2
    return 1 + stats.e2 / s2 + stats.e4 / (s2 * s2)


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
    return lead.mul_(variance_term(stats, opts))


def ace(W, stats, opts):
    """CosP+VarP: ``|W_ij| * V_j * C_ij = W_ij^2 * row_norm_i * V_j / column_rms_j`` (``|W_ij|^3 ...``
    with ``--squared-weight``)."""
    W2, row_norm, column_rms = cosine_factors(W)
    lead = W2.mul_(W.abs()) if opts.squared_weight else W2
    return lead.mul_(row_norm).mul_(_per_column(variance_term(stats, opts), column_rms))


def wanda_varp(W, stats, opts):
    """``|W_ij| * ||X_j|| * V_j``: Wanda's score times VarP's variance term."""
    return wanda(W, stats, opts).mul_(variance_term(stats, opts))


def ria_varp(W, stats, opts):
    """RIA's score times VarP's variance term ``V_j``."""
    return ria(W, stats, opts).mul_(variance_term(stats, opts))


METHODS: dict[str, Method] = {
    m.name: m
    for m in [
        Method(
            "magnitude",
            "Magnitude",
            "|W|: weight magnitude, no calibration data (per layer as Wanda's code; --group row: per row)",
            magnitude,
            reads=frozenset(),
            needs_activations=False,
            row_local=True,
            score_bytes=4,
            group=SparsityGroup.LAYER,
        ),
        Method(
            "wanda",
            "Wanda",
            "|W| * ||X_j||: weight times input-activation norm (Sun et al.)",
            wanda,
            reads=frozenset(),
            row_local=True,
            score_bytes=4,
        ),
        Method(
            "ria",
            "RIA",
            "relative importance times ||X_j||^0.5 (Zhang et al.; per layer as its code; --group row: per row)",
            ria,
            reads=frozenset({"ria_alpha"}),
            group=SparsityGroup.LAYER,
        ),
        Method(
            "sparsegpt",
            "SparseGPT",
            "OBS weight reconstruction with the Hessian X^T X (Frantar & Alistarh)",
            None,
            reads=frozenset(),
            mask_and_update=mask_and_update,
        ),
        Method(
            "cosp",
            "CosP",
            "|W| * ||X_j|| * C: activation cosine-similarity loss (ACE)",
            cosp,
            reads=frozenset(),
            score_bytes=4,
        ),
        Method(
            "varp",
            "VarP",
            "|W| * V_j, V_j = 1 + E[x^2] + E[x^4]: activation variance (ACE)",
            varp,
            reads=VARP_OPTIONS | {"squared_weight"},
            row_local=True,
            score_bytes=4,
        ),
        Method(
            "ace",
            "CosP+VarP",
            "|W| * V_j * C: CosP+VarP, the paper's combination (ACE)",
            ace,
            reads=VARP_OPTIONS | {"squared_weight"},
            score_bytes=4,
        ),
        Method(
            "wanda+varp",
            "Wanda+VarP",
            "|W| * ||X_j|| * V_j: Wanda times VarP's V_j",
            wanda_varp,
            reads=VARP_OPTIONS,
            row_local=True,
            score_bytes=4,
        ),
        Method(
            "ria+varp",
            "RIA+VarP",
            "RIA's score times VarP's V_j",
            ria_varp,
            reads=VARP_OPTIONS | {"ria_alpha"},
        ),
    ]
}


def reads_calibration(config) -> bool:
    """Whether a run reads calibration data: its method's activations (``Method.calibrated``), or the
    routed experts' scores that ``--expert-sparsity`` removes experts by."""
    return get_method(config.method).calibrated(config) or bool(config.expert_sparsity)


def unread_settings(config, experts: bool) -> frozenset[str]:
    """The settings a run of ``config`` never reads, which cannot change its numbers: the score options its
    method does not read (``Method.reads``), and ``--moe-calibration`` unless the run gathers experts'
    activations (``experts``: the model has routed experts, and ``--sparsity`` is not 0: with no mask,
    ``--expert-sparsity`` scores the experts on their routed tokens alone), and ``--expert-score`` unless
    ``--expert-sparsity`` removes experts. A plug-in, importable here or not, is handed every option and
    reads activations."""
    method = METHODS.get(config.method)
    masks = config.sparsity_spec.fraction > 0
    gathers_experts = experts and masks and (method is None or method.calibrated(config))
    unread = SCORE_OPTIONS - method.reads if method is not None else frozenset()
    unread |= frozenset() if config.expert_sparsity else {"expert_score"}  # no expert is removed: none ranked
    return unread if gathers_experts else unread | {"moe_calibration"}


def may_read_calibration(config) -> bool:
    """``reads_calibration`` for a listing: True where the method cannot be imported here (a plug-in of
    another environment), whose calibration is then named rather than hidden."""
    try:
        return reads_calibration(config)
    except UserError:
        return True


def get_method(name: str) -> Method:
    """A built-in method, an ``acetui.methods`` entry point, or a plug-in reference (``module:function``,
    ``path/file.py:function``)."""
    if name in METHODS:
        return METHODS[name]
    from acetui_core.scores.plugins import plugin_method

    return plugin_method(name, builtin=tuple(METHODS))


def reference_group(method: str) -> str:
    """Which weights compete for unstructured sparsity when ``--group`` is not given: those its reference
    code compares (RIA's and magnitude's in Wanda's code: the whole layer); per output row, Wanda's and the ACE paper's, for the others
    and for a plug-in (not imported here: a name is enough)."""
    return METHODS[method].group if method in METHODS else SparsityGroup.ROW


def paper_name(method: str) -> str:
    """The paper's name of a built-in method; a plug-in's function name (or entry-point name)."""
    if method in METHODS:
        return METHODS[method].paper_name
    return method.rsplit(":", 1)[-1]
