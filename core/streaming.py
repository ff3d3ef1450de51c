"""Models bigger than memory (``--offload``): the model is built on the meta device, only the embeddings,
final norm and head are read in, and each decoder layer's weights come from the safetensors shards
(memory-mapped by ``safe_open``) only while that layer is worked on, then go back to the meta device.

``LayerFeed`` is the one way the layer loop gets a layer onto its compute device, resident or streamed,
CPU or GPU: it prepares the next layer in a background thread (read from the shards, copied to the GPU
on a side CUDA stream) while the current one is scored, so reads and transfers hide behind compute.
"""

from __future__ import annotations

import copy
import ctypes
import json
import logging
import shutil
import weakref
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import torch
from torch import nn

from acetui_core.checkpoint import INDEX_FILE, SCRATCH_PREFIX, TEMP_PREFIX, LayerwiseCheckpoint
from acetui_core.conversion import ConvertedLayers, converts, to_checkpoint
from acetui_core.errors import UserError
from acetui_core.layouts import decoder_layers
from acetui_core.models import meta_skeleton, model_source
from acetui_core.scratch import owned_tempdir

if TYPE_CHECKING:
    from transformers import PreTrainedModel

OFFLOAD_MODES = ("auto", "none", "disk")
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
AUTO_FRACTION = 0.7  # --offload auto streams a model whose weights take more than this share of available memory


def check_offload(offload: str) -> str:
    if offload not in OFFLOAD_MODES:
        raise UserError(f"Unknown --offload '{offload}'; use auto, none or disk.")
    return offload


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


def streaming_folder(source: str, offload: str, dtype: torch.dtype = torch.bfloat16) -> Path | None:
    """The checkpoint folder to stream from under ``offload``, or None to load the model whole; a model
    that cannot stream under ``--offload disk`` is a UserError saying why. ``auto`` streams when the
    weights, loaded in ``dtype``, would take more than 70% of the memory available now."""
    check_offload(offload)
    if offload == "none":
        return None
    folder = local_checkpoint(source)
    if offload == "disk" and folder is None:
        kind, _ = model_source(source)
        why = {
            "gguf": "a GGUF file's weights are quantized blocks that transformers can only dequantize by loading "
            "the whole file, so no layer can be read on its own; convert it to a safetensors folder or use "
            "--offload none",
            "hub": "streaming reads a local copy and this hub model is not in the Hugging Face cache; download it "
            "first (huggingface-cli download) or pass its folder",
            "folder": "its weights are not in safetensors files, which streaming memory-maps one layer at a time; "
            "re-save it with save_pretrained(safe_serialization=True) or use --offload none",
        }[kind]
        raise UserError(f"--offload disk cannot stream {source}: {why}.")
    if offload == "auto" and folder is not None:
        return folder if model_bytes(folder, dtype) > AUTO_FRACTION * psutil.virtual_memory().available else None
    return folder


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
    stored: dict[str, torch.dtype] = field(
        default_factory=dict
    )  # dtype of each tensor read, as the checkpoint keeps it

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
                        self.stored[ours] = tensor.dtype
                        tensors[ours] = tensor.to(self.dtype) if tensor.is_floating_point() else tensor
            except (
                Exception
            ) as error:  # a shard gone or cut short since the preflight: safetensors raises its own kinds
                raise UserError(
                    f"Could not read {file} of the checkpoint folder {self.folder} "
                    f"({str(error).splitlines()[0][:160] if str(error) else type(error).__name__})."
                ) from None
        return tensors


def layer_prefixes(model: nn.Module) -> list[str]:
    """Each decoder layer's name inside the model, e.g. ``model.layers.3``."""
    names = {id(module): name for name, module in model.named_modules()}
    return [names[id(layer)] for layer in decoder_layers(model)]


def set_tensor(module: nn.Module, name: str, value: torch.Tensor) -> None:
    """Replace the parameter or buffer ``name`` (dotted, relative to ``module``) by ``value``."""
    owner_name, _, leaf = name.rpartition(".")
    owner = module.get_submodule(owner_name) if owner_name else module
    if leaf in owner._parameters:
        owner._parameters[leaf] = nn.Parameter(value, requires_grad=False)
    else:
        owner._buffers[leaf] = value


def to_meta(layer: nn.Module) -> None:
    """Free a layer's weights: its parameters go back to the meta device (its buffers stay, they are small
    and not in the checkpoint)."""
    for name, param in list(layer.named_parameters()):
        set_tensor(layer, name, torch.empty_like(param, device="meta"))


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
        converts the checkpoint while loading when it does (``acetui_core.conversion``)."""
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
        """``{parameter name in the layer: checkpoint key}`` of decoder layer ``index``."""
        keys = {}
        for name, _ in layer.named_parameters():
            full = f"{self.prefixes[index]}.{name}"
            key = self.shards.key(full, self.base_prefix)
            if key is None:
                raise UserError(self._missing(full))
            keys[name] = key
        return keys

    def _missing(self, full: str) -> str:
        return (
            f"The checkpoint folder {self.shards.folder} has no tensor {full}; a shard is missing or does "
            f"not belong to this config.json."
        )


def load_streamed(folder: Path, dtype: torch.dtype):
    """The model of ``folder`` with only its embeddings, final norm and head in memory (in ``dtype``);
    its decoder layers stay on the meta device until ``LayerFeed`` brings them in."""
    from transformers import AutoConfig, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(folder)
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except Exception as error:  # a damaged configuration fails in many ways
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise UserError(f"The checkpoint folder {folder} could not be loaded as a model ({first}).") from None
    model = meta_skeleton(config, tie_weights=False, real_buffers=True, dtype=dtype)
    prefixes = layer_prefixes(model)
    shards = Shards(folder, weight_map(folder), dtype)
    base = model.base_model_prefix
    inside = tuple(f"{prefix}." for prefix in prefixes)
    resident = {name: shards.key(name, base) for name in model.state_dict() if not name.startswith(inside)}
    tied = {name for name, key in resident.items() if key is None and _tied(model, name)}
    missing = [name for name, key in resident.items() if key is None and name not in tied]
    if missing:
        raise UserError(
            f"The checkpoint folder {folder} has no tensor {missing[0]}; a shard is missing or does not belong "
            f"to this config.json."
        )
    tensors = shards.read({name: key for name, key in resident.items() if key is not None})
    for name, tensor in tensors.items():
        set_tensor(model, name, tensor)
    if tied:  # a head the checkpoint stores is kept, even under tie_word_embeddings, as from_pretrained keeps it
        model.tie_weights()
    model.eval()
    streamed = StreamedModel(shards, prefixes, base, config.model_type)
    layer0 = decoder_layers(model)[0]
    if converts(model) and any(
        shards.key(f"{prefixes[0]}.{name}", base) is None for name, _ in layer0.named_parameters()
    ):
        streamed.converted = ConvertedLayers(model, shards.names, prefixes)  # e.g. per-expert tensors, fused in memory
    streamed.check_layer(layer0, 0)  # a layout streaming cannot read is refused before any work
    return model, tokenizer, streamed


def _tied(model: PreTrainedModel, name: str) -> bool:
    """Whether ``name`` is the output head tied to the input embeddings (checkpoints then omit it)."""
    head = model.get_output_embeddings()
    return (
        bool(getattr(model.config, "tie_word_embeddings", False))
        and head is not None
        and name.endswith("weight")
        and (model.get_submodule(name.rpartition(".")[0]) is head)
    )


def _move_buffers(layer: nn.Module, device: torch.device) -> None:
    """Move a layer's buffers (rotary tables in older families), not its parameters: those are placed one
    by one, and a streamed layer's are on the meta device once it leaves."""
    for module in layer.modules():
        for name, buffer in module._buffers.items():
            if buffer is not None:
                module._buffers[name] = buffer.to(device)


class LayerFeed:
    """Puts decoder layer ``index`` on ``device`` for the layer loop (``enter``) and takes it off again
    (``leave``). Resident layers on the CPU stay as they are. Otherwise the next layer's weights are
    prepared in a background thread while the current layer is worked on: read from the shards (streamed)
    or taken from CPU memory (resident), and on a GPU copied over with non-blocking copies on a side
    stream. About two layers are in memory at once.

    ``release(index, layer)`` runs as a layer leaves, with its (pruned) weights still in place: it writes
    them out (streamed with --save); then streamed weights go back to the meta device and resident ones
    back to CPU memory."""

    def __init__(self, model: nn.Module, device: torch.device, streamed: StreamedModel | None = None, release=None):
        self.layers = decoder_layers(model)
        self.device, self.streamed, self.release = device, streamed, release
        self.idle = streamed is None and device.type == "cpu"
        self.side = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.pool = None if self.idle else ThreadPoolExecutor(1, thread_name_prefix="acetui-prefetch")
        self.pending: dict[int, Future] = {}
        self.home: dict[str, torch.Tensor] = {}  # a resident layer's CPU tensors while it is on the GPU

    def _read(self, index: int) -> dict[str, torch.Tensor]:
        layer = self.layers[index]
        if self.streamed is None:
            return {name: param.data for name, param in layer.named_parameters()}
        return self.streamed.read_layer(layer, index)

    def _stage(self, index: int):
        """Runs in the prefetch thread: the layer's tensors on the compute device, and the CUDA event that
        says when their copies are done."""
        cpu = self._read(index)
        if self.side is None:
            return cpu, cpu, None
        with torch.cuda.stream(self.side):
            pinned = {n: t if t.is_pinned() else t.pin_memory() for n, t in cpu.items()}
            moved = {n: t.to(self.device, non_blocking=True) for n, t in pinned.items()}
            done = torch.cuda.Event()
            done.record(self.side)
        return cpu, moved, (done, pinned)

    def _prefetch(self, index: int) -> None:
        if self.pool is not None and 0 <= index < len(self.layers) and index not in self.pending:
            self.pending[index] = self.pool.submit(self._stage, index)

    def enter(self, index: int) -> nn.Module:
        layer = self.layers[index]
        if self.idle:
            return layer
        self._prefetch(index)
        cpu, tensors, copied = self.pending.pop(index).result()
        self._prefetch(index + 1)  # read the next layer while this one is worked on
        if copied is not None:
            done, _pinned = copied  # the pinned sources live until the copies are done
            current = torch.cuda.current_stream(self.device)
            current.wait_event(done)
            for tensor in tensors.values():
                tensor.record_stream(current)  # allocated on the side stream, used on this one
        if self.streamed is None:
            self.home = cpu
        for name, tensor in tensors.items():
            set_tensor(layer, name, tensor)
        if self.device.type == "cuda":
            _move_buffers(layer, self.device)
        return layer

    def leave(self, index: int) -> None:
        layer = self.layers[index]
        if self.release is not None:
            self.release(index, layer)
        if self.idle:
            return
        if self.streamed is not None:
            to_meta(layer)
        else:
            for name, param in layer.named_parameters():
                self.home[name].copy_(param.data)
                set_tensor(layer, name, self.home[name])
            self.home = {}
        if self.device.type == "cuda":
            _move_buffers(layer, torch.device("cpu"))

    def close(self) -> None:
        if self.pool is not None:
            for future in self.pending.values():
                future.cancel()
            self.pool.shutdown(wait=True)
            self.pending.clear()


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


def return_freed_layers_to_the_os() -> None:
    """Serve every allocation of 1 MiB or more (a layer's weights, a batch's activations) by mmap, so it goes
    back to the OS when freed. glibc otherwise raises its mmap threshold after the first large frees and
    serves later layer-sized blocks from a heap that fragments and only grows: on a 56-layer checkpoint,
    over 600 MB of RSS that no tensor held (tests/test_streaming.py measures it). No-op off glibc."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, 1 << 20)
    except (OSError, AttributeError):
        pass


def load_for_run(source: str, *, device: str, dtype: str, offload: str, on_event=None):
    """Load ``source`` whole (``models.load_model``) or, when ``offload`` says so, streamed: a ``Loaded``
    whose decoder layers stay on disk until the layer loop needs them."""
    from acetui_core.events import Stage
    from acetui_core.models import Loaded, _context_length, load_model, resolve_device, resolve_dtype
    from acetui_core.paths import file_identity

    compute_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, compute_device)
    folder = streaming_folder(source, offload, torch_dtype)
    if folder is None:
        return load_model(source, device=device, dtype=dtype, on_event=on_event)
    if on_event:
        on_event(Stage("load", 0, 1))
    return_freed_layers_to_the_os()
    model, tokenizer, streamed = load_streamed(folder, torch_dtype)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if on_event:
        on_event(Stage("load", 1, 1))
    context = _context_length(model.config)
    family = model.config.model_type
    return Loaded(
        model, tokenizer, source, family, compute_device, torch_dtype, context, file_identity(folder), streamed
    )


class PrunedLayers:
    """Where a streamed run's pruned layers go as they leave: the ``--save`` folder, or, when only
    evaluation needs them, a scratch folder removed once the run ends. Tensors are written back in the
    dtype the source checkpoint stores them in (masking a bf16 weight in float32 and casting back is exact)."""

    def __init__(self, loaded, save: str | None, overwrite: bool):
        self.loaded, self.streamed = loaded, loaded.streamed
        self.scratch = None if save else owned_tempdir(SCRATCH_PREFIX)
        layers = len(self.streamed.prefixes)
        self.checkpoint = LayerwiseCheckpoint(str(save or self.scratch), overwrite or bool(self.scratch), layers)
        self.folder: Path | None = None

    def release(self, index: int, layer: nn.Module) -> None:
        prefix = self.streamed.prefixes[index]
        if self.streamed.converted is None:
            tensors = {f"{prefix}.{name}": self._stored(name, p.data) for name, p in layer.named_parameters()}
        else:  # in the checkpoint's own layout, as save_pretrained writes it (read back converted)
            fused = {f"{prefix}.{name}": p.data for name, p in layer.named_parameters()}
            tensors = {key: self._stored(key, t) for key, t in to_checkpoint(self.loaded.model, fused).items()}
        self.checkpoint.write_layer(index, tensors)

    def _stored(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(self.streamed.shards.stored.get(name, tensor.dtype))

    def finish(self) -> Path:
        """Write the resident tensors, config and tokenizer; the checkpoint is complete from here on."""
        model = self.loaded.model
        inside = tuple(f"{prefix}." for prefix in self.streamed.prefixes)
        resident, seen = {}, set()
        for name, tensor in model.state_dict().items():
            if name.startswith(inside) or tensor.data_ptr() in seen:  # a tied head is the embeddings again
                continue
            seen.add(tensor.data_ptr())
            resident[name] = self._stored(name, tensor)
        config = copy.deepcopy(model.config)
        config.dtype = next(iter(self.streamed.shards.stored.values()), self.loaded.dtype)
        self.folder = Path(self.checkpoint.finish(resident, config, self.loaded.tokenizer))
        return self.folder

    def close(self) -> None:
        """Remove what is not the user's: a scratch checkpoint, or an unfinished one."""
        self.checkpoint.discard()
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)


def load_offloaded(folder: Path, dtype: torch.dtype, device: torch.device):
    """The pruned checkpoint whole, through accelerate's offloading: what fits on ``device`` (and in 70% of
    the available CPU memory) stays there, the rest is read from disk at every forward pass. Slow, and
    said so in the run's log: it is how a model that fits nowhere gets zero-shot scores. The offloaded
    weights go to a hidden folder beside the checkpoint (where there is room for them), removed with
    the model, or by the next save or ``runs sync`` when the run is killed."""
    from transformers import AutoModelForCausalLM

    logging.getLogger("acetui").warning(
        "Zero-shot on a model that does not fit in memory runs through accelerate's disk offloading: "
        "every layer is read from disk for every batch, which is slow."
    )
    memory: dict[str | int, int] = {"cpu": int(AUTO_FRACTION * psutil.virtual_memory().available)}
    if device.type == "cuda":
        memory[device.index or 0] = int(0.8 * torch.cuda.mem_get_info(device)[0])
    scratch = owned_tempdir(TEMP_PREFIX, folder.parent)
    model = AutoModelForCausalLM.from_pretrained(
        folder, dtype=dtype, device_map="auto", max_memory=memory, offload_folder=str(scratch)
    ).eval()
    weakref.finalize(model, shutil.rmtree, scratch, True)
    return model
