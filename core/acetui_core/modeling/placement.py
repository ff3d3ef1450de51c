"""Where a run's tensors and layers are: the compute device of each decoder layer (the streaming feed of
``acetui_core.modeling.streaming``, or where accelerate put it), where calibration activations are kept (GPU or
pinned CPU memory), the capture of decoder layer 0's inputs, a layer's forward pass over them, and the
placement of the whole model for evaluation. The layer loop, OWL's pass and streamed evaluation share it."""

from __future__ import annotations

import contextlib

import torch

from acetui_core.basics.errors import check_stop
from acetui_core.modeling.layerfeed import LayerFeed
from acetui_core.modeling.layouts import decoder_layers
from acetui_core.modeling.models import Loaded


class StopForward(Exception):
    """Ends a forward pass early: once layer 0's inputs are captured, or a layer's last linear input is recorded."""


def to_device(value, device):
    """Move tensors (also inside tuples, lists and dicts) to ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    return value


def module_device(module) -> torch.device:
    return next(module.parameters()).device


def _on(tensor: torch.Tensor, device: torch.device) -> bool:
    return tensor.device.type == device.type and (device.index is None or tensor.device.index == device.index)


@contextlib.contextmanager
def all_but_layers_on(model, device: torch.device):
    """Embeddings, rotary tables, norms and head on ``device`` inside the block, back where they were
    after it. The layer loop needs none of them on the GPU: only the capture of layer 0's inputs and the
    head of an evaluation do (on the LLaMA-2-70B shape they are 1.5 GiB, as much as a decoder layer)."""
    layers = decoder_layers(model)
    inside = {id(m) for layer in layers for m in layer.modules()}
    params, buffers = [], []  # what moved, with its tensor before the move
    for module in model.modules():
        if id(module) in inside:
            continue
        for param in module.parameters(recurse=False):
            if not _on(param, device):  # a tied head is the embeddings' parameter: moved once
                params.append((param, param.data))
                param.data = param.data.to(device)
        for name, buffer in module.named_buffers(recurse=False):
            if not _on(buffer, device):
                buffers.append((module, name, buffer))
                module._buffers[name] = buffer.to(device)
    try:
        yield
    finally:
        for param, data in params:
            param.data = data
        for module, name, buffer in buffers:
            module._buffers[name] = buffer


def activation_device(loaded: Loaded, windows: torch.Tensor, hidden_size: int) -> torch.device:
    """Keep calibration activations on the GPU only when two copies (the most the loop holds: with output
    fidelity or OWL) use under a quarter of its free memory."""
    if loaded.device.type != "cuda":
        return loaded.device
    need = 2 * windows.numel() * hidden_size * torch.finfo(loaded.dtype).bits // 8
    free, _ = torch.cuda.mem_get_info(loaded.device)
    return loaded.device if need < free / 4 else torch.device("cpu")


def _keep(hidden: torch.Tensor, keep_on: torch.device) -> torch.Tensor:
    """Hidden states where the layer loop keeps them: a GPU run whose activations do not fit on the GPU
    keeps them in pinned CPU memory, so each batch's copy to the GPU is fast."""
    if keep_on.type == "cpu" and hidden.device.type == "cuda":
        return hidden.to("cpu").pin_memory()
    return hidden.to(keep_on)


@torch.no_grad()
def capture_layer0_inputs(
    loaded: Loaded, windows: torch.Tensor, batch: int, keep_on, cancel=None, stage: str = "calibration"
) -> list[tuple]:
    """Run the model up to decoder layer 0 and keep, per batch, its hidden states and keyword arguments
    (attention mask, position ids, rotary embeddings); ``cancel`` is checked before each batch."""
    model, layers = loaded.model, decoder_layers(loaded.model)
    captured = []

    def grab(module, args, kwargs):
        hidden = args[0] if args else kwargs.pop("hidden_states")
        kwargs = {k: v for k, v in kwargs.items() if k not in ("past_key_value", "past_key_values", "use_cache")}
        captured.append((_keep(hidden.contiguous(), keep_on), to_device(kwargs, keep_on)))  # written over in place
        raise StopForward

    hook = layers[0].register_forward_pre_hook(grab, with_kwargs=True)
    placed = (
        all_but_layers_on(model, loaded.device) if not hasattr(model, "hf_device_map") else contextlib.nullcontext()
    )
    try:
        with placed:
            for start in range(0, len(windows), batch):
                check_stop(cancel, f"while capturing layer 0's {stage} inputs (window {start} of {len(windows)})")
                with contextlib.suppress(StopForward):
                    model(input_ids=windows[start : start + batch].to(loaded.device), use_cache=False)
    finally:
        hook.remove()
    return captured


def layer_forward(layer, hidden, kwargs, device):
    out = layer(hidden.to(device), **to_device(kwargs, device))
    return out[0] if isinstance(out, tuple) else out


@torch.no_grad()
def advance(layer, inputs, device, dense_outputs=None, agreement=None) -> bool:
    """Run every batch of ``inputs`` through ``layer`` and write its output over the batch's input, which
    nothing needs any more: the loop holds one copy of the activations, not two (Wanda's code keeps
    inputs and outputs). Outputs are compared on the way with the dense outputs when there are some,
    each dropped once compared. Returns whether the layer returns a tuple (``_Replay`` must do the same)."""
    as_tuple = False
    for hidden, kwargs in inputs:
        out = layer(hidden.to(device), **to_device(kwargs, device))
        as_tuple = isinstance(out, tuple)
        hidden.copy_(out[0] if as_tuple else out)
        if agreement is not None:
            agreement.add(dense_outputs.pop(0), hidden)
    return as_tuple


def layer_feed(loaded: Loaded, release=None) -> LayerFeed | None:
    """How layers reach the compute device: a ``LayerFeed``, or None for a model accelerate has already
    spread over devices (compare/sweep reuse a model placed for evaluation), whose layers run where they are."""
    if hasattr(loaded.model, "hf_device_map"):
        return None
    return LayerFeed(loaded.model, loaded.device, loaded.streamed, release)


def place_for_eval(loaded: Loaded) -> None:
    """Put the whole model on the compute device for evaluation when it fits; otherwise let accelerate
    spread it over GPU and CPU."""
    model: torch.nn.Module = loaded.model  # as a Module: transformers' wrapper of ``to`` confuses mypy
    if hasattr(model, "hf_device_map") or loaded.device.type != "cuda":
        return
    need = sum(p.numel() * p.element_size() for p in model.parameters())
    free, _ = torch.cuda.mem_get_info(loaded.device)
    if need < free * 0.8:
        model.to(loaded.device)
    else:
        from accelerate import dispatch_model, infer_auto_device_map

        device_map = infer_auto_device_map(
            model, max_memory={loaded.device.index or 0: int(free * 0.8), "cpu": "1000GiB"}
        )
        dispatch_model(model, device_map=device_map)
