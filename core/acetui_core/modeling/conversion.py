"""Checkpoint names and model names, through transformers' own conversion mapping (``conversion_mapping``,
``core_model_loading``). transformers 5 converts some checkpoints while loading: Mixtral's per-expert
``block_sparse_moe.experts.<e>.w1/w3/w2`` and the Qwen/DeepSeek families' per-expert ``gate_proj/up_proj/
down_proj`` become fused 3-D ``experts.gate_up_proj`` and ``experts.down_proj``; ``save_pretrained``
reverts it. This module applies the same transforms to one decoder layer at a time (``--offload disk``
streams such checkpoints), and says which saved tensors hold a parameter or an expert's slice of it (the
``--permute`` sidecar is keyed by them)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from copy import deepcopy
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def _transforms(model: PreTrainedModel) -> tuple[list, list]:
    """The model's renamings and converters, as ``from_pretrained`` would apply them."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, WeightRenaming

    transforms = get_model_conversion_mapping(model, add_legacy=False)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    return renamings, converters


def converts(model: PreTrainedModel) -> bool:
    """Whether transformers converts this model's checkpoints while loading."""
    renamings, converters = _transforms(model)
    return bool(renamings or converters)


def renamed_keys(model: PreTrainedModel, checkpoint_keys: Iterable[str]) -> dict[str, str]:
    """``{model name: checkpoint key}`` of the checkpoint tensors transformers renames while loading (a
    GPT-NeoX checkpoint's ``embed_out`` is the model's ``lm_head``)."""
    from transformers.core_model_loading import apply_renamings

    renamings, _ = _transforms(model)
    renamed = {apply_renamings(key, renamings): key for key in checkpoint_keys} if renamings else {}
    return {name: key for name, key in renamed.items() if name != key}


class ConvertedLayers:
    """A checkpoint that transformers converts while loading, read one decoder layer at a time: each
    layer's checkpoint tensors are found by the name they take once converted, and converted together."""

    def __init__(self, model: PreTrainedModel, checkpoint_keys: Iterable[str], prefixes: list[str]):
        from transformers.core_model_loading import dot_natural_key, rename_source_key

        self.model = model
        self.renamings, self.converters = _transforms(model)
        at = {f"{prefix}.": index for index, prefix in enumerate(prefixes)}
        self.keys: dict[int, list[str]] = {index: [] for index in range(len(prefixes))}
        for key in sorted(checkpoint_keys, key=dot_natural_key):  # experts in index order, as transformers stacks them
            name = rename_source_key(key, self.renamings, self.converters)[0]
            index = next((i for prefix, i in at.items() if name.startswith(prefix)), None)
            if index is not None:
                self.keys[index].append(key)

    def names(self, index: int, prefix: str) -> set[str]:
        """The names in the layer that decoder layer ``index``'s checkpoint tensors take once converted."""
        from transformers.core_model_loading import rename_source_key

        converted = (rename_source_key(key, self.renamings, self.converters)[0] for key in self.keys[index])
        return {name.removeprefix(f"{prefix}.") for name in converted}

    def read(self, index: int, prefix: str, read: Callable[[list[str]], dict[str, torch.Tensor]]):
        """``{name in the layer: tensor}`` of decoder layer ``index`` (named ``prefix`` in the model), its
        checkpoint tensors read by ``read`` and converted as ``from_pretrained`` converts them: renamed, and
        the converters' operations (stack the experts, concatenate gate and up) applied."""
        from transformers.core_model_loading import rename_source_key

        by_pattern = {pattern: converter for converter in self.converters for pattern in converter.source_patterns}
        keys = self.keys[index]
        tensors = read(keys)
        converted: dict[str, torch.Tensor] = {}
        pending: dict[str, Any] = {}
        for key in keys:
            name, pattern = rename_source_key(key, self.renamings, self.converters)
            if pattern is None:
                converted[name] = tensors.pop(key)
            else:  # each fused parameter gets its own converter, as in from_pretrained
                converter = pending.setdefault(name, deepcopy(by_pattern[pattern]))
                converter.add_tensor(name, key, pattern, tensors.pop(key))
        for name, converter in pending.items():
            for target, tensor in converter.convert(name, model=self.model, config=self.model.config).items():
                converted[target] = tensor[0] if isinstance(tensor, list) else tensor
        return {name.removeprefix(f"{prefix}."): tensor for name, tensor in converted.items()}


def to_checkpoint(model: PreTrainedModel, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``{checkpoint name: tensor}`` as ``save_pretrained`` writes the model's ``tensors``."""
    from transformers.core_model_loading import revert_weight_conversion

    return revert_weight_conversion(model, tensors)


def saved_names(model: PreTrainedModel, parameter: str, shape: torch.Size) -> dict[int | None, list[str]]:
    """The checkpoint tensors ``save_pretrained`` writes for the model's ``parameter``, by expert: a fused
    ``[experts, ...]`` parameter saved per expert gives each expert its tensors (Mixtral's expert 3:
    ``...experts.3.w1.weight`` and ``...experts.3.w3.weight``); one saved fused keeps its name, and its
    expert ``e`` is ``name[e]``; a 2-D parameter has one name, under ``None``. Found by reverting a probe
    whose slice ``e`` holds the value ``e`` (an expanded view: no memory)."""
    if len(shape) != 3:
        return {None: list(to_checkpoint(model, {parameter: torch.zeros(()).expand(shape)}))}
    probe = torch.arange(shape[0], dtype=torch.float32).view(-1, 1, 1).expand(shape)
    names: dict[int | None, list[str]] = {}
    for name, tensor in to_checkpoint(model, {parameter: probe}).items():
        experts = tensor.unique().tolist()
        if len(experts) == 1:
            names.setdefault(int(experts[0]), []).append(name)
        else:  # saved fused
            for expert in experts:
                names.setdefault(int(expert), []).append(f"{name}[{int(expert)}]")
    return names


def by_saved_name(model: PreTrainedModel, orders: dict[str, dict[int | None, list[int]]]) -> dict[str, list[int]]:
    """``orders`` (per parameter of the model, per expert slice or ``None``) keyed by the names
    ``save_pretrained`` writes (``saved_names``): a user finds each key in the saved checkpoint. Mixtral's
    gate and up are saved apart (``w1``, ``w3``) and share the input order of the ``gate_up_proj`` slice."""
    keyed = {}
    for parameter, experts in orders.items():
        names = saved_names(model, parameter, model.get_parameter(parameter).shape)
        for expert, order in experts.items():
            keyed.update(dict.fromkeys(names[expert], order))
    return keyed
