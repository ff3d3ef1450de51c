"""How the layer loop gets a decoder layer onto its compute device and off again (``LayerFeed``),
resident or streamed, CPU or GPU: the next layer is prepared in a background thread (read from the
shards, copied to the GPU on a side CUDA stream) while the current one is scored, so reads and transfers
hide behind compute. Also the two moves every loader uses: putting a tensor into a module, and sending
a layer's weights back to the meta device."""

from __future__ import annotations

import ctypes
import functools
from concurrent.futures import Future, ThreadPoolExecutor

import torch
from torch import nn

from acetui_core.modeling.layouts import decoder_layers
from acetui_core.modeling.shards import StreamedModel


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


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to trim
        return None


def return_freed_memory_to_the_os() -> None:
    """Hand the pages of freed blocks back to the OS (glibc's ``malloc_trim``), once per streamed layer.
    glibc serves layer-sized blocks from heaps that fragment and only grow: on a 56-layer checkpoint, over
    600 MB of RSS that no tensor held (tests/test_streaming.py measures it). Serving every block of 1 MiB
    or more by mmap instead (acetui did until 2026-11-27) also bounded it, but cost a page fault for every
    page of every fresh batch-sized block: 24 million faults and 12% of a streamed Wanda run on SmolLM2
    (bench/peers.py), against 0.7 million with this. No-op off glibc."""
    libc = _glibc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


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
            # a resident layer already on the GPU (a compare run after an evaluation put the model there) stays
            pinned = {n: t if t.is_pinned() or t.device.type != "cpu" else t.pin_memory() for n, t in cpu.items()}
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
            return_freed_memory_to_the_os()
        else:
            for name, param in layer.named_parameters():
                if self.home[name].shape == param.shape:
                    self.home[name].copy_(param.data)
                else:  # --expert-sparsity cut it: the smaller tensor replaces the dense one
                    self.home[name] = param.data.to("cpu")
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
