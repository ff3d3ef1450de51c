"""Whole routed experts removed (``--expert-sparsity F``, ``--expert-score reap|frequency``; docs/moe.md).

Each MoE layer's experts are scored on the dense layer during the calibration pass that gathers the
routed statistics (a forward pre-hook on transformers' experts module sees the tokens and the router's
choice), the lowest ``F x experts`` go (a whole number, or the run is refused), and the layer is cut
before the method's mask prunes the rest: the fused experts parameters lose the removed slices, the router
its rows (and its bias, DeepSeek's ``e_score_correction_bias``...), the modules their expert count. The model's config gets the new count
once the loop is done, so ``save_pretrained`` writes a checkpoint that really has fewer experts.

- ``reap`` (REAP, Lasby et al. 2025, reference code CerebrasResearch/reap): the mean over the tokens the
  router sends to expert e of ``g_e(x) * ||f_e(x)||_2``, with ``g`` the softmax of the router's logits over
  every expert, divided by its sum over the token's chosen experts when the config sets ``norm_topk_prob``
  (the reference observer's ``renormalize_router_weights``), and ``f_e(x)`` the expert's output before
  the gate scales it. An expert no token reached scores 0.
- ``frequency``: how many calibration tokens the router sends to e.

Ties go to the lower index (removed first). A router that picks groups of experts first (DeepSeek's
``n_group``) loses the same number of experts from every group, so its groups stay whole.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from acetui_core.basics.choices import ExpertScore, SparsityScope
from acetui_core.basics.errors import UserError
from acetui_core.modeling.layerfeed import set_tensor
from acetui_core.modeling.layouts import ROUTING, architecture, decoder_layers, expert_layout, fused_experts
from acetui_core.modeling.models import Loaded
from acetui_core.modeling.placement import layer_forward
from acetui_core.modeling.routing import expert_output
from acetui_core.run.config import RunConfig
from acetui_core.run.experts import ExpertRemoval, Experts, ExpertsRemoved

# The config fields that hold a model's routed expert count, whichever its family uses.
COUNT_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
GROUP_FIELDS = ("num_group", "n_group")  # routers that choose among groups of experts first


@dataclass(eq=False)
class MoeBlock:
    """One MoE layer's routed experts: the fused experts module, its router, and how many it has."""

    name: str  # the experts module in the layer, e.g. "mlp.experts"
    block: nn.Module  # the module holding experts and router
    experts: nn.Module
    router: nn.Module
    count: int
    groups: int


def _stacked(experts: nn.Module) -> int:
    return next(p.shape[0] for p in experts.parameters(recurse=False) if p.dim() == 3)


def moe_blocks(layer: nn.Module) -> list[MoeBlock]:
    """The layer's experts modules in transformers' fused layout, each with its router (a ``gate`` or
    ``router`` beside it whose weight has one row per expert); a block without one is a UserError."""
    blocks = []
    for name, module in layer.named_modules():
        if not fused_experts(module):
            continue
        count = _stacked(module)
        parent, _, _ = name.rpartition(".")
        block = layer.get_submodule(parent)
        routers = [
            child
            for child_name, child in block.named_children()
            if child_name in ROUTING and getattr(getattr(child, "weight", None), "shape", (0,))[0] == count
        ]
        if len(routers) != 1:
            raise UserError(f"acetui cannot find the router of {name}, so it cannot remove experts from it.")
        groups = next(
            (getattr(routers[0], f) for f in GROUP_FIELDS if isinstance(getattr(routers[0], f, None), int)), 1
        )
        blocks.append(MoeBlock(name, block, module, routers[0], count, max(groups, 1)))
    return blocks


# How far ``F x experts`` may be from a whole number and still count as one: a share typed to six digits
# (``0.333333`` of 6 experts) names its experts, while half an expert stays far outside.
WHOLE_TOLERANCE = 1e-3


def removed_per_group(count: int, groups: int, fraction: float) -> int:
    """How many experts of each routing group go: ``fraction x experts``, per group when the router chooses
    groups first (``check_removable`` refused a fraction for which that is not whole, so the rounding only
    absorbs float error: ``int`` would take 0.29 x 100 as 28)."""
    return round(fraction * count / groups)


def check_expert_settings(model: nn.Module, config: RunConfig) -> None:
    """``--sparsity-scope experts`` and ``--expert-sparsity`` fit the model: checked on its skeleton before a
    run is recorded (``check_config``) and on the loaded model before any work."""
    if config.sparsity_scope == SparsityScope.EXPERTS and expert_layout(model) is None:
        raise UserError(
            f"--sparsity-scope experts masks routed experts, and the '{architecture(model)}' model has none."
        )
    if config.expert_sparsity:
        check_removable(model, config.expert_sparsity)


def check_removable(model: nn.Module, fraction: float) -> None:
    """Before any work: the model's experts can be removed at ``fraction``, or one sentence saying why not."""
    arch = architecture(model)
    layers = decoder_layers(model)
    blocks = [block for layer in layers for block in moe_blocks(layer)]
    if not blocks:
        if expert_layout(model) == "one linear per expert":
            raise UserError(
                f"--expert-sparsity needs transformers' fused experts; this '{arch}' model keeps each expert as "
                f"modules of its own (remote code or transformers 4), whose router acetui does not cut."
            )
        raise UserError(f"--expert-sparsity removes routed experts, and the '{arch}' model has none.")
    counts = {block.count for block in blocks}
    config = model.config
    fields = [f for f in COUNT_FIELDS if getattr(config, f, None) in counts]
    if len(counts) != 1 or not fields:
        raise UserError(
            f"The '{arch}' config does not hold one routed expert count for every MoE layer (layers have "
            f"{sorted(counts)}), so a checkpoint with experts removed could not say how many it has."
        )
    block = blocks[0]
    per_group = block.count // block.groups
    top_k = getattr(config, "num_experts_per_tok", None) or 1

    def router_keeps_enough(gone: int) -> bool:  # experts removed from each group
        return block.count - gone * block.groups >= top_k and (block.groups == 1 or per_group - gone >= 2)

    exact = fraction * per_group
    whole = abs(exact - round(exact)) <= WHOLE_TOLERANCE
    if exact < 1 - WHOLE_TOLERANCE:
        raise UserError(
            f"--expert-sparsity {fraction:g} removes no expert: {fraction:g} x {per_group} is less than one of the "
            f"{per_group} routed experts of each {'routing group' if block.groups > 1 else 'layer'}; use at least "
            f"{1 / per_group:.6g}."
        )
    # a share the groups cannot honour would be filed, and compared, under a share it did not remove; the
    # nearest shares the router can run are named (none: the count below says why none can)
    lower = [g for g in range(1, int(exact) + 1) if router_keeps_enough(g)][-1:]
    upper = [g for g in range(int(exact) + 1, per_group + 1) if router_keeps_enough(g)][:1]
    if not whole and lower + upper:
        taken = int(exact) * block.groups
        groups = f" ({block.groups} routing groups)" if block.groups > 1 else ""
        shares = " or ".join(f"{g / per_group:.6g}" for g in lower + upper)
        raise UserError(
            f"--expert-sparsity {fraction:g} would remove {taken} of {block.count} experts "
            f"({100 * taken / block.count:.3g}%) on {arch}{groups}: give {shares}, a whole number of experts."
        )
    gone = removed_per_group(block.count, block.groups, fraction)
    kept = block.count - gone * block.groups
    if not router_keeps_enough(gone):
        raise UserError(
            f"--expert-sparsity {fraction:g} would keep {kept} routed experts per layer, too few for the router "
            f"of '{arch}', which picks {top_k} per token{' from groups of at least 2' if block.groups > 1 else ''}."
        )
    for block in blocks:
        for name, tensor in _routing_tensors(block):
            if _expert_dim(tensor, block.count) is None and block.count in tensor.shape:
                raise UserError(
                    f"{name} (shape {list(tensor.shape)}) of the '{arch}' architecture has one entry per expert "
                    f"in a dimension acetui does not know how to cut; acetui does not remove its experts."
                )


def _expert_dim(tensor: torch.Tensor, count: int) -> int | None:
    """The dimension of a routing tensor that holds one entry per expert: the first (a router's rows, a
    bias), or the only one that is not 1 (Ernie's ``e_score_correction_bias`` of shape ``[1, experts]``)."""
    if tensor.shape[0] == count:
        return 0
    if tensor.shape[-1] == count and all(size == 1 for size in tensor.shape[:-1]):
        return tensor.dim() - 1
    return None


def _routing_tensors(block: MoeBlock):
    """The block's parameters and buffers outside its experts and shared experts: the router's weight and
    biases, and per-expert corrections such as ``e_score_correction_bias``."""
    skip = {id(block.experts)} | {
        id(module) for name, module in block.block.named_children() if name.startswith("shared_expert")
    }

    def walk(module: nn.Module, prefix: str):
        if id(module) in skip:
            return
        for name, tensor in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
            if tensor is not None and tensor.dim() > 0:
                yield f"{prefix}{name}", tensor
        for name, child in module.named_children():
            yield from walk(child, f"{prefix}{name}.")

    yield from walk(block.block, "")


class ExpertScores:
    """Hooks on a layer's experts modules that add up each expert's REAP score and routed tokens over the
    first ``batches`` calls (the later passes of the same layer, a starved expert's second gathering,
    see the same dense layer: counting them again would change nothing but the sums)."""

    def __init__(self, blocks: list[MoeBlock], batches: int, renormalise: bool):
        self.blocks, self.batches, self.renormalise = blocks, batches, renormalise
        self.calls = {id(b): 0 for b in blocks}
        self.weighted = {id(b): torch.zeros(b.count, dtype=torch.float64) for b in blocks}
        self.tokens = {id(b): torch.zeros(b.count, dtype=torch.long) for b in blocks}

    @property
    def complete(self) -> bool:
        return all(calls >= self.batches for calls in self.calls.values())

    @torch.no_grad()
    def _add(self, block: MoeBlock, hidden: torch.Tensor, top_k_index: torch.Tensor) -> None:
        if self.calls[id(block)] >= self.batches:
            return
        self.calls[id(block)] += 1
        weight, bias = cast(torch.Tensor, block.router.weight), getattr(block.router, "bias", None)
        logits = F.linear(hidden.float(), weight.float(), None if bias is None else bias.float())
        gates = torch.softmax(logits, dim=-1)
        if self.renormalise:
            gates = gates / gates.gather(1, top_k_index.long()).sum(dim=-1, keepdim=True)
        for e in range(block.count):
            rows = (top_k_index == e).any(dim=-1).nonzero().squeeze(-1)
            if rows.numel():
                norms = expert_output(block.experts, e, hidden[rows]).float().norm(dim=-1)
                self.weighted[id(block)][e] += (gates[rows, e] * norms).double().sum().cpu()
                self.tokens[id(block)][e] += rows.numel()

    @contextmanager
    def hooked(self):
        def hook(module, args, kwargs, block):
            values = [*args, *kwargs.values()]
            self._add(block, values[0], values[1])

        handles = [
            b.experts.register_forward_pre_hook(lambda m, a, k, b=b: hook(m, a, k, b), with_kwargs=True)
            for b in self.blocks
        ]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()

    def scores(self, block: MoeBlock, score: str) -> list[float]:
        tokens = self.tokens[id(block)]
        if score == ExpertScore.FREQUENCY:
            return [float(t) for t in tokens.tolist()]
        mean = self.weighted[id(block)] / tokens.clamp(min=1)
        return mean.tolist()


def choose(scores: list[float], groups: int, per_group: int) -> list[int]:
    """The experts to remove: in each routing group, the ``per_group`` lowest scores (ties: lower index)."""
    size = len(scores) // groups
    removed: list[int] = []
    for g in range(groups):
        members = sorted(range(g * size, (g + 1) * size), key=lambda e: (scores[e], e))
        removed += members[:per_group]
    return sorted(removed)


def cut(block: MoeBlock, removed: list[int]) -> None:
    """Remove experts ``removed`` from the block: their slices of every experts parameter, their rows of
    every routing tensor, and the modules' own counts."""
    keep = torch.tensor([e for e in range(block.count) if e not in removed])
    kept = len(keep)
    for name, param in list(block.experts.named_parameters(recurse=False)):
        set_tensor(block.experts, name, param.data[keep.to(param.device)].clone())
    for name, tensor in list(_routing_tensors(block)):
        dim = _expert_dim(tensor, block.count)
        if dim is not None:
            sliced = tensor.data.index_select(dim, keep.to(tensor.device)).clone()
            if isinstance(tensor, nn.Parameter):  # keep what it was: a buffer stays a buffer
                sliced = nn.Parameter(sliced, requires_grad=False)
            owner, _, leaf = name.rpartition(".")
            module = block.block.get_submodule(owner) if owner else block.block
            (module._parameters if leaf in module._parameters else module._buffers)[leaf] = sliced
    for module in (block.block, block.router, block.experts):
        for field in ("num_experts", *COUNT_FIELDS):
            if getattr(module, field, None) == block.count:
                setattr(module, field, kept)
    block.count = kept


@torch.no_grad()
def score_pass(layer: nn.Module, inputs, device, dense_outputs: list | None = None) -> None:
    """One pass of the calibration inputs through the dense layer for the scores alone (a method that
    reads no statistics, or ``--sparsity 0``), keeping its outputs when fidelity compares them."""
    for hidden, kwargs in inputs:
        out = layer_forward(layer, hidden, kwargs, device)
        if dense_outputs is not None:
            dense_outputs.append(out.to(hidden.device))


def expert_choice(
    index: int, scorer: ExpertScores, score: str, fraction: float
) -> tuple[list[ExpertRemoval], set[str]]:
    """Each MoE block of layer ``index``: its experts' scores and the ones that go (records numbered as in
    the dense model), and the removed experts' names (``mlp.experts.5``)."""
    records = []
    for block in scorer.blocks:
        scores = scorer.scores(block, score)
        removed = choose(scores, block.groups, removed_per_group(block.count, block.groups, fraction))
        records.append(ExpertRemoval(index, block.name, score, scores, removed))
    return records, {f"{r.experts}.{e}" for r in records for e in r.removed}


def cut_layer(scorer: ExpertScores, removal: list[ExpertRemoval]) -> dict[str, str]:
    """Cut the chosen experts out of every block, once the kept ones are masked: the new name of each kept
    expert (``mlp.experts.5`` -> ``mlp.experts.4``)."""
    renamed = {}
    for block, record in zip(scorer.blocks, removal, strict=True):
        kept = [e for e in range(block.count) if e not in record.removed]
        renamed.update({f"{block.name}.{old}": f"{block.name}.{new}" for new, old in enumerate(kept)})
        cut(block, record.removed)
    return renamed


def stored_size(model: nn.Module) -> int:
    """The entries a checkpoint of ``model`` stores: its parameters (a tied head once) and its persistent
    buffers (DeepSeek's ``e_score_correction_bias``), as the saved files are counted."""
    buffers = {id(b): b for m in model.modules() for b in _persistent_buffers(m)}
    return sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in buffers.values())


def _persistent_buffers(module: nn.Module) -> list[torch.Tensor]:
    return [
        b for name, b in module._buffers.items() if b is not None and name not in module._non_persistent_buffers_set
    ]


def _per_expert_stored(block: MoeBlock) -> list[torch.Tensor]:
    """The block's routing tensors with one entry per expert that a checkpoint stores: the router's rows,
    its bias, persistent corrections such as ``e_score_correction_bias`` (not a buffer rebuilt on load)."""
    stored = {id(t) for t in block.block.state_dict(keep_vars=True).values()}
    return [t for _, t in _routing_tensors(block) if id(t) in stored and _expert_dim(t, block.count) is not None]


def parameters_removed(model: nn.Module, fraction: float) -> int:
    """How many stored entries ``--expert-sparsity fraction`` removes from ``model`` (a meta skeleton will
    do): the removed experts' slices and their router rows and biases; a model that cannot lose experts is
    a UserError."""
    check_removable(model, fraction)
    removed = 0
    for layer in decoder_layers(model):
        for block in moe_blocks(layer):
            gone = removed_per_group(block.count, block.groups, fraction) * block.groups
            tensors = [*block.experts.parameters(recurse=False), *_per_expert_stored(block)]
            removed += sum(t.numel() // block.count * gone for t in tensors)
    return removed


def set_expert_count(model: nn.Module, before: int, after: int) -> None:
    """The config's routed expert count, in whichever fields the family keeps it."""
    for field in COUNT_FIELDS:
        if getattr(model.config, field, None) == before:
            setattr(model.config, field, after)


def checkpoint_size(folder: str | Path) -> tuple[int, int] | None:
    """Parameters and bytes of a safetensors checkpoint folder, read from its files (None: none there)."""
    from safetensors import safe_open

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        return None
    parameters = 0
    for file in files:
        with safe_open(str(file), "pt") as handle:
            for key in handle.keys():  # noqa: SIM118 - a safetensors handle has no __iter__
                parameters += int(torch.Size(handle.get_slice(key).get_shape()).numel())
    return parameters, sum(file.stat().st_size for file in files)


def counted_from_files(removed: ExpertsRemoved, source: str, saved_to: str | None) -> ExpertsRemoved:
    """``removed`` with the checkpoints' own figures: the source folder's safetensors bytes, and, once
    saved, the parameters and bytes of both folders' files (what a user downloads and serves)."""
    from acetui_core.modeling.shards import local_checkpoint

    folder = local_checkpoint(source)
    before = checkpoint_size(folder) if folder is not None else None
    after = checkpoint_size(saved_to) if saved_to else None
    removed = replace(removed, bytes_before=before[1] if before else None, bytes_after=after[1] if after else None)
    if before and after:
        removed = replace(
            removed, parameters_before=before[0], parameters_after=after[0], counted_from="saved checkpoint"
        )
    return removed


def finish_expert_removal(
    loaded: Loaded, config: RunConfig, experts: Experts | None, before: int
) -> ExpertsRemoved | None:
    """Once every layer is cut: the config's expert count follows, the model can no longer be reset to
    its dense weights (its shapes changed), and what the removal saved, counted in memory as a checkpoint
    stores it (``before``: ``stored_size`` of the dense model)."""
    if not config.expert_sparsity or experts is None or not experts.removal:
        return None
    first = experts.removal[0]
    dense, kept = len(first.scores), len(first.scores) - len(first.removed)
    set_expert_count(loaded.model, dense, kept)
    loaded.experts_cut = True
    after = stored_size(loaded.model)
    counts = [len(r.scores) - len(r.removed) for r in experts.removal]
    return ExpertsRemoved(config.expert_sparsity, config.expert_score, counts, before, after)
