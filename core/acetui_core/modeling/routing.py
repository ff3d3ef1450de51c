"""What enters each expert of a mixture-of-experts layer during calibration (``--moe-calibration``).

transformers' MoE blocks call their experts module as ``experts(hidden_states, top_k_index, top_k_weights)``
with the tokens flattened to ``(tokens, hidden)`` and the router's choice of ``k`` experts per token. A
forward pre-hook there sees both, so each expert's statistics come from the calibration pass itself:

- ``routed`` (the default): expert ``e``'s ``gate_up_proj`` (or ``up_proj``) sees the tokens the router sent
  to ``e``, and its ``down_proj`` sees what ``e`` makes of them (its gate applied), computed as transformers'
  own expert forward does (``batched_mm_experts_forward``).
- ``all``: every calibration token goes through every expert, as if each were a dense MLP.

Layouts with one ``nn.Linear`` per expert (remote code, transformers 4's ``block_sparse_moe.experts.<e>.w1``)
call each expert module with its routed tokens only, so a hook on its linears records ``routed`` as it is.
For ``all``, a hook on the block that holds the experts feeds every token of the block's input to each
expert module, and the routed calls the block then makes are not recorded.

An expert that receives fewer than ``MIN_EXPERT_TOKENS`` routed tokens has too few samples for its statistics
(a Hessian of rank below that, norms from a handful of tokens); its statistics are gathered again over every
token (``all``) for that expert alone, with a warning naming the layer, the expert and its token count, which
the run records.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from acetui_core.basics.choices import MoeCalibration
from acetui_core.modeling.layouts import FUSED_EXPERTS, Matrix, expert_parts
from acetui_core.run.experts import ExpertFallback, ExpertLoad

MIN_EXPERT_TOKENS = 16


def _linear(x: torch.Tensor, weight: torch.Tensor, transposed: bool) -> torch.Tensor:
    return x @ weight if transposed else F.linear(x, weight)


def expert_intermediate(experts: Any, expert: int, x: torch.Tensor) -> torch.Tensor:
    """What expert ``expert`` feeds its ``down_proj`` for inputs ``x``: its up (and gate) projection, bias,
    and gate or activation, in the order of transformers' ``batched_mm_experts_forward`` (``experts`` is
    transformers' experts module: typed loosely, its attributes come from ``use_experts_implementation``)."""
    first = "gate_up_proj" if experts.has_gate else "up_proj"
    out = _linear(x, getattr(experts, first)[expert], experts.is_transposed)
    if experts.has_bias:
        out = out + getattr(experts, f"{first}_bias")[expert]
    return experts._apply_gate(out) if experts.has_gate else experts.act_fn(out)


def expert_output(experts: Any, expert: int, x: torch.Tensor) -> torch.Tensor:
    """Expert ``expert``'s output for inputs ``x``, before the router's gate scales it (REAP's ``f_e(x)``)."""
    out = _linear(expert_intermediate(experts, expert, x), experts.down_proj[expert], experts.is_transposed)
    return out + experts.down_proj_bias[expert] if experts.has_bias else out


def _routed_rows(top_k_index: torch.Tensor, expert: int) -> torch.Tensor:
    return (top_k_index == expert).any(dim=-1).nonzero().squeeze(-1)


def is_expert_linear(matrix: Matrix) -> bool:
    """One expert's own ``nn.Linear`` (not a slice of a fused parameter): ``record_expert_inputs`` hooks it."""
    return matrix.param == "weight" and matrix.expert is not None


def _hook_expert_linears(layer: nn.Module, matrices: dict[str, Matrix], record, calibration: str) -> list:
    """The hooks of the one-linear-per-expert layouts (see the module's docstring)."""
    mine = {name: m for name, m in matrices.items() if is_expert_linear(m)}
    feeding = [calibration == MoeCalibration.ROUTED]  # whether the linears' hooks record what they see now
    handles = [
        m.owner.register_forward_pre_hook(lambda _, args, n=name: record(n, args[0]) if feeding[0] else None)
        for name, m in mine.items()
    ]
    if calibration != MoeCalibration.ALL:
        return handles
    blocks: dict[str, set[str]] = {}
    for block, _, expert in filter(None, map(expert_parts, mine)):  # every one of mine has its three parts
        blocks.setdefault(block, set()).add(expert)

    def feed_all(block, args, kwargs, experts):
        hidden = args[0] if args else kwargs["hidden_states"]
        flat = hidden.reshape(-1, hidden.shape[-1])
        feeding[0] = True
        try:
            for expert in sorted(experts):
                layer.get_submodule(expert)(flat)
        finally:
            feeding[0] = False

    for block, experts in blocks.items():
        handles.append(
            layer.get_submodule(block).register_forward_pre_hook(
                lambda m, a, k, e=experts: feed_all(m, a, k, e), with_kwargs=True
            )
        )
    return handles


@contextmanager
def record_expert_inputs(
    layer: nn.Module, matrices: dict[str, Matrix], record: Callable[[str, torch.Tensor | None], None], calibration: str
):
    """Hooks every experts module among ``matrices`` (fused, or one linear per expert) so that
    ``record(name, x)`` receives each expert's inputs (``None``: this batch sent a fused expert no token).
    Removed on exit."""
    by_module: dict[nn.Module, dict[int, dict[str, str]]] = {}
    for name, matrix in matrices.items():
        if matrix.param in FUSED_EXPERTS and matrix.expert is not None:
            by_module.setdefault(matrix.owner, {}).setdefault(matrix.expert, {})[matrix.param] = name

    def hook(module, args, kwargs, experts):
        values = [*args, *kwargs.values()]
        hidden, top_k_index = values[0], values[1]
        for expert, names in experts.items():
            x = hidden if calibration == MoeCalibration.ALL else hidden[_routed_rows(top_k_index, expert)]
            if x.shape[0] == 0:
                for name in names.values():
                    record(name, None)
                continue
            for param, name in names.items():
                if param != "down_proj":
                    record(name, x)
            if "down_proj" in names:
                record(names["down_proj"], expert_intermediate(module, expert, x))

    handles = [
        module.register_forward_pre_hook(lambda m, a, k, e=experts: hook(m, a, k, e), with_kwargs=True)
        for module, experts in by_module.items()
    ]
    handles += _hook_expert_linears(layer, matrices, record, calibration)
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def starved(matrices: dict[str, Matrix], tokens: dict[str, int]) -> dict[str, int]:
    """The experts' matrices (fused slices or per-expert linears) whose routed tokens fall under
    ``MIN_EXPERT_TOKENS``, with that count."""
    return {
        name: tokens.get(name, 0)
        for name, matrix in matrices.items()
        if matrix.expert is not None and tokens.get(name, 0) < MIN_EXPERT_TOKENS
    }


def expert_of(name: str) -> str:
    """``mlp.experts.3.down_proj`` -> ``mlp.experts.3``."""
    return name.rsplit(".", 1)[0]


def fallbacks(layer: int, hungry: dict[str, int]) -> list[ExpertFallback]:
    """One record per starved expert (``starved`` names its slices)."""
    experts = {expert_of(name): tokens for name, tokens in hungry.items()}
    return [ExpertFallback(layer, expert, tokens, MIN_EXPERT_TOKENS) for expert, tokens in experts.items()]


def expert_load(layer: int, matrices: dict[str, Matrix], tokens: dict[str, int]) -> list[ExpertLoad]:
    """Per experts module of the layer, the routed tokens of each expert (from its first projection's count)."""
    load: dict[str, dict[int, int]] = {}
    for name, matrix in matrices.items():
        if matrix.kind == "experts" and matrix.expert is not None and name in tokens:
            load.setdefault(expert_of(expert_of(name)), {}).setdefault(matrix.expert, tokens[name])
    return [ExpertLoad(layer, module, [counts[e] for e in sorted(counts)]) for module, counts in load.items()]
