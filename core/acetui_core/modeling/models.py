"""Loading models (hub id, local checkpoint folder, GGUF file) into a ``Loaded``, building a model's
skeleton on the meta device from its config, what a model source names, and device/dtype choices.
Checking a model's files before a run is ``preflight``; streaming one from disk is ``streaming``."""

from __future__ import annotations

import logging
import platform
import re
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from acetui_core.basics.choices import Dtype, StageName
from acetui_core.basics.errors import UserError, check_choice, first_line
from acetui_core.basics.paths import model_identity, user_path
from acetui_core.modeling.layouts import decoder_layers, prunable_linears
from acetui_core.run.basic_settings import FULL_CONTEXT_CAP
from acetui_core.run.events import OnEvent, Stage

if TYPE_CHECKING:  # transformers is imported only when a model is loaded (a fast CLI start)
    from transformers import PreTrainedModel


DEVICE_NAME = re.compile(r"auto|cpu|cuda(:[0-9]+)?")


def check_device_name(name: str) -> str:
    """A device name acetui knows, whether or not this machine has it (a Slurm node or a plan may)."""
    if not DEVICE_NAME.fullmatch(str(name)):
        raise UserError(f"Unknown device '{name}'; use auto, cpu or cuda[:i].")
    return name


def resolve_device(name: str) -> torch.device:
    check_device_name(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UserError(
                f"--device {name} was asked for, but torch sees no CUDA GPU on this machine; use --device cpu."
            )
        index = torch.device(name).index or 0
        if index >= torch.cuda.device_count():
            raise UserError(f"--device {name} does not exist; this machine has {torch.cuda.device_count()} GPU(s).")
        return torch.device(name)
    return torch.device("cpu")


def device_name(device: torch.device) -> str:
    """The hardware behind ``device``: the GPU's name, or the CPU's model name."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == Dtype.AUTO:
        if device.type == "cpu":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    dtypes: dict[str, torch.dtype] = {
        Dtype.FLOAT32: torch.float32,
        Dtype.FLOAT16: torch.float16,
        Dtype.BFLOAT16: torch.bfloat16,
    }
    return dtypes[check_choice(name, tuple(Dtype), "dtype")]


@dataclass
class Loaded:
    model: PreTrainedModel
    tokenizer: object
    source: str
    family: str
    device: torch.device
    dtype: torch.dtype
    context_length: int
    fingerprint: str | None = None  # the model files' identity, or the hub revision
    streamed: Any = None  # a ``shards.StreamedModel`` when decoder layers are read from disk (typed loosely:
    # shards imports this module)
    _dense: dict = field(default_factory=dict, repr=False)
    experts_cut: bool = False  # --expert-sparsity changed the model's shapes: it cannot be reset, only reloaded

    def snapshot(self) -> None:
        """Keep a CPU copy of every decoder linear's weight, so ``reset`` can undo a pruning run (a streamed
        model needs none: its dense weights are the shards on disk)."""
        if self.streamed is not None:
            return
        self._dense = {
            (i, name): matrix.weight.detach().to("cpu", copy=True)
            for i, layer in enumerate(decoder_layers(self.model))
            for name, matrix in prunable_linears(layer).items()
        }

    @property
    def can_reset(self) -> bool:
        """Whether ``reset`` can restore the dense weights: a streamed model always can."""
        return not self.experts_cut and (self.streamed is not None or bool(self._dense))

    def reset(self, keep_copy: bool = True) -> None:
        """Restore the dense weights captured by ``snapshot`` (compare/sweep prune one model repeatedly);
        ``keep_copy=False`` lets the copy go, for the last run of the model."""
        if self.experts_cut:
            raise RuntimeError("a model whose experts were removed cannot be reset; load it again")
        if self.streamed is not None:
            return
        if not self._dense:
            raise RuntimeError("reset() needs snapshot() first")
        for i, layer in enumerate(decoder_layers(self.model)):
            for name, matrix in prunable_linears(layer).items():
                matrix.weight.copy_(self._dense[(i, name)])
        if not keep_copy:
            self._dense = {}


@contextmanager
def quiet_transformers():
    """Mute transformers' own tqdm bars (loading weights, writing shards, and the GGUF reader's
    de-quantizing bar): they would break the CLI's live display and fill the run's log file with bar
    redraws, while our ``Stage`` events already show loading and saving."""
    from functools import partial
    from unittest import mock

    from tqdm.auto import tqdm
    from transformers.utils import logging as hf_logging

    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        # The GGUF reader calls tqdm itself, past transformers' switch; its module's name is the handle.
        with mock.patch("transformers.modeling_gguf_pytorch_utils.tqdm", partial(tqdm, disable=True)):
            yield
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()


def context_length(config) -> int:
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return FULL_CONTEXT_CAP


def meta_skeleton(config, *, tie_weights: bool = True, real_buffers: bool = False, dtype: torch.dtype | None = None):
    """The model ``config`` describes with no weight in memory: its parameters on the meta device (in
    ``dtype``, else the config's). Planning counts its parameters and the preflight check its shapes;
    streaming reads its weights in later.

    ``tie_weights`` ties a head the config ties to the input embeddings (on the meta device ``from_config``
    leaves it untied: a count would count it twice). ``real_buffers`` keeps the buffers (rotary tables)
    in memory, as a streamed model needs them to run and no checkpoint holds them; that takes accelerate's
    ``init_empty_weights``, which patches ``nn.Module`` for the whole process, so only the loading thread
    may ask for it. Otherwise torch's device context is per thread: the New run form checks and plans in
    a thread, and a model built meanwhile elsewhere must not land on the meta device."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    with init_empty_weights() if real_buffers else torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=config.dtype if dtype is None else dtype)
    if tie_weights:
        model.tie_weights()
    return model


def _from_pretrained(source: str, dtype: torch.dtype, **kwargs):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
    model, info = cast(
        tuple[Any, dict],
        AutoModelForCausalLM.from_pretrained(
            source, dtype=dtype, low_cpu_mem_usage=True, output_loading_info=True, **kwargs
        ),
    )
    # transformers fills a missing weight with random values and only warns (muted here): refuse instead
    refuse_mismatch(source, sorted(info["missing_keys"]), sorted(info["unexpected_keys"]))
    return model, tokenizer


def refuse_mismatch(source, missing: list[str], unexpected: list[str]) -> None:
    """One sentence naming the weights a checkpoint lacks, or holds beyond its config.json."""

    def named(names: list[str]) -> str:
        return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")

    problems = [f"lacks {named(missing)}"] if missing else []
    problems += [f"holds {named(unexpected)}, which its config.json has no place for"] if unexpected else []
    if problems:
        raise UserError(f"The checkpoint {source} does not match its config.json: it {' and '.join(problems)}.")


def _load_gguf(path: Path, dtype: torch.dtype):
    try:
        model, tokenizer = _from_pretrained(str(path.parent), dtype, gguf_file=path.name)
    except UserError:
        raise
    except Exception as error:  # the gguf reader raises many kinds on a damaged file
        raise UserError(
            f"{path} is not a readable GGUF model file ({type(error).__name__}); it may be corrupt or truncated."
        ) from None
    # Weights come back dequantized, but the GGUF quantizer stays attached and makes
    # save_pretrained refuse; the pruned model is a plain dense checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False
    return model, tokenizer


def _load_folder(path: Path, dtype: torch.dtype):
    try:
        return _from_pretrained(str(path), dtype)
    except UserError:
        raise
    except Exception as error:  # a damaged checkpoint fails in many ways: truncated shards, bad config values, shapes
        raise UserError(f"The checkpoint folder {path} could not be loaded as a model ({first_line(error)}).") from None


def _load_hub(repo_id: str, dtype: torch.dtype):
    try:
        return _from_pretrained(repo_id, dtype)
    except (OSError, ValueError) as error:
        raise UserError(
            f"Model '{repo_id}' is neither a local path nor reachable on the Hugging Face hub "
            f"({str(error).splitlines()[0][:160]})."
        ) from None


def _looks_like_path(source: str) -> bool:
    return source.startswith((".", "/", "~")) or source.endswith(".gguf") or source.count("/") > 1


def model_source(source: str) -> tuple[str, Path | str]:
    """What ``source`` names, checked without loading anything: ``("gguf", file)``, ``("folder", dir)`` or
    ``("hub", repo id)``; a missing or unusable path is a UserError, and so is nothing at all (an unset
    variable, an empty field), never taken for the working folder or the default model."""
    if not str(source or "").strip():
        raise UserError("Choose a model: a Hugging Face id, a checkpoint folder or a .gguf file.")
    path = user_path(source)
    if path.is_file() and path.suffix == ".gguf":
        return "gguf", path
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserError(f"{path} is a folder but not a Hugging Face model (it has no config.json).")
        return "folder", path
    if path.exists():
        raise UserError(f"{source} is neither a model folder nor a .gguf file.")
    if _looks_like_path(source):
        raise UserError(f"Model path {source} does not exist.")
    return "hub", source


def model_gone(source: str) -> bool:
    """Whether ``source`` names a local model path that does not exist (``model_source`` refuses it): a
    model folder moved or deleted after its runs."""
    return bool(str(source or "").strip()) and _looks_like_path(source) and not user_path(source).exists()


def load_model(source: str, *, device: str = "auto", dtype: str = "auto", on_event: OnEvent | None = None) -> Loaded:
    """Load a causal LM on CPU (decoder layers move to ``device`` one at a time while pruning)."""
    compute_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, compute_device)
    kind, path = model_source(source)
    loaders: dict[str, Callable[[Any, torch.dtype], tuple[Any, Any]]] = {
        "gguf": _load_gguf,
        "folder": _load_folder,
        "hub": _load_hub,
    }
    load = loaders[kind]
    if on_event:  # only now: a bad path is reported without a progress bar in front of it
        on_event(Stage(StageName.LOAD, 0, 1))
    logging.getLogger("transformers").setLevel(logging.ERROR)
    with quiet_transformers():
        model, tokenizer = load(path, torch_dtype)
    model.eval()
    decoder_layers(model)  # unsupported families fail here, before any work
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if on_event:
        on_event(Stage(StageName.LOAD, 1, 1))
    fingerprint = model_identity(path) if kind != "hub" else getattr(model.config, "_commit_hash", None)
    return Loaded(
        model,
        tokenizer,
        source,
        model.config.model_type,
        compute_device,
        torch_dtype,
        context_length(model.config),
        fingerprint,
    )
