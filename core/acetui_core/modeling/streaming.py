"""Loading for models bigger than memory (``--offload``): whether a run streams (``streaming_folder``),
the model built on the meta device with only its embeddings, final norm and head read in
(``load_streamed``; the decoder layers come from the shards while the layer loop works on them, through
``layerfeed.LayerFeed``), where a streamed run's pruned layers are written as they leave
(``PrunedLayers``), and the pruned checkpoint loaded back through accelerate's disk offloading for
zero-shot. The shard index is ``shards``.
"""

from __future__ import annotations

import copy
import logging
import shutil
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import torch
from torch import nn

from acetui_core.basics.choices import Offload, StageName
from acetui_core.basics.errors import UserError, check_choice, first_line
from acetui_core.modeling.checkpoint import SCRATCH_PREFIX, TEMP_PREFIX, LayerwiseCheckpoint
from acetui_core.modeling.conversion import ConvertedLayers, converts, renamed_keys, to_checkpoint
from acetui_core.modeling.layerfeed import set_tensor
from acetui_core.modeling.layouts import decoder_layers
from acetui_core.modeling.models import meta_skeleton, model_source
from acetui_core.modeling.scratch import owned_tempdir
from acetui_core.modeling.shards import Shards, StreamedModel, local_checkpoint, model_bytes, weight_map
from acetui_core.run.events import OnEvent, Stage

if TYPE_CHECKING:
    from transformers import PreTrainedModel

AUTO_FRACTION = 0.7  # --offload auto streams a model whose weights take more than this share of available memory


def streaming_folder(
    source: str, offload: str, dtype: torch.dtype = torch.bfloat16, evaluates: bool = True
) -> Path | None:
    """The checkpoint folder to stream from under ``offload``, or None to load the model whole; a model
    that cannot stream under ``--offload disk`` is a UserError saying why. ``auto`` streams a safetensors
    checkpoint when the run ``evaluates`` nothing, where streaming writes nothing it would not (no scratch
    copy for the evaluation to read back), takes no more time and holds one layer instead of the model
    (docs/benchmarks.md: 0.62x the reference's peak), and otherwise when the weights, loaded in ``dtype``,
    would take more than 70% of the memory available now."""
    check_choice(offload, tuple(Offload), "--offload")
    if offload == Offload.NONE:
        return None
    folder = local_checkpoint(source)
    if offload == Offload.DISK and folder is None:
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
    if offload == Offload.AUTO and folder is not None and evaluates:
        return folder if model_bytes(folder, dtype) > AUTO_FRACTION * psutil.virtual_memory().available else None
    return folder


def layer_prefixes(model: nn.Module) -> list[str]:
    """Each decoder layer's name inside the model, e.g. ``model.layers.3``."""
    names = {id(module): name for name, module in model.named_modules()}
    return [names[id(layer)] for layer in decoder_layers(model)]


def load_streamed(folder: Path, dtype: torch.dtype):
    """The model of ``folder`` with only its embeddings, final norm and head in memory (in ``dtype``);
    its decoder layers stay on the meta device until ``LayerFeed`` brings them in."""
    from transformers import AutoConfig, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(folder)
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except Exception as error:  # a damaged configuration fails in many ways
        raise UserError(
            f"The checkpoint folder {folder} could not be loaded as a model ({first_line(error)})."
        ) from None
    model = meta_skeleton(config, tie_weights=False, real_buffers=True, dtype=dtype)
    prefixes = layer_prefixes(model)
    shards = Shards(folder, weight_map(folder), dtype)
    base = model.base_model_prefix
    inside = tuple(f"{prefix}." for prefix in prefixes)
    renamed = renamed_keys(model, shards.names)
    resident = {
        name: shards.key(name, base) or renamed.get(name) for name in model.state_dict() if not name.startswith(inside)
    }
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
    layers = decoder_layers(model)
    layer0 = layers[0]
    if converts(model) and any(  # every layer: DeepSeek's first layers are dense MLPs that need no conversion
        shards.key(f"{prefix}.{name}", base) is None
        for prefix, layer in zip(prefixes, layers, strict=True)
        for name, _ in layer.named_parameters()
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


def load_for_run(
    source: str, *, device: str, dtype: str, offload: str, evaluates: bool = True, on_event: OnEvent | None = None
):
    """Load ``source`` whole (``models.load_model``) or, when ``offload`` says so (``streaming_folder``: for
    ``auto``, whether a run of it ``evaluates``), streamed: a ``Loaded`` whose decoder layers stay on disk
    until the layer loop needs them."""
    from acetui_core.basics.paths import model_identity
    from acetui_core.modeling.models import Loaded, context_length, load_model, resolve_device, resolve_dtype

    compute_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, compute_device)
    folder = streaming_folder(source, offload, torch_dtype, evaluates)
    if folder is None:
        return load_model(source, device=device, dtype=dtype, on_event=on_event)
    if on_event:
        on_event(Stage(StageName.LOAD, 0, 1))
    model, tokenizer, streamed = load_streamed(folder, torch_dtype)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if on_event:
        on_event(Stage(StageName.LOAD, 1, 1))
    context = context_length(model.config)
    family = model.config.model_type
    return Loaded(
        model, tokenizer, source, family, compute_device, torch_dtype, context, model_identity(folder), streamed
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
        # its parameters and persistent buffers, as save_pretrained writes a layer (DeepSeek's router bias)
        state = {f"{prefix}.{name}": t.data for name, t in layer.state_dict(keep_vars=True).items()}
        if self.streamed.converted is None:
            tensors = {name: self._stored(name, t) for name, t in state.items()}
        else:  # in the checkpoint's own layout, as save_pretrained writes it (read back converted)
            tensors = {key: self._stored(key, t) for key, t in to_checkpoint(self.loaded.model, state).items()}
        self.checkpoint.write_layer(index, tensors)

    def _stored(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` in the dtype the source checkpoint keeps the tensor ``name`` in (a model or checkpoint name)."""
        shards = self.streamed.shards
        key = shards.key(name, self.streamed.base_prefix) or name
        return tensor.to(shards.stored.get(key, tensor.dtype))

    def finish(self) -> Path:
        """Write the resident tensors, config and tokenizer; the checkpoint is complete from here on."""
        model = self.loaded.model
        inside = tuple(f"{prefix}." for prefix in self.streamed.prefixes)
        resident, seen = {}, set()
        for name, tensor in model.state_dict().items():
            if name.startswith(inside) or tensor.data_ptr() in seen:  # a tied head is the embeddings again
                continue
            seen.add(tensor.data_ptr())
            resident[name] = tensor
        # named as save_pretrained names them (GPT-NeoX: embed_out), in the dtype the source keeps them in
        resident = {key: self._stored(key, tensor) for key, tensor in to_checkpoint(model, resident).items()}
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
