"""The table of layouts: where a model keeps its decoder layers, which weights of a layer are projections to
prune, and which stay dense on purpose. The pipeline, the plan and the reports ask this module; none of them
branches on a family's name.

A projection is pruned as one 2-D matrix ``(d_out, d_in)``, whatever its storage:

- ``nn.Linear`` keeps ``(d_out, d_in)``; GPT-2's ``Conv1D`` keeps ``(d_in, d_out)``. A fused projection
  (GPT-NeoX's ``query_key_value``, Phi-3's ``gate_up_proj``) is one linear and scored as one.
- transformers 5 keeps a mixture-of-experts layer's experts as fused 3-D parameters ``[experts, ...]``
  (``experts.gate_up_proj``, ``experts.down_proj``; ``experts.up_proj`` without a gate). Each expert's
  slice is one matrix, named ``experts.<e>.<parameter>``, with its own statistics. The experts module's
  ``is_transposed`` (set by transformers' ``use_experts_implementation``) says which of the slice's two
  dimensions is the input: ``[d_out, d_in]`` when false, ``[d_in, d_out]`` (gpt-oss) when true.

Knowingly dense: the weights that pick or scale experts (a router ``gate`` or ``router``, Qwen2-MoE's
``shared_expert_gate``, DeepSeek's ``e_score_correction_bias``, a buffer), norms, biases and embeddings.
Any other weight of two or more dimensions inside a decoder layer is one this table does not know:
``check_layout`` stops the run with its name rather than report a sparsity that leaves it out, and after
each layer is pruned ``check_pruned`` counts the zeros every such weight really has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from acetui_core.basics.choices import SparsityScope
from acetui_core.basics.errors import UserError

SUPPORTED = (
    "the LLaMA family (LLaMA 1/2/3, Mistral, Qwen2/3, Gemma 2/3, SmolLM), OPT, GPT-2, GPT-NeoX/Pythia and the "
    "mixture-of-experts families of transformers (Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V3, gpt-oss, OLMoE...)"
)

# Where families keep their decoder layers: LLaMA-like and MoE, OPT, GPT-2, GPT-NeoX.
DECODER_PATHS = ("model.layers", "model.decoder.layers", "transformer.h", "gpt_neox.layers")

# Modules whose weights pick experts or scale their outputs: never pruned (a router's few rows decide
# where every token goes; Qwen2-MoE's one-row shared_expert_gate scales the shared expert).
ROUTING = ("gate", "router", "shared_expert_gate")

# The 3-D parameters of transformers' experts modules, one 2-D slice per expert.
FUSED_EXPERTS = ("gate_up_proj", "up_proj", "down_proj")

# What a projection is, for per-kind reports.
KINDS = ("attention", "mlp", "experts", "shared_experts")


@dataclass(eq=False)
class Matrix:
    """One prunable matrix of a decoder layer: a linear's weight, or one expert's slice of a fused
    parameter. Its tensor is looked up on every use: a streamed layer's parameters are replaced as the
    layer comes and goes."""

    name: str  # in the layer: "self_attn.q_proj", "mlp.experts.3.down_proj"
    kind: str  # one of KINDS
    owner: nn.Module
    param: str  # the owner's parameter: "weight", or a fused one such as "down_proj"
    expert: int | None = None  # the slice of a fused parameter, or the index of a per-expert linear
    transposed: bool = False  # stored (d_in, d_out): Conv1D, and fused experts with is_transposed

    @property
    def weight(self) -> torch.Tensor:
        """The matrix as stored (a view into the parameter)."""
        stored = getattr(self.owner, self.param).data
        return stored[self.expert] if stored.dim() == 3 else stored

    def matrix(self) -> torch.Tensor:
        """The matrix as ``(d_out, d_in)``: a view, written through."""
        return self.weight.t() if self.transposed else self.weight

    def write(self, W: torch.Tensor) -> None:
        self.matrix().copy_(W)

    @property
    def parameter(self) -> str:
        """The parameter's name in the layer, e.g. ``mlp.experts.down_proj`` for every expert's slice."""
        if self.param == "weight":
            return f"{self.name}.weight"
        return f"{self.name.rsplit('.', 2)[0]}.{self.param}"


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers, wherever the family keeps them."""
    for path in DECODER_PATHS:
        holder: Any = model
        for part in path.split("."):
            holder = getattr(holder, part, None)
            if holder is None:
                break
        if isinstance(holder, nn.ModuleList):
            return holder
    raise UserError(f"Model type '{architecture(model)}' is not supported; acetui prunes {SUPPORTED}.")


def architecture(model: nn.Module) -> str:
    return getattr(getattr(model, "config", None), "model_type", None) or type(model).__name__


def _kind(name: str) -> str:
    parts = name.split(".")
    if any(part.startswith("shared_expert") for part in parts):
        return "shared_experts"
    if "experts" in parts:
        return "experts"
    if any("attn" in part or "attention" in part for part in parts):
        return "attention"
    return "mlp"


def expert_parts(name: str) -> tuple[str, int, str] | None:
    """Where a per-expert linear sits: ``block_sparse_moe.experts.3.w1`` -> (``block_sparse_moe``, 3,
    ``block_sparse_moe.experts.3``), its experts block, its expert's number and module; None outside one."""
    parts = name.split(".")
    if "experts" in parts:
        at = parts.index("experts")
        if at + 1 < len(parts) and parts[at + 1].isdigit():
            return ".".join(parts[:at]), int(parts[at + 1]), ".".join(parts[: at + 2])
    return None


def is_routing(module_name: str) -> bool:
    return module_name.rsplit(".", 1)[-1] in ROUTING


def fused_experts(module: nn.Module) -> bool:
    """An experts module in transformers' fused layout: it says whether its slices are transposed."""
    return isinstance(getattr(module, "is_transposed", None), bool) and any(
        isinstance(getattr(module, p, None), nn.Parameter) and getattr(module, p).dim() == 3 for p in FUSED_EXPERTS
    )


def prunable_linears(layer: nn.Module) -> dict[str, Matrix]:
    """Every prunable matrix of a decoder layer, by name, in the layer's order."""
    from transformers.pytorch_utils import Conv1D

    found: dict[str, Matrix] = {}
    for name, module in layer.named_modules():
        if isinstance(module, (nn.Linear, Conv1D)) and not is_routing(name):
            parts = expert_parts(name)
            found[name] = Matrix(
                name, _kind(name), module, "weight", parts[1] if parts else None, isinstance(module, Conv1D)
            )
        elif fused_experts(module):
            for param in FUSED_EXPERTS:
                stored = getattr(module, param, None)
                if not isinstance(stored, nn.Parameter) or stored.dim() != 3:
                    continue
                for expert in range(stored.shape[0]):
                    found[f"{name}.{expert}.{param}"] = Matrix(
                        f"{name}.{expert}.{param}", _kind(name), module, param, expert, module.is_transposed
                    )
    return found


def masked_linears(layer: nn.Module, scope: str) -> dict[str, Matrix]:
    """The projections of ``layer`` that ``--sparsity`` masks: all of them, or the routed experts alone
    (``--sparsity-scope experts``: the parameters ``--expert-sparsity`` removes, so the two compare at
    matched parameters)."""
    linears = prunable_linears(layer)
    if scope == SparsityScope.EXPERTS:
        return {name: matrix for name, matrix in linears.items() if matrix.kind == "experts"}
    return linears


def weight_matrix(matrix: Matrix) -> torch.Tensor:
    """The weight as ``(d_out, d_in)`` whatever the storage."""
    return matrix.matrix()


def set_weight_matrix(matrix: Matrix, W: torch.Tensor) -> None:
    matrix.write(W)


def knowingly_dense(name: str, param: nn.Parameter) -> bool:
    """A parameter that stays dense on purpose: one-dimensional (norms, biases, attention sinks), a fused
    bias (``gate_up_proj_bias``), or a routing module's weight."""
    owner, _, leaf = name.rpartition(".")
    return param.dim() < 2 or leaf == "bias" or leaf.endswith("_bias") or is_routing(owner)


def check_layout(model: nn.Module) -> None:
    """Every weight of two or more dimensions inside the decoder layers is a projection this table prunes
    or one it keeps dense on purpose; otherwise a UserError naming the first one and the architecture."""
    for index, layer in enumerate(decoder_layers(model)):
        pruned = {m.parameter for m in prunable_linears(layer).values()}
        for name, param in layer.named_parameters():
            if name not in pruned and not knowingly_dense(name, param):
                raise UserError(
                    f"Layer {index}'s weight {name} (shape {list(param.shape)}) of the '{architecture(model)}' "
                    f"architecture is neither a projection acetui knows how to prune nor one it keeps dense, so "
                    f"the sparsity reported would leave it out; acetui stops here."
                )


# Masks round their counts down: by under one weight per row (per-row masks), or per block of this many
# columns (SparseGPT's blocks); a pruned weight may fall short of its target by that much and no more.
ROUNDING_BLOCK = 128


def check_pruned(index: int, layer: nn.Module, arch: str, fraction: float, masked: set[str] | None = None) -> None:
    """After layer ``index`` was pruned to ``fraction``: every weight of two or more dimensions is knowingly
    dense, or a projection whose stored zeros reach the target (each matrix's share, less rounding). The
    first that is neither stops the run before evaluation, named with the architecture: a layout whose
    pruning wrote to a copy, or skipped a slice, never reaches a reported result. ``masked``: the
    parameters the run's mask covers (``--sparsity-scope``); the layer's other projections stay dense."""
    expected: dict[str, float] = {}
    matrices = prunable_linears(layer).values()
    for matrix in matrices:
        d_out, d_in = matrix.matrix().shape
        slack = d_out + -(-d_in // ROUNDING_BLOCK)
        expected[matrix.parameter] = expected.get(matrix.parameter, 0.0) + fraction * d_out * d_in - slack
    unmasked = {m.parameter for m in matrices} - masked if masked is not None else set()
    for name, param in layer.named_parameters():
        if knowingly_dense(name, param) or name in unmasked:
            continue
        zeros = param.numel() - torch.count_nonzero(param.data).item()
        if name not in expected or zeros < expected[name]:
            raise UserError(
                f"Layer {index}'s weight {name} (shape {list(param.shape)}) of the '{arch}' architecture has "
                f"{zeros / param.numel():.1%} zeros after pruning to {fraction:.1%}, so acetui's table of layouts "
                f"did not prune it as it reports; acetui stops here, before evaluation."
            )


def expert_layout(model: nn.Module) -> str | None:
    """How the model stores its experts, in words for the run's record; None for a dense model."""
    for layer in decoder_layers(model):
        for module in layer.modules():
            if fused_experts(module):
                params = [p for p in FUSED_EXPERTS if isinstance(getattr(module, p, None), nn.Parameter)]
                shape = "[experts, d_in, d_out]" if module.is_transposed else "[experts, d_out, d_in]"
                return f"fused 3-D {shape}: {', '.join(params)}"
        if any(matrix.kind == "experts" for matrix in prunable_linears(layer).values()):
            return "one linear per expert"
    return None


def census(model: nn.Module) -> dict[str, int]:
    """Weights of the decoder layers by what becomes of them: each kind of projection (pruned), ``routing``
    and ``norms and biases`` (kept dense)."""
    counts: dict[str, int] = {}
    for layer in decoder_layers(model):
        matrices = prunable_linears(layer).values()
        for matrix in matrices:
            counts[matrix.kind] = counts.get(matrix.kind, 0) + matrix.weight.numel()
        pruned = {matrix.parameter for matrix in matrices}
        for name, param in layer.named_parameters():
            if name not in pruned:
                what = "routing" if is_routing(name.rpartition(".")[0]) else "norms and biases"
                counts[what] = counts.get(what, 0) + param.numel()
    return counts
