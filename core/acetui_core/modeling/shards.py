"""A safetensors checkpoint's shard index: which shard holds which tensor, their shapes and sizes from
the shards' headers, reading tensors by name in a run's dtype (``Shards``), and reading one decoder
layer's weights (``StreamedModel``, converted as transformers converts the checkpoint when it does).
Nothing here builds or runs a model."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from acetui_core.basics.errors import UserError
from acetui_core.modeling.checkpoint import INDEX_FILE
from acetui_core.modeling.conversion import ConvertedLayers
from acetui_core.modeling.models import model_source


def local_checkpoint(source: str) -> Path | None:
    """The folder of safetensors shards behind ``source`` (a checkpoint folder, or a hub model's snapshot
    in the local Hugging Face cache); None for a GGUF file, a hub model not downloaded, or a folder that
    holds only PyTorch ``.bin`` weights."""
    kind, path = model_source(source)
    if kind == "gguf":
        return None
    if kind == "hub":
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(str(path), "config.json")
        if not isinstance(cached, str):
            return None
        path = Path(cached).parent
    folder = Path(path)
    return folder if any(folder.glob("*.safetensors")) else None


def weight_map(folder: Path) -> dict[str, str]:
    """Tensor name -> shard file, from the index when there is one, else from the shards' headers."""
    index = folder / INDEX_FILE
    if index.is_file():
        try:
            return dict(json.loads(index.read_text())["weight_map"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise UserError(f"The checkpoint folder {folder} has an unreadable {INDEX_FILE} ({error}).") from None
    from safetensors import safe_open

    names = {}
    for shard in sorted(folder.glob("*.safetensors")):
        with safe_open(str(shard), "pt") as tensors:
            names.update(dict.fromkeys(tensors.keys(), shard.name))
    return names


def checkpoint_bytes(folder: Path) -> int:
    """Bytes of the weight files a checkpoint's index names (every shard when there is no index)."""
    files = set(weight_map(folder).values()) if (folder / INDEX_FILE).is_file() else None
    return sum(f.stat().st_size for f in folder.glob("*.safetensors") if files is None or f.name in files)


@dataclass
class Shards:
    """A checkpoint's tensors by name, read on demand in the run's dtype."""

    folder: Path
    names: dict[str, str]  # tensor name -> shard file
    dtype: torch.dtype
    # the dtype of each tensor read, as the checkpoint keeps it, by its checkpoint key: a layer is read by
    # names inside the layer, which the writer of the pruned checkpoint does not know
    stored: dict[str, torch.dtype] = field(default_factory=dict)

    def key(self, name: str, base_prefix: str) -> str | None:
        """The checkpoint's name for the model's tensor ``name`` (some checkpoints drop the base model prefix)."""
        for candidate in (name, name.removeprefix(f"{base_prefix}."), f"{base_prefix}.{name}"):
            if candidate in self.names:
                return candidate
        return None

    def read(self, keys: dict[str, str]) -> dict[str, torch.Tensor]:
        """``{our name: tensor}`` for ``{our name: checkpoint key}``, in the run's dtype; ``stored`` keeps
        the dtype the checkpoint has them in (a pruned checkpoint is written back in it)."""
        from safetensors import safe_open

        by_file = defaultdict(list)
        for ours, key in keys.items():
            by_file[self.names[key]].append((ours, key))
        tensors = {}
        for file, pairs in by_file.items():
            try:
                with safe_open(str(self.folder / file), "pt", device="cpu") as shard:
                    for ours, key in pairs:
                        tensor = shard.get_tensor(key)
                        self.stored[key] = tensor.dtype
                        tensors[ours] = tensor.to(self.dtype) if tensor.is_floating_point() else tensor
            except (
                Exception
            ) as error:  # a shard gone or cut short since the preflight: safetensors raises its own kinds
                raise UserError(
                    f"Could not read {file} of the checkpoint folder {self.folder} "
                    f"({str(error).splitlines()[0][:160] if str(error) else type(error).__name__})."
                ) from None
        return tensors


def tensor_shapes(folder: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every tensor's shape and stored dtype name, from the shards' headers (no weight is read)."""
    from safetensors import safe_open

    shapes = {}
    for shard in sorted(set(weight_map(folder).values())):
        with safe_open(str(folder / shard), "pt") as tensors:
            for name in tensors.keys():  # noqa: SIM118 (a safe_open handle is not iterable)
                part = tensors.get_slice(name)
                shapes[name] = (tuple(part.get_shape()), part.get_dtype())
    return shapes


def model_bytes(folder: Path, dtype: torch.dtype) -> int:
    """What the checkpoint's weights take in memory once loaded in ``dtype``."""
    return sum(_numel(shape) for shape, _ in tensor_shapes(folder).values()) * dtype.itemsize


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def persistent_buffers(module: nn.Module) -> list[str]:
    """The buffers of ``module`` a checkpoint holds (``save_pretrained`` writes them, ``from_pretrained``
    reads them: DeepSeek's ``e_score_correction_bias``), not the ones it rebuilds (rotary tables)."""
    parameters = {name for name, _ in module.named_parameters()}
    return [name for name in module.state_dict(keep_vars=True) if name not in parameters]


@dataclass
class StreamedModel:
    """What streaming adds to a loaded model: where its decoder layers' weights are read from."""

    shards: Shards
    prefixes: list[str]  # each decoder layer's name in the model
    base_prefix: str
    model_type: str = ""
    converted: ConvertedLayers | None = None  # a checkpoint transformers converts while loading (per-expert tensors)

    def reading(self, folder: Path) -> StreamedModel:
        """The same model's layers read from another checkpoint (the pruned one a streamed run wrote)."""
        shards = Shards(folder, weight_map(folder), self.shards.dtype)
        converted = self.converted and ConvertedLayers(self.converted.model, shards.names, self.prefixes)
        return StreamedModel(shards, self.prefixes, self.base_prefix, self.model_type, converted)

    def read_layer(self, layer: nn.Module, index: int) -> dict[str, torch.Tensor]:
        """``{parameter name in the layer: tensor}`` of decoder layer ``index``, converted as transformers
        converts the checkpoint while loading when it does (``acetui_core.modeling.conversion``)."""
        if self.converted is None:
            return self.shards.read(self.layer_keys(layer, index))
        self.check_layer(layer, index)
        read = lambda keys: self.shards.read({key: key for key in keys})  # noqa: E731
        return self.converted.read(index, self.prefixes[index], read)

    def check_layer(self, layer: nn.Module, index: int) -> None:
        """Every parameter of decoder layer ``index`` is in the checkpoint, or a UserError naming one."""
        if self.converted is None:
            self.layer_keys(layer, index)
            return
        found = self.converted.names(index, self.prefixes[index])
        missing = [name for name, _ in layer.named_parameters() if name not in found]
        if missing:
            raise UserError(self._missing(f"{self.prefixes[index]}.{missing[0]}"))

    def layer_keys(self, layer: nn.Module, index: int) -> dict[str, str]:
        """``{name in the layer: checkpoint key}`` of decoder layer ``index``: every parameter, and the
        persistent buffers the checkpoint holds (one it lacks keeps the value its config gives it)."""
        keys = {}
        for name, _ in layer.named_parameters():
            full = f"{self.prefixes[index]}.{name}"
            key = self.shards.key(full, self.base_prefix)
            if key is None:
                raise UserError(self._missing(full))
            keys[name] = key
        for name in persistent_buffers(layer):
            key = self.shards.key(f"{self.prefixes[index]}.{name}", self.base_prefix)
            if key is not None:
                keys[name] = key
        return keys

    def _missing(self, full: str) -> str:
        return (
            f"The checkpoint folder {self.shards.folder} has no tensor {full}; a shard is missing or does "
            f"not belong to this config.json."
        )
