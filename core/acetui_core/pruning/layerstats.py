"""What the layer loop reads of a decoder layer before it masks: each linear's calibration statistics
(one pass of the calibration inputs, routed per expert for a mixture of experts), its dense weight checked
finite, and its scores from the chosen metric or plug-in. Shared by the layer loop and OWL's pass."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from acetui_core.basics.choices import MoeCalibration, VarpForm, VarpScale
from acetui_core.basics.errors import UserError
from acetui_core.modeling.layouts import weight_matrix
from acetui_core.modeling.placement import StopForward, layer_forward
from acetui_core.modeling.routing import expert_load, fallbacks, is_expert_linear, record_expert_inputs, starved
from acetui_core.pruning.stats import ColumnStats
from acetui_core.run.experts import Experts
from acetui_core.scores.method import non_finite
from acetui_core.scores.plugins import check_scores

if TYPE_CHECKING:
    from acetui_core.modeling.models import Loaded
    from acetui_core.run.config import RunConfig
    from acetui_core.scores.method import Method


@torch.no_grad()  # with autograd on, the accumulators would keep every batch's activations alive
def gather_stats(
    layer,
    linears,
    inputs,
    device,
    hessian: bool = False,
    inverse_scales: dict | None = None,
    dense_outputs: list | None = None,
    moe_calibration: str = MoeCalibration.ROUTED,
) -> dict[str, ColumnStats]:
    """One pass of the calibration inputs through ``layer``, recording what enters every linear (an
    expert's slices: the tokens ``moe_calibration`` gives it, ``acetui_core.modeling.routing``).

    Linears fed the same tensor (q/k/v, gate/up) share one computation of its column sums. Once the
    last linear's input is recorded the pass stops: its output, and the rest of the layer, feed no
    linear of this layer (the pruned pass recomputes them), which saves that linear's matmul. Unless
    ``dense_outputs`` is a list (output fidelity): the pass then runs to the end and appends each batch's
    dense output to it, for the pruned pass to compare with and drop (at most one extra copy of the
    activations, which the pruned pass replaces as it goes)."""
    scales = inverse_scales or {}
    stats = {
        name: ColumnStats(weight_matrix(m).shape[1], device, hessian=hessian, inverse_scale=scales.get(name))
        for name, m in linears.items()
    }
    last = {"input": None, "sums": None}
    seen: set[str] = set()

    def record(name, x):
        if x is not None:  # None: an expert this batch sent no token
            if last["input"] is not x:
                last["input"], last["sums"] = x, ColumnStats.column_sums(x, gram=hessian)
            stats[name].add(x, last["sums"])
        seen.add(name)
        if len(seen) == len(linears) and dense_outputs is None:
            raise StopForward

    hooks = [
        m.owner.register_forward_pre_hook(lambda m, args, n=name: record(n, args[0]))
        for name, m in linears.items()
        if m.param == "weight" and not is_expert_linear(m)
    ]
    try:
        with record_expert_inputs(layer, linears, record, moe_calibration):
            for hidden, kwargs in inputs:
                seen.clear()
                with contextlib.suppress(StopForward):
                    out = layer_forward(layer, hidden, kwargs, device)
                    if dense_outputs is not None:
                        dense_outputs.append(out.to(hidden.device))
    finally:
        for h in hooks:
            h.remove()
        last.clear()
    return stats


@dataclass
class LayerWork:
    """One decoder layer's work in a run: the layer, the calibration inputs it sees and where it computes,
    and the run's model, settings and method. ``dense_outputs``: with ``--fidelity``, the list the
    statistics pass fills with the dense layer's outputs (``gather_stats``); ``experts``: a mixture of
    experts' token load and fallbacks, which the statistics pass adds to."""

    index: int
    layer: torch.nn.Module
    inputs: list
    loaded: Loaded
    config: RunConfig
    method: Method
    device: torch.device
    dense_outputs: list[torch.Tensor] | None = None
    experts: Experts | None = None


def layer_stats(work: LayerWork, linears: dict) -> dict[str, ColumnStats]:
    """Every linear's calibration statistics, checked finite. ``--varp-form inverse`` needs the scale of
    a linear's whole input before its ``E[1/(1 - (x/s)^2)]`` can be summed: with ``--varp-scale rms|max``
    a first pass measures it. An expert that the router starved (``acetui_core.modeling.routing``) is gathered
    again over every token."""
    config, index = work.config, work.index
    if not work.method.calibrated(config):
        return {}
    hessian = work.method.update(config) is not None or config.fidelity

    def gather(matrices, calibration, outputs=None):
        scales = None
        if config.varp_form == VarpForm.INVERSE:
            if config.varp_scale == VarpScale.NONE:
                scales = dict.fromkeys(matrices, 1.0)
            else:
                measured = gather_stats(work.layer, matrices, work.inputs, work.device, moe_calibration=calibration)
                scales = {name: s.scale(config.varp_scale) for name, s in measured.items()}
        return gather_stats(
            work.layer,
            matrices,
            work.inputs,
            work.device,
            hessian,
            scales,
            dense_outputs=outputs,
            moe_calibration=calibration,
        )

    stats = gather(linears, config.moe_calibration, work.dense_outputs)
    routed = {name: s.tokens for name, s in stats.items()}
    hungry = starved(linears, routed) if config.moe_calibration == MoeCalibration.ROUTED else {}
    if hungry:
        stats.update(gather({name: linears[name] for name in hungry}, MoeCalibration.ALL))
    if work.experts is not None:
        work.experts.load += expert_load(index, linears, routed)
        work.experts.fallbacks += fallbacks(index, hungry)
    for name, s in stats.items():
        if not s.is_finite():
            hint = "" if work.loaded.dtype == torch.float32 else " (try --dtype float32)"
            raise UserError(
                f"Calibration activations entering layer {index} {name} contain NaN or inf; "
                f"nothing was pruned there{hint}."
            )
    return stats


def dense_weight(index, name, matrix) -> torch.Tensor:
    return check_finite(index, name, weight_matrix(matrix).float())  # the weight itself when it is float32


def check_finite(index, name, W: torch.Tensor) -> torch.Tensor:
    """``W`` (a linear's weight, or a slice of its rows) when every value is finite."""
    if not torch.isfinite(W).all():
        raise UserError(
            f"The weights of layer {index} {name} contain NaN or inf; the checkpoint is damaged "
            f"and nothing was pruned there."
        )
    return W


def method_scores(method, W, stats, config, where: str) -> torch.Tensor:
    """``method``'s scores of ``W`` (a linear's weight, or a slice of its rows) at ``where``, every one a
    finite number: a NaN or inf would otherwise reach the mask's choice, and a torch error or a tie of
    infinite scores would be all the user saw."""
    scores = method.score(W, stats, config)  # a plug-in scores a copy of W (acetui_core.scores.plugins)
    if method.source != "built-in":
        check_scores(method, scores, W.shape, where)
        return scores.to(W.device)  # a plug-in may answer on another device than the weight's
    what = non_finite(scores)
    if what is not None:
        raise UserError(
            f"Method '{method.name}' gave {what} for {where}, so nothing was pruned there: {_cause(method, stats, config)}."
        )
    return scores


def _cause(method, stats, config) -> str:
    """Why a built-in's scores are not finite: where it reads --ria-alpha (RIA's ``||X_j||^alpha``), the
    power that took the linear's largest activation norm past float32's largest number, with the power
    from which it does; otherwise the two ways a formula leaves the finite numbers."""
    if "ria_alpha" in method.reads and stats is not None:
        largest = stats.norm.max().item()
        if largest > 1 and config.ria_alpha * math.log(largest) > _LOG_FLOAT32_MAX:
            return (
                f"this linear's largest activation norm, {largest:.4g}, to the power --ria-alpha "
                f"{config.ria_alpha:g} overflows float32 (it does from a power of "
                f"{_LOG_FLOAT32_MAX / math.log(largest):.3g}); give a smaller --ria-alpha"
            )
    return "its formula overflowed float32, or divided 0 by 0, on these weights and activations"


_LOG_FLOAT32_MAX = math.log(torch.finfo(torch.float32).max)  # 88.72: e to a larger power overflows float32
